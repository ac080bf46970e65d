"""The simulated executor: an iteration's time from a model, tokens from the trace (paper §6).

It plugs into the serving loop (:class:`paged.core.serving_loop.ServingLoop`) where the real engine
plugs in its model: the scheduler and the KV cache managers are the real ones, only time is modelled.
Each scheduled sequence gains one token per iteration and a request finishes when it has generated its
trace output length (the simulator knows it; the real engine samples until a stop).

Beam search (§4.4): a group carrying a recorded search (``group.beam``, :mod:`paged.sim.beam_replay`)
replays it: after each iteration, candidates no new candidate continues finish (their blocks go back),
the others fork as the recording says (sharing every block), and each new candidate gains its token.
Where the KV cache manager cannot share (``fork_copies_kv``: a contiguous reservation), each fork copies
the parent's KV into the child's reservation and the step's time grows by ``kv_copy_time(tokens)``;
paged's copy-on-write block copies are priced with the next iteration (``blocks_to_copy``). Both are
counted: ``copied_tokens`` / ``copy_seconds`` and ``cow_blocks`` / ``cow_seconds``.

A time model that returns a negative, NaN or infinite time is refused (:class:`InvalidTimeError`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from paged.core.scheduler import Scheduler, SchedulerOutputs
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus
from paged.sim.iteration_cost import IterationCostModel

__all__ = ["SimulatedExecutor", "InvalidTimeError", "check_seconds", "describe_time_model"]


class InvalidTimeError(ValueError):
    """A time model returned a negative, NaN or infinite number of seconds for an iteration."""


def describe_time_model(iteration_time) -> str:
    """A short name of a time model for an error: its class and model (a cost model), or its repr."""
    model = getattr(getattr(iteration_time, "model", None), "name", None)
    return f"{type(iteration_time).__name__} of {model}" if model else repr(iteration_time)


def check_seconds(seconds: float, iteration_time, iteration: int) -> float:
    """``seconds`` if it is a finite number ≥ 0, else :class:`InvalidTimeError` naming the time model and
    the iteration (counted from 1)."""
    if not 0.0 <= seconds < math.inf:  # False for NaN too
        raise InvalidTimeError(f"the time model {describe_time_model(iteration_time)} gave {seconds!r} s for "
                               f"iteration {iteration}: an iteration's time must be a finite number ≥ 0")
    return seconds


class SimulatedExecutor:
    """Runs scheduled iterations in simulated time (a :class:`paged.core.serving_loop.Executor`).

    Args:
        iteration_time: seconds one iteration takes, given what the scheduler scheduled: a time model
            (:class:`~paged.sim.iteration_cost.IterationCostModel`, which also prices copies), or any
            callable (a constant when only memory matters).
        first_fork_id: the sequence id of the first beam candidate forked (above every id of the
            requests' own sequences).

    Attributes:
        now: the simulated clock (seconds).
        num_iterations: iterations run (the count a time error names).
        copied_tokens, copy_seconds: KV tokens copied by contiguous forks and the seconds charged.
        cow_blocks, cow_seconds: copy-on-write block copies and the seconds charged (paged).
    """

    __slots__ = ("now", "iteration_time", "num_iterations", "next_seq_id", "copied_tokens", "copy_seconds",
                 "cow_blocks", "cow_seconds")

    def __init__(self, iteration_time: Callable[[SchedulerOutputs], float], *, first_fork_id: int = 1 << 40) -> None:
        self.now = 0.0
        self.iteration_time = iteration_time
        self.num_iterations = 0
        self.next_seq_id = first_fork_id
        self.copied_tokens = self.cow_blocks = 0
        self.copy_seconds = self.cow_seconds = 0.0

    def wait_until(self, time: float) -> None:
        """Jump the clock to ``time`` (seconds): nothing runs while no request is there."""
        self.now = time

    def execute(self, scheduler: Scheduler, outputs: SchedulerOutputs) -> bool:
        """Advance the clock by the iteration's time; every running sequence of the scheduled groups
        gains one token (a beam group: after its candidates fork and drop as recorded) and finishes at
        its group's ``output_len``. O(sequences). True if any finished.

        Token counts only: a simulated sequence's ``token_ids`` (if any) stay its prompt's.

        Raises:
            InvalidTimeError: if the time model gives a negative, NaN or infinite time.
        """
        self.num_iterations += 1
        self.now = now = self.now + check_seconds(self.iteration_time(outputs), self.iteration_time,
                                                  self.num_iterations)
        costed = isinstance(self.iteration_time, IterationCostModel)  # a bare callable prices no copy
        if outputs.blocks_to_copy:
            self.cow_blocks += len(outputs.blocks_to_copy)
            self.cow_seconds += self.iteration_time.block_copy_time(len(outputs.blocks_to_copy)) if costed else 0.0
        any_finished = False
        copied = 0
        for group in outputs.scheduled_seq_groups:
            if group.first_token_time is None:
                group.first_token_time = now
            if getattr(group, "beam", None) is not None:
                finished, tokens = self.beam_step(scheduler, group)
                any_finished |= finished
                copied += tokens
                continue
            for seq in group.get_seqs(SequenceStatus.RUNNING):
                seq.num_generated += 1
                if seq.num_generated >= group.output_len:
                    scheduler.finish_seq(seq)
                    any_finished = True
        if copied:  # contiguous forks copy the parents' KV before the next step
            seconds = self.iteration_time.kv_copy_time(copied) if costed else 0.0
            self.copied_tokens += copied
            self.copy_seconds += seconds
            self.now += seconds
        return any_finished

    def beam_step(self, scheduler: Scheduler, group: SequenceGroup) -> tuple[bool, int]:
        """One step of a replayed beam search (module docstring): the candidates no new candidate continues
        finish (``Scheduler.finish_seq``), each later child of a parent forks it (``Scheduler.fork_seq``),
        and every new candidate gains its token. ``(finished, KV tokens copied by forks)``; the tokens are 0
        unless the manager copies on fork. O(candidates) scheduler calls."""
        candidates = group.get_seqs(SequenceStatus.RUNNING)
        step = candidates[0].num_generated
        if step + 1 >= group.output_len:  # the last token: every candidate's hypothesis is done
            for seq in candidates:
                seq.num_generated += 1
                scheduler.finish_seq(seq)
            return True, 0
        copied = 0
        parents = group.beam.parents(step)
        kept = set(parents)
        for i, seq in enumerate(candidates):  # dropped first: their blocks (or reservations) go back
            if i not in kept:
                scheduler.finish_seq(seq)
                group.seqs.remove(seq)
        targets, continued = [], set()
        for p in parents:
            parent = candidates[p]
            if p in continued:  # another child of the same parent: a fork sharing its blocks
                child = Sequence(self.next_seq_id, parent.prompt_len, parent.num_generated, parent.token_ids,
                                 parent_seq_id=parent.seq_id)
                self.next_seq_id += 1
                scheduler.fork_seq(group, parent, child)
                if scheduler.kv_manager.fork_copies_kv:
                    copied += parent.num_tokens
                targets.append(child)
            else:
                continued.add(p)
                targets.append(parent)
        for seq in targets:
            seq.num_generated += 1
        group.seqs[:] = targets  # candidate order, best first, as the recording's indices
        return False, copied
