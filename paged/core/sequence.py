"""Sequences and sequence groups: the scheduler's units of work (paper §4.5).

A :class:`Sequence` is one stream of tokens (a prompt plus what has been generated so far). A
:class:`SequenceGroup` is one request: the sequences that share its prompt (parallel samples or
beam candidates). The scheduler admits, preempts and resumes whole groups (§4.5).

Token accounting, used everywhere: before a step runs a sequence, its KV cache must have room
for ``num_tokens`` tokens. A prefill computes the KV of every token it is given and samples one
new token; a decode computes the KV of the last token and samples the next. So a sequence that
finishes with ``prompt_len + output_len`` tokens has held at most ``prompt_len + output_len - 1``
KV slots.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

__all__ = ["SequenceStatus", "Sequence", "SequenceGroup"]


class SequenceStatus(enum.Enum):
    """Where a sequence is in its life (vLLM's names)."""

    WAITING = "waiting"  # queued for a prefill (new, or preempted by recomputation)
    RUNNING = "running"  # its KV cache is on the GPU; it decodes every step
    SWAPPED = "swapped"  # preempted by swapping: its KV blocks are in CPU memory
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class Sequence:
    """One token stream of a request.

    Attributes:
        seq_id: unique id (int).
        prompt_len: prompt tokens (tokens, ≥ 1).
        num_generated: output tokens generated so far (tokens).
        token_ids: the token ids (prompt then output) when a real model runs; ``None`` in the
            simulator, which only counts tokens.
        status: see :class:`SequenceStatus`.
        parent_seq_id: the sequence this one was forked from (beam search / sampling), or None.
        finish_reason: once finished: ``"stop"`` (a stop or end-of-sequence token), ``"length"``
            (its output length or ``max_tokens`` reached), ``"abort"`` (its request was aborted, or the
            run it was in was interrupted); None before.
    """

    seq_id: int
    prompt_len: int
    num_generated: int = 0
    token_ids: list[int] | None = None
    status: SequenceStatus = SequenceStatus.WAITING
    parent_seq_id: int | None = None
    finish_reason: str | None = None

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens (tokens)."""
        return self.prompt_len + self.num_generated

    def append_token(self, token_id: int | None = None) -> None:
        """Record one generated token (its id too, when the sequence keeps ids)."""
        self.num_generated += 1
        if self.token_ids is not None:
            self.token_ids.append(token_id)

    @property
    def output_token_ids(self) -> list[int]:
        """The generated token ids (empty when ids are not kept)."""
        return [] if self.token_ids is None else self.token_ids[self.prompt_len :]


@dataclass(slots=True, eq=False)
class SequenceGroup:
    """One request: the sequences generated from the same prompt.

    Attributes:
        request_id: the request's id.
        arrival_time: when the request arrived (seconds).
        seqs: its sequences; one for greedy/basic sampling, several for parallel sampling or
            beam search.
        output_len: output tokens each sequence will generate (tokens). The simulator knows it
            from the trace; the real engine uses ``max_tokens`` (a stop token may end earlier).
            Contiguous baselines read it to size reservations (Oracle, Pow2).
        sampling_params: decoding parameters when a real model runs (engine), else None.
        first_scheduled_time, first_token_time, finished_time: filled by the executor (seconds).
        num_preemptions: times the scheduler preempted the group.
        max_num_seqs: the most sequences the group will hold at once when that is more than it
            holds now (beam search: its width, reached by forking after the prefill); 0 otherwise.
        prefix_len: tokens at the start of the prompt that are a prefix shared with other requests
            and reserved by the service provider (§4.4, "shared prefix": its KV blocks are computed in
            advance and shared by every request that starts with it); 0 for none. Requests with the
            same ``prefix_len`` share the same prefix (a trace carries one few-shot prefix).
        num_cached_tokens: prompt tokens whose KV was already in the cache at the group's first
            prefill (prefix-cache hits or a reserved prefix), set by the scheduler (vLLM's name).
        aborted: True once the request was aborted (:meth:`paged.core.Scheduler.abort_seq_group`)
            or the run serving it was interrupted.

    The real engine's groups (:class:`paged.engine.sequence_group.EngineSequenceGroup`) add typed
    sampling state (generator, beam search state).
    """

    request_id: Any
    arrival_time: float
    seqs: list[Sequence]
    output_len: int
    sampling_params: Any = None
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None
    num_preemptions: int = 0
    max_num_seqs: int = 0
    prefix_len: int = 0
    num_cached_tokens: int = 0
    aborted: bool = False

    @property
    def prompt_len(self) -> int:
        """Prompt tokens of the request (tokens)."""
        return self.seqs[0].prompt_len

    @property
    def peak_num_seqs(self) -> int:
        """The most sequences the group will hold at once: ``max(len(seqs), max_num_seqs)``."""
        return max(len(self.seqs), self.max_num_seqs)

    def get_seqs(self, status: SequenceStatus | None = None) -> list[Sequence]:
        """The group's sequences, optionally only those with ``status``."""
        seqs = self.seqs
        if status is None:
            return list(seqs)
        if len(seqs) == 1:  # the common case (one sample), asked for every group every iteration
            return list(seqs) if seqs[0].status is status else []
        return [seq for seq in seqs if seq.status is status]

    def num_seqs(self, status: SequenceStatus | None = None) -> int:
        """How many sequences (with ``status``, if given) the group has. O(1) for one sequence."""
        seqs = self.seqs
        if status is None:
            return len(seqs)
        if len(seqs) == 1:  # the common case (one sample), called for every group every iteration
            return 1 if seqs[0].status is status else 0
        return sum(1 for seq in seqs if seq.status is status)

    def is_finished(self) -> bool:
        """True once every sequence of the group has finished. O(1) for one sequence."""
        seqs = self.seqs
        if len(seqs) == 1:
            return seqs[0].status is SequenceStatus.FINISHED
        return all(seq.status is SequenceStatus.FINISHED for seq in seqs)
