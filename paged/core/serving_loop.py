"""The serving loop (paper §4.5): arrivals, the scheduler and an executor, one iteration at a time.

The simulator and the real engine serve through this loop and the same scheduler; only the executor differs:
:class:`paged.sim.executor.SimulatedExecutor` (cost-model time; each scheduled sequence gains a token; trace
output lengths) or :class:`paged.engine.executor.ModelExecutor` (a real model on the paged KV cache,
wall-clock time, sampling and beam search decide tokens and stops).

One :meth:`ServingLoop.step`: admit the requests that arrived by the executor's clock; if none is left to
run, idle until the next arrival; else schedule a prefill or decode, record KV memory while requests wait
(Fig. 2), let the executor run it and retire finished requests. If anything escapes an iteration
(``KeyboardInterrupt``, an exception from the model, sampler or a callback), every request is aborted and
uncomputed prefix-cache entries are forgotten before it propagates (:meth:`ServingLoop.abandon`): the KV
cache manager is left as usable as before the loop started.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from paged.core.metrics import MemoryStats, SharingStats
from paged.core.scheduler import Scheduler, SchedulerOutputs
from paged.core.sequence import SequenceGroup, SequenceStatus

__all__ = ["Executor", "ServingLoop", "ServingResult"]


class Executor(Protocol):
    """What the serving loop needs from an executor; ``now`` is its clock (seconds since the run started)."""

    now: float

    def wait_until(self, time: float) -> None:
        """Idle until the clock reads ``time`` (seconds): jump (simulator) or sleep (real engine)."""
        ...

    def execute(self, scheduler: Scheduler, outputs: SchedulerOutputs) -> bool:
        """Run one iteration: advance the clock, give each running sequence of the scheduled groups its next
        token, ``scheduler.finish_seq`` those done; True if any finished."""
        ...


@dataclass(slots=True)
class ServingResult:
    """What one served run produced; times in seconds, counts summed over iterations."""

    groups: list[SequenceGroup]  #: every request, with its times
    num_iterations: int = 0  #: prefill and decode
    duration: float = 0.0  #: the executor's clock at the last finish
    memory: MemoryStats = field(default_factory=MemoryStats)  #: KV memory while requests waited, if recorded
    batched_requests_sum: int = 0  #: scheduled groups
    num_preemptions: int = 0  #: recomputation or swap
    sharing: SharingStats = field(default_factory=SharingStats)  #: blocks with and without sharing, if recorded
    num_prefill_iterations: int = 0
    prefill_batched_requests_sum: int = 0  #: scheduled groups of prefill iterations
    prefill_tokens: int = 0  #: tokens computed by prefill iterations
    recomputed_tokens: int = 0  #: of those, tokens of sequences preempted after they had generated (§4.5)
    busy_seconds: float = 0.0  #: executor time running iterations (idle waits left out)
    batched_requests_seconds: float = 0.0  #: scheduled groups × iteration seconds (request-seconds)
    kv_copy_tokens: int = 0  #: KV tokens copied on device by a contiguous system's forks (§4.4; simulator)
    kv_copy_seconds: float = 0.0  #: their charged seconds, part of ``busy_seconds``
    cow_blocks: int = 0  #: copy-on-write block copies (paged, §4.4; simulator)
    cow_seconds: float = 0.0  #: their seconds, part of ``busy_seconds``

    @property
    def avg_batched_requests(self) -> float:
        """Mean requests per iteration's batch, prefill iterations included (requests)."""
        return self.batched_requests_sum / self.num_iterations if self.num_iterations else 0.0

    @property
    def avg_decode_batched_requests(self) -> float:
        """Mean requests per decode iteration's batch (requests)."""
        n = self.num_iterations - self.num_prefill_iterations
        return (self.batched_requests_sum - self.prefill_batched_requests_sum) / n if n else 0.0

    @property
    def time_avg_batched_requests(self) -> float:
        """Mean requests in the running batch, weighted by busy seconds (requests)."""
        return self.batched_requests_seconds / self.busy_seconds if self.busy_seconds else 0.0


