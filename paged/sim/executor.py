"""The simulated executor: an iteration's time from a model, tokens from the trace (paper §6).

It plugs into the serving loop (:class:`paged.core.serving_loop.ServingLoop`) where the real engine
plugs in its model: the scheduler and the KV cache managers are the real ones, only time is
modelled. Each scheduled sequence gains one token per iteration and a request finishes when it has
generated its trace output length (the simulator knows it; the real engine samples until a stop).

Beam search (§4.4): a group carrying a recorded search (``group.beam``, :mod:`paged.sim.beam_replay`)
replays it: after each iteration, candidates no new candidate continues are freed, the others fork
as the recording says (sharing every block), and each new candidate gains its token. Where the KV
cache manager cannot share (``kv_manager.fork_copies_kv``, a contiguous reservation), each fork
copies the parent's KV into the child's reservation, and the step's time grows by
``iteration_time.kv_copy_time(tokens copied)``; paged's copy-on-write block copies are priced by the
time model with the next iteration (``blocks_to_copy``). Both are counted: ``copied_tokens`` /
``copy_seconds`` (contiguous forks) and ``cow_blocks`` / ``cow_seconds`` (copy-on-write).

A beam step costs one KV cache manager call per group: the step's moves come precomputed from the
recording (:meth:`paged.sim.beam_replay.BeamTrace.moves`) and the manager's ``free_and_fork`` frees
the dropped candidates and forks the new ones in one call, the same frees and forks in the same order
as one ``Scheduler.finish_seq`` / ``Scheduler.fork_seq`` each (``batched_beam=False``, the reference
the tests compare against; also taken for a manager without ``free_and_fork``). Beam groups are
not fast-forwarded: each step changes the block tree (forks, frees, copy-on-write copies priced with
the next iteration), so it is applied to the real manager one iteration at a time. The simulator's
beam calendar (:mod:`paged.sim.beam_calendar`) runs their prefills through this executor and reads
their decode steps from per-step profiles of the recorded searches instead.

Fast-forward (:func:`paged.sim.fast_forward.decode_run`): when the time model has a
``decode_time(num_seqs, context_tokens)`` method (a :class:`paged.sim.cost_model.CostModel`),
:meth:`SimulatedExecutor.execute_run` applies a run of identical decode iterations at once, with
exactly the step-by-step results.
"""

from __future__ import annotations

from collections.abc import Callable

from paged.core.metrics import MemoryStats
from paged.core.scheduler import Scheduler, SchedulerOutputs
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus
from paged.sim.fast_forward import decode_run

__all__ = ["SimulatedExecutor"]


