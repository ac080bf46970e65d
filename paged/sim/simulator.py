"""Simulated serving: the real scheduler and KV cache managers, with time from a model.

Memory behaviour is never modelled: every block or reservation comes from the real
:class:`paged.core.scheduler.Scheduler` and KV cache manager. Only the duration of each iteration is
modelled, by an ``iteration_time(outputs) -> seconds`` callable (a GPU cost model, or a constant
when only memory matters).

The loop is the one the real engine runs (:class:`paged.core.serving_loop.ServingLoop`), with the
simulated executor (:class:`paged.sim.executor.SimulatedExecutor`): per iteration, admit the requests
that have arrived, ask the scheduler for a prefill or decode iteration, record where KV memory is
(while requests wait), advance the clock by the iteration's time, give every scheduled sequence one
new token, and retire finished requests.

Fast-forward (:mod:`paged.sim.fast_forward`): when the time model has a ``decode_time(num_seqs,
context_tokens)`` method (a :class:`paged.sim.cost_model.CostModel`), a decode iteration in which
nothing else happens starts a *run*: the next ``k - 1`` iterations are the same decode batch
with no arrival, no finish before the last one, no preemption, no swap and enough free blocks
for every block-boundary crossing. The run is applied at once: each sequence gains ``k`` tokens
(its blocks allocated in one call), the clock advances by the same per-iteration times added in
the same order, and the memory sums are added in closed form, so the result is exactly the
step-by-step loop's (``tests/sim/test_fast_forward.py`` checks it).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence as Seq

from paged.core.kv_cache_manager import KVCacheManager
from paged.core.scheduler import Scheduler, SchedulerOutputs
from paged.core.sequence import Sequence, SequenceGroup
from paged.core.serving_loop import ServingLoop, ServingResult
from paged.sim.executor import SimulatedExecutor

__all__ = ["simulate", "groups_from_trace"]


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
    on_finish: Callable[[list[SequenceGroup]], None] | None = None,
) -> ServingResult:
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
        on_finish: called with the groups that finished after each iteration (their
            ``finished_time`` is the clock); an exception it raises stops the run and propagates.

    Returns:
        A :class:`~paged.core.serving_loop.ServingResult`; every request finishes exactly once with exactly its
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
    loop = ServingLoop(scheduler, SimulatedExecutor(iteration_time, fast_forward=fast_forward), groups,
                       record_memory=record_memory, on_finish=on_finish)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # the loop makes no reference cycles; full collections would dominate its time
    try:
        return loop.run()
    finally:
        if gc_was_enabled:
            gc.enable()
