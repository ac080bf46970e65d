"""Sequences and sequence groups: the scheduler's units of work (paper §4.5).

A :class:`Sequence` is one token stream (prompt plus output so far); a :class:`SequenceGroup` is one
request: the sequences sharing its prompt (parallel samples or beam candidates). The scheduler admits,
preempts and resumes whole groups.

Token accounting, used everywhere: before a step runs a sequence, its KV cache must have room for
``num_tokens`` tokens. A prefill computes the KV of every token it is given and samples one; a decode computes
the last token's KV and samples the next. So a sequence finishing with ``prompt_len + output_len`` tokens
has held at most ``prompt_len + output_len - 1`` KV slots.
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
    """One token stream of a request; lengths in tokens."""

    seq_id: int  #: unique
    prompt_len: int  #: prompt tokens (≥ 1)
    num_generated: int = 0  #: output tokens so far
    token_ids: list[int] | None = None  #: prompt then output ids when a real model runs; None in the simulator
    status: SequenceStatus = SequenceStatus.WAITING
    parent_seq_id: int | None = None  #: the sequence this one was forked from (beam search, sampling), or None
    #: once finished, ``"stop"`` (stop or end-of-sequence token), ``"length"`` (output length or ``max_tokens``
    #: reached) or ``"abort"`` (request aborted or run interrupted); None before
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
    """One request: the sequences generated from one prompt; lengths in tokens, times in seconds. The engine's
    subclass (:class:`paged.engine.sequence_group.EngineSequenceGroup`) adds sampling state."""

    request_id: Any
    arrival_time: float
    seqs: list[Sequence]  #: one, or several for parallel sampling or beam search
    #: output tokens each sequence will generate: the trace's (simulator) or ``max_tokens`` (engine; a stop token
    #: may end earlier). Orca's Oracle and Pow2 size reservations by it.
    output_len: int
    sampling_params: Any = None  #: decoding parameters when a real model runs
    first_scheduled_time: float | None = None  #: this and the next two are set by the executor
    first_token_time: float | None = None
    finished_time: float | None = None
    num_preemptions: int = 0
    max_num_seqs: int = 0  #: the most sequences held at once if more than now (a beam width, reached by forking)
    #: leading prompt tokens forming a provider-reserved prefix whose KV is computed in advance and shared
    #: (§4.4, "shared prefix"); 0 for none. Equal ``prefix_len`` means the same prefix.
    prefix_len: int = 0
    num_cached_tokens: int = 0  #: prompt tokens already cached at the first prefill; set by the scheduler
    aborted: bool = False  #: the request was aborted, or the run serving it interrupted

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