class SimulatedExecutor:
    """Runs scheduled iterations in simulated time (a :class:`paged.core.serving_loop.Executor`).

    Args:
        iteration_time: seconds one iteration takes, given what the scheduler scheduled (a cost
            model, or a constant when only memory matters).
        fast_forward: apply runs of identical decode iterations at once; used only when
            ``iteration_time`` has a ``decode_time(num_seqs, context_tokens)`` method. Same results.
        first_fork_id: the sequence id of the first beam candidate forked (above every id of the
            requests' own sequences).
        batched_beam: a beam step frees and forks in one manager call (``free_and_fork``, module
            docstring); False: one scheduler call per sequence. Same results.

    Attributes:
        now: the simulated clock (seconds).
        copied_tokens, copy_seconds: KV tokens copied by contiguous forks and the seconds charged.
        cow_blocks, cow_seconds: copy-on-write block copies and the seconds charged (paged).
    """

    __slots__ = ("now", "iteration_time", "decode_time", "_next_seq_id", "copied_tokens", "copy_seconds",
                 "cow_blocks", "cow_seconds", "batched_beam")

    def __init__(self, iteration_time: Callable[[SchedulerOutputs], float], *, fast_forward: bool = True,
                 first_fork_id: int = 1 << 40, batched_beam: bool = True) -> None:
        self.now = 0.0
        self.batched_beam = batched_beam
        self.iteration_time = iteration_time
        self.decode_time = getattr(iteration_time, "decode_time", None) if fast_forward else None
        self._next_seq_id = first_fork_id
        self.copied_tokens = self.cow_blocks = 0
        self.copy_seconds = self.cow_seconds = 0.0

    def wait_until(self, time: float) -> None:
        """Jump the clock to ``time`` (seconds): nothing runs while no request is there."""
        self.now = time

    def execute(self, scheduler: Scheduler, outputs: SchedulerOutputs) -> bool:
        """Advance the clock by the iteration's time; every running sequence of the scheduled groups
        gains one token (a beam group: after its candidates fork and drop as recorded) and finishes at
        its group's ``output_len``. O(sequences). True if any finished.

        Token counts only: a simulated sequence's ``token_ids`` (if any) stay its prompt's."""
        self.now = now = self.now + self.iteration_time(outputs)
        if outputs.blocks_to_copy:
            cow = getattr(self.iteration_time, "block_copy_time", None)
            self.cow_blocks += len(outputs.blocks_to_copy)
            self.cow_seconds += cow(len(outputs.blocks_to_copy)) if cow is not None else 0.0
        running = SequenceStatus.RUNNING
        any_finished = False
        copied = 0
        beam_step = None
        for group in outputs.scheduled_seq_groups:
            if group.first_token_time is None:
                group.first_token_time = now
            if getattr(group, "beam", None) is not None:
                if beam_step is None:
                    beam_step = self._beam_step
                    if not self.batched_beam or getattr(scheduler.kv_manager, "free_and_fork", None) is None:
                        beam_step = self._beam_step_reference
                finished, tokens = beam_step(scheduler, group)
                any_finished |= finished
                copied += tokens
                continue
            for seq in group.seqs:
                if seq.status is not running:
                    continue
                seq.num_generated += 1
                if seq.num_generated >= group.output_len:
                    scheduler.finish_seq(seq)
                    any_finished = True
        if copied:  # contiguous forks copy the parents' KV before the next step
            copy = getattr(self.iteration_time, "kv_copy_time", None)
            seconds = copy(copied) if copy is not None else 0.0
            self.copied_tokens += copied
            self.copy_seconds += seconds
            self.now += seconds
        return any_finished

    def _beam_step(self, scheduler: Scheduler, group: SequenceGroup) -> tuple[bool, int]:
        """One step of a replayed beam search (module docstring), the manager's frees and forks in one
        ``free_and_fork`` call: what :meth:`_beam_step_reference` does, in the same order. ``(finished,
        KV tokens copied by forks)``; the tokens are 0 unless the KV cache manager copies on fork.
        O(candidates) plus the manager's work."""
        running = SequenceStatus.RUNNING
        seqs = group.seqs
        candidates = [seq for seq in seqs if seq.status is running]
        step = candidates[0].num_generated
        manager = scheduler.kv_manager
        if step + 1 >= group.output_len:  # the last token: every candidate's hypothesis is done
            finished = SequenceStatus.FINISHED
            for seq in candidates:
                seq.num_generated += 1
                seq.status = finished
            manager.free_and_fork(candidates, ())
            return True, 0
        count, dropped, moves = group.beam.moves(step)
        if len(candidates) != count:  # not the recording's shape (never in a replay): one call each
            return self._beam_step_reference(scheduler, group)
        drop = []
        if dropped:
            finished = SequenceStatus.FINISHED
            for i in dropped:
                seq = candidates[i]
                seq.status = finished
                drop.append(seq)
        targets, forks = [], []
        next_id = self._next_seq_id
        for p, fork in moves:
            parent = candidates[p]
            if fork:  # a later child of the same parent: a fork sharing its blocks
                child = Sequence(next_id, parent.prompt_len, parent.num_generated, parent.token_ids, running,
                                 parent.seq_id)
                next_id += 1
                forks.append((parent, child))
                targets.append(child)
            else:
                targets.append(parent)
        self._next_seq_id = next_id
        manager.free_and_fork(drop, forks)
        copied = 0
        if forks and getattr(manager, "fork_copies_kv", False):
            for parent, _ in forks:
                copied += parent.prompt_len + parent.num_generated
        for seq in targets:
            seq.num_generated += 1
        seqs[:] = targets  # candidate order, best first, as the recording's indices
        return False, copied

    def _beam_step_reference(self, scheduler: Scheduler, group: SequenceGroup) -> tuple[bool, int]:
        """:meth:`_beam_step` with one ``Scheduler.finish_seq`` per dropped candidate and one
        ``Scheduler.fork_seq`` per fork, the parents read from :meth:`~paged.sim.beam_replay.BeamTrace.parents`.
        ``(finished, KV tokens copied by forks)``. O(candidates) scheduler calls."""
        candidates = [seq for seq in group.seqs if seq.status is SequenceStatus.RUNNING]
        step = candidates[0].num_generated
        if step + 1 >= group.output_len:  # the last token: every candidate's hypothesis is done
            for seq in candidates:
                seq.num_generated += 1
                scheduler.finish_seq(seq)
            return True, 0
        copies_kv = getattr(scheduler.kv_manager, "fork_copies_kv", False)
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
                child = Sequence(self._next_seq_id, parent.prompt_len, parent.num_generated, parent.token_ids,
                                 parent_seq_id=parent.seq_id)
                self._next_seq_id += 1
                scheduler.fork_seq(group, parent, child)
                if copies_kv:
                    copied += parent.num_tokens
                targets.append(child)
            else:
                continued.add(p)
                targets.append(parent)
        for seq in targets:
            seq.num_generated += 1
        group.seqs[:] = targets  # candidate order, best first, as the recording's indices
        return False, copied

    def execute_run(self, scheduler: Scheduler, outputs: SchedulerOutputs, next_arrival_time: float,
                    memory: MemoryStats | None) -> int:
        """A run of identical decode iterations (:func:`paged.sim.fast_forward.decode_run`); how many ran
        (0 when not eligible or without a ``decode_time``)."""
        if self.decode_time is None:
            return 0
        end = decode_run(scheduler, outputs, self.decode_time, self.now, next_arrival_time, memory)
        if end is None:
            return 0
        self.now, k = end
        return k