class ServingLoop:
    """Serve ``groups`` with a fresh ``scheduler`` and an :class:`Executor` (module docstring). Raises ValueError
    unless ``groups`` are sorted by ``arrival_time`` (seconds on the executor's clock).

    Args:
        record_memory: record the KV memory breakdown at each iteration while requests wait.
        record_sharing: record the blocks held with and without sharing every iteration (Fig. 15); iterations
            then run one at a time (no fast-forward), with the same results.
        on_finish: called with the groups that finished after each iteration (e.g. a progress bar).
    """

    __slots__ = ("scheduler", "executor", "groups", "result", "record_memory", "record_sharing", "on_finish", "_next",
                 "_aborted")

    def __init__(self, scheduler: Scheduler, executor: Executor, groups: Sequence[SequenceGroup], *,
                 record_memory: bool = False, record_sharing: bool = False,
                 on_finish: Callable[[list[SequenceGroup]], None] | None = None) -> None:
        groups = list(groups)
        if any(a.arrival_time > b.arrival_time for a, b in zip(groups, groups[1:])):
            raise ValueError("requests must be sorted by arrival time")
        self.scheduler = scheduler
        self.executor = executor
        self.groups = groups
        self.result = ServingResult(groups)
        self.record_memory = record_memory
        self.record_sharing = record_sharing
        self.on_finish = on_finish
        self._next = 0  # the next group to arrive
        self._aborted: set = set()  # request ids aborted before they arrived

    @property
    def has_work(self) -> bool:
        """True while a request is still to arrive, waiting, running or swapped out."""
        return self._next < len(self.groups) or self.scheduler.has_unfinished_seqs()

    def run(self) -> ServingResult:
        """Iterate until every request has finished; returns the :class:`ServingResult`. Raises RuntimeError if
        nothing can run while requests remain and none is to arrive; RequestTooLargeError from admission."""
        step = self.step
        while self.has_work:
            step()
        result = self.result
        result.duration = self.executor.now
        result.num_preemptions = self.scheduler.num_preemptions
        return result

    def _admit_arrivals(self) -> int:
        """Admit the requests arrived by now, except aborted ones; return the next one's index. O(arrivals)."""
        groups, scheduler, aborted = self.groups, self.scheduler, self._aborted
        num_groups, nxt, now = len(groups), self._next, self.executor.now
        while nxt < num_groups and groups[nxt].arrival_time <= now:
            if not aborted or groups[nxt].request_id not in aborted:
                scheduler.add_seq_group(groups[nxt])
            nxt += 1
        self._next = nxt
        return nxt

    def step(self) -> list[SequenceGroup]:
        """One iteration (module docstring); returns the groups that finished in it. Raises as :meth:`run`; whatever
        escapes (an exception, ``KeyboardInterrupt``) first aborts every request (:meth:`abandon`)."""
        try:
            scheduler, executor, groups = self.scheduler, self.executor, self.groups
            num_groups = len(groups)
            now = executor.now
            aborted = self._aborted
            nxt = self._admit_arrivals()
            if not scheduler.has_unfinished_seqs():
                while aborted and nxt < num_groups and groups[nxt].request_id in aborted:
                    nxt += 1  # aborted before it arrived: nothing to wait for
                self._next = nxt
                if nxt < num_groups:
                    executor.wait_until(groups[nxt].arrival_time)  # idle until the next request
                return []
            outputs = scheduler.schedule()
            scheduled = outputs.scheduled_seq_groups
            if not scheduled:
                if nxt >= num_groups:
                    raise RuntimeError("the scheduler could run no request although some remain and none is left "
                                       "to arrive (a request larger than the free KV cache?)")
                executor.wait_until(max(now, groups[nxt].arrival_time))
                return []
            for group in scheduled:
                if group.first_scheduled_time is None:
                    group.first_scheduled_time = now
            if outputs.is_prefill:
                self._count_prefill(outputs)
            k, any_finished = self.run_iteration(outputs, groups[nxt].arrival_time if nxt < num_groups else math.inf)
            scheduler.kv_manager.commit_computed()  # the KV of the blocks the iteration filled is written
            result = self.result
            result.num_iterations += k
            result.batched_requests_sum += k * len(scheduled)
            busy = executor.now - now
            result.busy_seconds += busy
            result.batched_requests_seconds += busy * len(scheduled)
            if not any_finished:
                return []
            finished = scheduler.free_finished_seq_groups()
            now = executor.now
            for group in finished:
                group.finished_time = now
            if finished and self.on_finish is not None:
                self.on_finish(finished)
            return finished
        except BaseException:
            self.abandon()
            raise

    def run_iteration(self, outputs: SchedulerOutputs, next_arrival_time: float) -> tuple[int, bool]:
        """Record the KV memory breakdown (while requests wait) and sharing, if asked; let the executor run the
        iteration. Returns ``(iterations run, any sequence finished)``: always 1 here; the simulator's fast path
        (:class:`paged.sim.fast.loop.FastServingLoop`) runs identical ones at once, up to ``next_arrival_time`` (s)."""
        scheduler, result = self.scheduler, self.result
        if self.record_memory and scheduler.waiting:
            result.memory.add(scheduler.kv_manager.memory_usage(scheduler.running))
        if self.record_sharing:
            result.sharing.add(*scheduler.kv_manager.sharing_counts())
        return 1, self.executor.execute(scheduler, outputs)

    def abort_request(self, request_id) -> bool:
        """Abort a request between iterations, wherever it is (even still to arrive), as
        :meth:`Scheduler.abort_seq_group` does; the others are served as without it. True if aborted; False (a
        no-op, as in vLLM) for an id unknown, finished or already aborted. O(requests)."""
        now = self.executor.now
        group = self.scheduler.abort_seq_group(request_id)
        if group is None:
            group = next((g for g in self.groups[self._next:] if g.request_id == request_id), None)
            if group is None or group.request_id in self._aborted:
                return False
            self._aborted.add(request_id)
            _mark_aborted(group)
        group.finished_time = now
        return True

    def abandon(self) -> list[SequenceGroup]:
        """After an interrupted iteration: forget uncomputed prefix-cache entries, abort every request (those to
        arrive too), leave no work; returns those aborted. Called by :meth:`step`; safe to repeat. O(blocks held)."""
        self.scheduler.kv_manager.rollback_uncomputed()
        aborted = self.scheduler.abort_all()
        now = self.executor.now
        for group in self.groups[self._next:]:
            _mark_aborted(group)
            aborted.append(group)
        self._next = len(self.groups)
        for group in aborted:
            group.finished_time = now
        return aborted

    def _count_prefill(self, outputs: SchedulerOutputs) -> None:
        """Count a prefill iteration's requests and tokens (recomputed ones apart)."""
        result = self.result
        result.num_prefill_iterations += 1
        result.prefill_batched_requests_sum += len(outputs.scheduled_seq_groups)
        if outputs.prefill_seqs:  # what the scheduler planned: a shared prompt once, cached tokens not at all
            computed = [(seq, seq.num_tokens - start) for seq, start in outputs.prefill_seqs if start < seq.num_tokens]
        else:
            running = SequenceStatus.RUNNING
            computed = [(seq, seq.num_tokens) for group in outputs.scheduled_seq_groups
                        for seq in group.seqs if seq.status is running]
        for seq, tokens in computed:
            result.prefill_tokens += tokens
            if seq.num_generated:
                result.recomputed_tokens += tokens


def _mark_aborted(group: SequenceGroup) -> None:
    """Abort a request that has not arrived (it holds no block)."""
    for seq in group.seqs:
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = "abort"
    group.aborted = True
