"""The serving loop (paper §4.5): arrivals, the scheduler and an executor, one iteration at a time.

The simulator and the real engine serve requests through this same loop over the same
:class:`~paged.core.scheduler.Scheduler`; they differ only in the executor that runs an iteration:

* :class:`paged.sim.executor.SimulatedExecutor`: time from a cost model, every scheduled sequence
  gains one token, and a request finishes at its trace output length;
* :class:`paged.engine.executor.ModelExecutor`: a real model on the paged KV cache, wall-clock time,
  sampling and beam search decide the tokens and when a request stops.

One iteration of :meth:`ServingLoop.step`: admit the requests that have arrived by the executor's
clock; if nothing is left to run, idle until the next arrival; otherwise ask the scheduler for a
prefill or a decode iteration, record where KV memory is while requests wait (Fig. 2), let the
executor run it, and retire the requests that finished. (The simulator's fast path,
:mod:`paged.sim.fast`, overrides :meth:`ServingLoop.run_iteration` to apply a run of identical decode
iterations at once, with the same results.)

Nothing is left half-done when something escapes an iteration (``KeyboardInterrupt`` from a
notebook's *Interrupt*, an exception from the model, the sampler or a callback): before it
propagates, the prefix-cache entries of blocks whose KV the iteration was to write are forgotten
(:meth:`~paged.core.KVCacheManager.rollback_uncomputed`), every request of the loop is aborted, so
each block it held (GPU and swap space) goes back, and the loop has no work left. The KV cache
manager is then exactly as usable as before the loop started, less nothing. One request can be
aborted between iterations with :meth:`ServingLoop.abort_request`.
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
    """What the serving loop needs from an executor.

    Attributes:
        now: the executor's clock (seconds since the run started).
    """

    now: float

    def wait_until(self, time: float) -> None:
        """Idle until the clock reads ``time`` (seconds): jump (simulator) or sleep (real engine)."""
        ...

    def execute(self, scheduler: Scheduler, outputs: SchedulerOutputs) -> bool:
        """Run one scheduled iteration: advance the clock, give every running sequence of the scheduled
        groups its next token and ``scheduler.finish_seq`` those that are done. Returns True if any
        sequence finished."""
        ...


@dataclass(slots=True)
class ServingResult:
    """What one served run produced.

    Attributes:
        groups: every request's :class:`~paged.core.SequenceGroup`, with its times (seconds).
        num_iterations: iterations run (prefill and decode).
        duration: the executor's clock at the last finish (seconds).
        memory: KV memory shares while requests waited (:class:`~paged.core.metrics.MemoryStats`),
            if recorded.
        batched_requests_sum: sum over iterations of the scheduled groups, for the average batch.
        num_preemptions: preemptions (recomputation or swap), total.
        sharing: KV blocks with and without sharing at every iteration
            (:class:`~paged.core.metrics.SharingStats`), if recorded.
        num_prefill_iterations: the prefill iterations among ``num_iterations``.
        prefill_batched_requests_sum: the part of ``batched_requests_sum`` from prefill iterations.
        prefill_tokens: tokens computed by prefill iterations (tokens).
        recomputed_tokens: the part of ``prefill_tokens`` that recomputes sequences preempted after
            they had generated (§4.5 recomputation: prompt + generated tokens again).
        busy_seconds: executor time spent running iterations (idle waits left out; seconds).
        batched_requests_seconds: sum over iterations of scheduled groups × the iteration's
            seconds, for the time-weighted average batch (request-seconds).
        kv_copy_tokens, kv_copy_seconds: KV copied inside device memory by the forks of a
            contiguous system (a beam taking another beam's history, §4.4): tokens, and the
            seconds the time model charged for them (part of ``busy_seconds``); set by the simulator.
        cow_blocks, cow_seconds: copy-on-write block copies (paged, §4.4) and their seconds (part
            of ``busy_seconds``); set by the simulator.
    """

    groups: list[SequenceGroup]
    num_iterations: int = 0
    duration: float = 0.0
    memory: MemoryStats = field(default_factory=MemoryStats)
    batched_requests_sum: int = 0
    num_preemptions: int = 0
    sharing: SharingStats = field(default_factory=SharingStats)
    num_prefill_iterations: int = 0
    prefill_batched_requests_sum: int = 0
    prefill_tokens: int = 0
    recomputed_tokens: int = 0
    busy_seconds: float = 0.0
    batched_requests_seconds: float = 0.0
    kv_copy_tokens: int = 0
    kv_copy_seconds: float = 0.0
    cow_blocks: int = 0
    cow_seconds: float = 0.0

    @property
    def avg_batched_requests(self) -> float:
        """Mean number of requests in an iteration's batch, prefill iterations included (requests)."""
        return self.batched_requests_sum / self.num_iterations if self.num_iterations else 0.0

    @property
    def avg_decode_batched_requests(self) -> float:
        """Mean number of requests in a decode iteration's batch, prefill iterations left out (requests)."""
        n = self.num_iterations - self.num_prefill_iterations
        return (self.batched_requests_sum - self.prefill_batched_requests_sum) / n if n else 0.0

    @property
    def time_avg_batched_requests(self) -> float:
        """Mean number of requests in the running batch per second of busy time (requests)."""
        return self.batched_requests_seconds / self.busy_seconds if self.busy_seconds else 0.0


class ServingLoop:
    """Serve ``groups`` (sorted by arrival time) with ``scheduler`` and ``executor`` (module docstring).

    Args:
        scheduler: a fresh scheduler (its KV cache manager is the one memory is recorded from).
        executor: a :class:`Executor`.
        groups: the requests, sorted by ``arrival_time`` (seconds on the executor's clock).
        record_memory: record the KV memory breakdown at each iteration while requests wait.
        record_sharing: record the KV blocks held with and without sharing at every iteration
            (Fig. 15); every iteration is then run one at a time (no fast-forward), same results.
        on_finish: called with the groups that finished after each iteration (e.g. a progress bar).

    Raises:
        ValueError: if ``groups`` are not sorted by arrival time.
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
        """Iterate until every request has finished; the :class:`ServingResult`.

        Raises:
            RuntimeError: if the scheduler can run nothing while requests remain and none is left to
                arrive (a request that never fits); RequestTooLargeError from admission.
        """
        step = self.step
        while self.has_work:
            step()
        result = self.result
        result.duration = self.executor.now
        result.num_preemptions = self.scheduler.num_preemptions
        return result

    def _admit_arrivals(self) -> int:
        """Hand the scheduler every request that has arrived by the executor's clock (except those
        aborted before they arrived); returns the index in :attr:`groups` of the next one to arrive.
        O(arrivals)."""
        groups, scheduler, aborted = self.groups, self.scheduler, self._aborted
        num_groups, nxt, now = len(groups), self._next, self.executor.now
        while nxt < num_groups and groups[nxt].arrival_time <= now:
            if not aborted or groups[nxt].request_id not in aborted:
                scheduler.add_seq_group(groups[nxt])
            nxt += 1
        self._next = nxt
        return nxt

    def step(self) -> list[SequenceGroup]:
        """One iteration of the loop (module docstring); the groups that finished in it.

        Whatever escapes the iteration (an exception, ``KeyboardInterrupt``) first aborts every request
        of the loop (:meth:`abandon`), then propagates.

        Raises:
            RuntimeError: as :meth:`run`.
        """
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
        """Run the scheduled iteration: record the KV memory breakdown (while requests wait) and the blocks
        held with and without sharing, if asked, then let the executor run it. Returns ``(iterations run,
        any sequence finished)``: always one iteration here (``next_arrival_time``, seconds, lets a
        subclass run several identical ones at once: :class:`paged.sim.fast.loop.FastServingLoop`)."""
        scheduler, result = self.scheduler, self.result
        if self.record_memory and scheduler.waiting:
            result.memory.add(scheduler.kv_manager.memory_usage(scheduler.running))
        if self.record_sharing:
            result.sharing.add(*scheduler.kv_manager.sharing_counts())
        return 1, self.executor.execute(scheduler, outputs)

    def abort_request(self, request_id) -> bool:
        """Abort one request between iterations, wherever it is (still to arrive, waiting, running,
        swapped out): its blocks go back (shared ones when their last holder leaves), its sequences end
        with ``finish_reason="abort"`` and ``group.aborted``; the others are served as without it.

        Returns True if it was aborted, False for an id that is unknown or already finished or
        aborted (a no-op, as vLLM's ``abort_request``). O(requests).
        """
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
        """Give everything back after an interrupted iteration: forget the prefix-cache entries whose
        KV was not written, abort every request of the loop (those still to arrive too), and leave no
        work. Returns the requests it aborted. Called by :meth:`step` when something escapes it; safe
        to call again. O(blocks held)."""
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
        """Add a prefill iteration's requests and tokens (recomputed ones apart) to the result."""
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
    """A request aborted before it arrived (it holds no block): its sequences end with ``"abort"``."""
    for seq in group.seqs:
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = "abort"
    group.aborted = True
