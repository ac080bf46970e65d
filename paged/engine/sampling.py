"""Choosing the next tokens: greedy and temperature / top-p sampling (paper §4.4).

* :class:`SamplingParams` holds a request's decoding parameters (vLLM's names), beam search's too
  (the step itself is :mod:`paged.engine.beam_search`).
* :func:`sample` draws one token per row of logits with the request's own seeded
  ``torch.Generator``, so a seeded request gives the same tokens whatever it is batched with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from paged.core.checks import as_token_ids

__all__ = ["SamplingParams", "sample", "make_generator"]


@dataclass(slots=True)
class SamplingParams:
    """Decoding parameters of one request (vLLM's ``SamplingParams``).

    Attributes:
        n: completions returned: parallel samples (§4.4), or the best ``n`` beams.
        temperature: 0 means greedy; otherwise logits are divided by it before sampling.
        top_p: nucleus sampling: keep the smallest set of tokens whose probability ≥ ``top_p``.
        max_tokens: most tokens generated per completion (tokens, ≥ 1).
        seed: seed of the request's ``torch.Generator`` (None: drawn from torch's global RNG).
        beam_width: > 1 turns on beam search with that many candidates (§4.4).
        length_penalty: beam search: a finished hypothesis scores ``logprob / len ** length_penalty``.
        early_stopping: beam search: ``True``, ``False`` or ``"never"`` (Hugging Face's meanings).
        stop_token_ids: tokens that end a completion (kept in the output, as Hugging Face does).
        ignore_eos: do not stop at the model's end-of-sequence token(s).

    Raises:
        ValueError / TypeError: on an out-of-range or mistyped field (message names it).
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 16
    seed: int | None = None
    beam_width: int = 1
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        for name in ("n", "max_tokens", "beam_width"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"SamplingParams.{name} must be an int, got {value!r}")
            if value < 1:
                raise ValueError(f"SamplingParams.{name} must be ≥ 1, got {value}")
        for name in ("temperature", "top_p", "length_penalty"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise TypeError(f"SamplingParams.{name} must be a finite number, got {value!r}")
        if not isinstance(self.ignore_eos, bool):
            raise TypeError(f"SamplingParams.ignore_eos must be True or False, got {self.ignore_eos!r}")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be ≥ 0, got {self.temperature}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not 0 <= self.seed < 2**63):
            raise ValueError(f"SamplingParams.seed must be None or an int in [0, 2**63), got {self.seed!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if self.beam_width > 1 and self.n > self.beam_width:
            raise ValueError(f"SamplingParams.n={self.n} must be ≤ beam_width={self.beam_width} for beam search")
        if self.early_stopping not in (True, False, "never"):
            raise ValueError(f"SamplingParams.early_stopping must be True, False or 'never', got {self.early_stopping!r}")
        ids = tuple(as_token_ids(self.stop_token_ids, "SamplingParams.stop_token_ids"))
        if any(t < 0 for t in ids):
            raise ValueError(f"SamplingParams.stop_token_ids must be token ids ≥ 0, got {self.stop_token_ids!r}")
        self.stop_token_ids = ids

    @property
    def use_beam_search(self) -> bool:
        """True when ``beam_width`` > 1."""
        return self.beam_width > 1

    def stop_ids(self, eos_token_ids: frozenset[int]) -> frozenset[int]:
        """Token ids that end a completion: ``stop_token_ids`` and, unless ``ignore_eos``, the model's
        end-of-sequence ids ``eos_token_ids``."""
        stop = frozenset(self.stop_token_ids)
        return stop if self.ignore_eos else stop | eos_token_ids


def make_generator(seed: int | None, device: torch.device | str = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with ``seed`` (or a seed from torch's global RNG)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(int(torch.randint(0, 2**62, ()).item()) if seed is None else int(seed))
    return gen


def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> list[int]:
    """One token per row: argmax if ``temperature == 0``, else temperature + top-p sampling.

    Args:
        logits: ``[num_rows, vocab_size]`` float.
        params: the request's parameters.
        generator: the request's generator (unused when greedy).

    Returns:
        ``num_rows`` token ids.
    """
    if params.temperature == 0:
        return logits.argmax(dim=-1).tolist()
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass strictly above each token
        sorted_probs = sorted_probs.masked_fill(before >= params.top_p, 0.0)  # the first token always stays
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    return torch.multinomial(probs, 1, generator=generator)[:, 0].tolist()
