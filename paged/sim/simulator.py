"""Simulated serving: the real scheduler and KV cache managers, with time from a model.

Memory behaviour is never modelled: every block or reservation comes from the real
:class:`paged.core.scheduler.Scheduler` and KV cache manager. Only the duration of each iteration is
modelled, by an ``iteration_time(outputs) -> seconds`` callable (a GPU cost model, or a constant
when only memory matters).

The loop, per iteration: admit the requests that have arrived, ask the scheduler for a prefill or
decode iteration, record where KV memory is (while requests wait), advance the clock by the
iteration's time, give every scheduled sequence one new token, and retire finished requests.

Fast-forward (:mod:`paged.sim.fast_forward`): when the time model has a ``decode_time(num_seqs,
context_tokens)`` method (a :class:`paged.sim.cost_model.CostModel`), a decode iteration in which
nothing else happens starts a *run*: the next ``k - 1`` iterations are the same decode batch
with no arrival, no finish before the last one, no preemption, no swap and enough free blocks
for every block-boundary crossing. The run is applied at once: each sequence gains ``k`` tokens
(its blocks allocated in one call), the clock advances by the same per-iteration times added in
the same order, and the memory sums are added in closed form, so the result is exactly the
step-by-step loop's (``tests/test_simulator.py`` checks it).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence as Seq
from dataclasses import dataclass, field

from paged.sim.fast_forward import decode_run
from paged.core.kv_cache_manager import KVCacheManager
from paged.core.metrics import MemoryStats
from paged.core.scheduler import Scheduler, SchedulerOutputs
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus

__all__ = ["simulate", "SimulationResult", "groups_from_trace"]


@dataclass(slots=True)
class SimulationResult:
    """What one simulated run produced.

    Attributes:
        groups: every request's :class:`SequenceGroup`, finished, with its times (seconds).
        num_iterations: iterations run (prefill and decode).
        duration: simulated time from 0 to the last finish (seconds).
        memory: KV memory shares while requests waited (:class:`MemoryStats`).
        batched_requests_sum: sum over iterations of running groups, for the average batch.
        num_preemptions: preemptions (recomputation or swap), total.
    """

    groups: list[SequenceGroup]
    num_iterations: int = 0
    duration: float = 0.0
    memory: MemoryStats = field(default_factory=MemoryStats)
    batched_requests_sum: int = 0
    num_preemptions: int = 0

    @property
    def avg_batched_requests(self) -> float:
        """Mean number of requests in an iteration's batch (requests)."""
        return self.batched_requests_sum / self.num_iterations if self.num_iterations else 0.0


def groups_from_trace(trace: Seq) -> list[SequenceGroup]:
    """One single-sequence group per request of a trace (``prompt_len``, ``output_len``,
    ``arrival_time`` attributes), in arrival order."""
    groups = [
        SequenceGroup(
            request_id=getattr(req, "request_id", i),
            arrival_time=float(req.arrival_time),
            seqs=[Sequence(seq_id=i, prompt_len=int(req.prompt_len))],
            output_len=int(req.output_len),
        )
        for i, req in enumerate(trace)
    ]
    groups.sort(key=lambda g: g.arrival_time)
    return groups


def simulate(
    trace: Seq,
    kv_manager: KVCacheManager,
    iteration_time: Callable[[SchedulerOutputs], float],
    *,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 2048,
    preemption_mode: str = "recompute",
    record_memory: bool = True,
    fast_forward: bool = True,
) -> SimulationResult:
    """Serve ``trace`` with the real scheduler over ``kv_manager``; time from ``iteration_time``.

    Args:
        trace: requests with ``prompt_len``, ``output_len`` (tokens) and ``arrival_time``
            (seconds), e.g. a :class:`paged.workloads.Trace`.
        kv_manager: a fresh paged or contiguous KV cache manager.
        iteration_time: seconds one iteration takes, given what the scheduler scheduled.
        max_num_seqs, max_num_batched_tokens, preemption_mode: passed to the
            :class:`~paged.core.scheduler.Scheduler`.
        record_memory: record the KV memory breakdown at each iteration while requests wait.
        fast_forward: apply runs of unchanging decode iterations at once (module docstring);
            used only when ``iteration_time`` has a ``decode_time`` method. Same results.

    Returns:
        A :class:`SimulationResult`; every request finishes exactly once with exactly its
        output length.

    Raises:
        RequestTooLargeError: if a request could never fit in the KV cache.
        ValueError: on an empty prompt or output.
    """
    scheduler = Scheduler(
        kv_manager,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        preemption_mode=preemption_mode,
    )
    groups = groups_from_trace(trace)
    for group in groups:  # reject impossible requests before any work is done
        if group.prompt_len < 1 or group.output_len < 1:
            raise ValueError(
                f"request {group.request_id!r}: prompt_len={group.prompt_len}, "
                f"output_len={group.output_len}; both must be ≥ 1"
            )
    decode_time = getattr(iteration_time, "decode_time", None) if fast_forward else None
    gc_was_enabled = gc.isenabled()
    gc.disable()  # the loop makes no reference cycles; full collections would dominate its time
    try:
        return _run(scheduler, kv_manager, groups, iteration_time, decode_time, record_memory)
    finally:
        if gc_was_enabled:
            gc.enable()


def _run(scheduler, kv_manager, groups, iteration_time, decode_time, record_memory) -> SimulationResult:
    """The simulation loop of :func:`simulate` (module docstring)."""
    result = SimulationResult(groups)
    now = 0.0
    next_arrival = 0
    num_groups = len(groups)
    running = SequenceStatus.RUNNING
    inf = float("inf")
    while next_arrival < num_groups or scheduler.has_unfinished_seqs():
        while next_arrival < num_groups and groups[next_arrival].arrival_time <= now:
            scheduler.add_seq_group(groups[next_arrival])
            next_arrival += 1
        if not scheduler.has_unfinished_seqs():
            now = groups[next_arrival].arrival_time  # idle until the next request
            continue
        outputs = scheduler.schedule()
        if outputs.is_empty:
            if next_arrival >= num_groups:
                raise RuntimeError("scheduler made no progress with no request left to arrive")
            now = max(now, groups[next_arrival].arrival_time)
            continue
        for group in outputs.scheduled_seq_groups:
            if group.first_scheduled_time is None:
                group.first_scheduled_time = now
        if decode_time is not None and not outputs.is_prefill:
            arrival = groups[next_arrival].arrival_time if next_arrival < num_groups else inf
            memory = result.memory if record_memory and scheduler.waiting else None
            end = decode_run(scheduler, outputs, decode_time, now, arrival, memory)
            if end is not None:
                now, k = end
                result.num_iterations += k
                result.batched_requests_sum += k * len(outputs.scheduled_seq_groups)
                for group in scheduler.free_finished_seq_groups():
                    group.finished_time = now
                continue
        if record_memory and scheduler.waiting:
            result.memory.add(kv_manager.memory_usage(scheduler.running))
        result.num_iterations += 1
        result.batched_requests_sum += len(outputs.scheduled_seq_groups)
        now += iteration_time(outputs)
        any_finished = False
        for group in outputs.scheduled_seq_groups:
            for seq in group.seqs:
                if seq.status is not running:
                    continue
                seq.append_token()
                if group.first_token_time is None:
                    group.first_token_time = now
                if seq.num_generated >= group.output_len:
                    scheduler.finish_seq(seq)
                    any_finished = True
        if any_finished:
            for group in scheduler.free_finished_seq_groups():
                group.finished_time = now
    result.duration = now
    result.num_preemptions = scheduler.num_preemptions
    return result
