"""Beam search, one step at a time over a request's live candidates (paper §4.4, Fig. 9).

:func:`beam_search_step` follows Hugging Face transformers' beam search (5.x,
``GenerationMixin._beam_search``) so the two can be compared token for token: top
``K = max(2, 1 + #stop tokens) × beam_width`` continuations by accumulated log-probability; among
the first ``beam_width`` of them, those ending in a stop token (or reaching ``max_tokens``) become
finished hypotheses scored ``logprob / generated_len ** length_penalty``; the best ``beam_width``
unfinished continuations live on; the same ``early_stopping`` rule (``True`` / ``False`` heuristic /
``"never"``). Which candidate continues which parent is returned, so the engine can fork the
survivors' sequences from their parents (sharing every block, §4.4) and free the dropped ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["BeamSearchState", "BeamStepResult", "beam_search_step"]

_NEG = -1.0e9  # Hugging Face's "impossible" score


@dataclass(slots=True)
class BeamSearchState:
    """Beam search bookkeeping of one request (``EngineSequenceGroup.beam``).

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
