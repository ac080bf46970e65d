"""Choosing the next tokens: greedy, temperature / top-p sampling and beam search (paper §4.4).

* :class:`SamplingParams` holds a request's decoding parameters (vLLM's names).
* :func:`sample` draws one token per row of logits with the request's own seeded
  ``torch.Generator``, so a seeded request gives the same tokens whatever it is batched with.
* :func:`beam_search_step` is one step of beam search over a request's live candidates. It follows
  Hugging Face transformers' beam search (5.x, ``GenerationMixin._beam_search``) so the two can be
  compared token for token: top ``K = max(2, 1 + #stop tokens) × beam_width`` continuations by
  accumulated log-probability; among the first ``beam_width`` of them, those ending in a stop token
  (or reaching ``max_tokens``) become finished hypotheses scored ``logprob / generated_len **
  length_penalty``; the best ``beam_width`` unfinished continuations live on; the same
  ``early_stopping`` rule (``True`` / ``False`` heuristic / ``"never"``). Which candidate continues
  which parent is returned, so the engine can fork the survivors' sequences from their parents and
  free the dropped ones (§4.4, Fig. 9).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from paged.checks import as_token_ids

__all__ = ["SamplingParams", "sample", "make_generator", "BeamSearchState", "BeamStepResult", "beam_search_step"]

_NEG = -1.0e9  # Hugging Face's "impossible" score


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


@dataclass(slots=True)
class BeamSearchState:
    """Beam search bookkeeping of one request (held in ``SequenceGroup.extra["beam"]``).

    Attributes:
        beam_width, length_penalty, early_stopping, max_tokens: from the request's parameters.
        stop_token_ids: tokens that finish a hypothesis.
        scores: accumulated log-probability of each live candidate, in candidate order (best first).
        finished: up to ``beam_width`` finished hypotheses ``(score, generated token ids)``, best first.
        improvable: Hugging Face's early-stop heuristic flag (False: no candidate can beat the
            worst finished hypothesis).
        done: the search has ended.
    """

    beam_width: int
    length_penalty: float
    early_stopping: bool | str
    max_tokens: int
    stop_token_ids: frozenset[int]
    scores: list[float] = field(default_factory=lambda: [0.0])
    finished: list[tuple[float, list[int]]] = field(default_factory=list)
    improvable: bool = True
    done: bool = False


@dataclass(slots=True)
class BeamStepResult:
    """What one beam step decided.

    Attributes:
        parents: for each new live candidate (best first), the index of its parent among the
            candidates that ran this step.
        tokens: the token each new candidate appends.
        done: True when the search ended (then ``parents`` and ``tokens`` are empty).
    """

    parents: list[int]
    tokens: list[int]
    done: bool


def beam_search_step(state: BeamSearchState, logprobs: torch.Tensor, generated: list[list[int]]) -> BeamStepResult:
    """One beam search step over a request's live candidates (§4.4; Hugging Face's rule, module docstring).

    Args:
        state: the request's state; updated in place (scores, finished, improvable, done).
        logprobs: ``[num_live, vocab_size]`` float32 log-softmax of each live candidate's logits,
            rows in the order of ``state.scores``.
        generated: each live candidate's generated token ids so far (all the same length).

    Returns:
        :class:`BeamStepResult`.
    """
    k = state.beam_width
    num_live, vocab = logprobs.shape
    gen_len = len(generated[0]) + 1  # generated tokens once this step's token is appended
    acc = logprobs.float() + torch.tensor(state.scores, dtype=torch.float32)[:, None]
    num_keep = max(2, 1 + len(state.stop_token_ids)) * k
    top_scores, top_idx = torch.topk(acc.reshape(-1), min(num_keep, num_live * vocab))
    top_scores, top_idx = top_scores.tolist(), top_idx.tolist()
    parents = [i // vocab for i in top_idx]
    tokens = [i % vocab for i in top_idx]
    at_max = gen_len >= state.max_tokens
    hits = [at_max or t in state.stop_token_ids for t in tokens]

    # Finished hypotheses: only among the first beam_width continuations (Hugging Face's rule).
    full_and_early = len(state.finished) == k and state.early_stopping is True
    if state.improvable and not full_and_early:
        for rank in range(min(k, len(tokens))):
            if hits[rank]:
                hyp = generated[parents[rank]] + [tokens[rank]]
                state.finished.append((top_scores[rank] / (gen_len ** state.length_penalty), hyp))
        state.finished.sort(key=lambda h: -h[0])
        del state.finished[k:]

    live = [r for r in range(len(tokens)) if not hits[r]][:k]
    new_scores = [top_scores[r] for r in live]
    # Early-stop heuristic, evaluated as Hugging Face does after every step.
    best_running = new_scores[0] if new_scores else top_scores[0] + _NEG
    if state.early_stopping == "never" and state.length_penalty > 0.0:
        best_len = state.max_tokens
    else:
        best_len = gen_len
    if len(state.finished) == k:
        state.improvable = state.improvable and best_running / (best_len ** state.length_penalty) > state.finished[-1][0]
    all_finished_early = len(state.finished) == k and state.early_stopping is True
    if not state.improvable or all_finished_early or all(hits) or len(live) < k and not live:
        state.done = True
        return BeamStepResult([], [], True)
    state.scores = new_scores
    return BeamStepResult([parents[r] for r in live], [tokens[r] for r in live], False)
