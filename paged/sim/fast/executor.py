"""The simulated executor with a beam step in one manager call (simulator speed, §4.4).

:meth:`FastSimulatedExecutor.beam_step` does what the reference
:meth:`paged.sim.executor.SimulatedExecutor.beam_step` does — the dropped candidates finish, later
children fork their parents, every new candidate gains its token — with the same frees and forks in the
same order, but in one ``free_and_fork`` call of a fast manager, and with the step's moves computed once
per recorded step (:func:`paged.sim.fast.beam_blocks.step_moves`) instead of once per group and step.
"""

from __future__ import annotations

from paged.core.scheduler import Scheduler
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus
from paged.sim.executor import SimulatedExecutor
from paged.sim.fast.beam_blocks import step_moves

__all__ = ["FastSimulatedExecutor"]

class FastSimulatedExecutor(SimulatedExecutor):
    """:class:`~paged.sim.executor.SimulatedExecutor` whose beam step is one manager call (module
    docstring); needs a fast manager (``free_and_fork``)."""

    __slots__ = ()

    def beam_step(self, scheduler: Scheduler, group: SequenceGroup) -> tuple[bool, int]:
        running = SequenceStatus.RUNNING
        seqs = group.seqs
        candidates = [seq for seq in seqs if seq.status is running]
        step = candidates[0].num_generated
        manager = scheduler.kv_manager
        if step + 1 >= group.output_len:  # the last token: every candidate's hypothesis is done
            for seq in candidates:
                seq.num_generated += 1
                seq.status = SequenceStatus.FINISHED
            manager.free_and_fork(candidates, ())
            return True, 0
        count, dropped, moves = step_moves(group.beam, step)
        if len(candidates) != count:  # not the recording's shape (never in a replay): the reference step
            return super().beam_step(scheduler, group)
        drop = []
        for i in dropped:
            candidates[i].status = SequenceStatus.FINISHED
            drop.append(candidates[i])
        targets, forks = [], []
        next_id = self.next_seq_id
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
        self.next_seq_id = next_id
        manager.free_and_fork(drop, forks)
        copied = 0
        if forks and manager.fork_copies_kv:
            copied = sum(parent.prompt_len + parent.num_generated for parent, _ in forks)
        for seq in targets:
            seq.num_generated += 1
        seqs[:] = targets  # candidate order, best first, as the recording's indices
        return False, copied
