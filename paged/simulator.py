"""Simulated serving: the real scheduler and KV cache managers, with time from a model.

Memory behaviour is never modelled: every block or reservation comes from the real
:class:`paged.scheduler.Scheduler` and KV cache manager. Only the duration of each iteration is
modelled, by an ``iteration_time(outputs) -> seconds`` callable (a GPU cost model, or a constant
when only memory matters).

The loop, per iteration: admit the requests that have arrived, ask the scheduler for a prefill or
decode iteration, record where KV memory is (while requests wait), advance the clock by the
iteration's time, give every scheduled sequence one new token, and retire finished requests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence as Seq
from dataclasses import dataclass, field

from paged.kv_manager import KVCacheManager
from paged.scheduler import Scheduler, SchedulerOutputs
from paged.sequence import Sequence, SequenceGroup, SequenceStatus

__all__ = ["simulate", "SimulationResult", "MemoryStats"]


@dataclass(slots=True)
class MemoryStats:
    """Sums of KV slot usage over the iterations in which requests were waiting.

    ``mean()`` gives the average share of KV memory in each part over those iterations, each
    iteration weighted equally (Fig. 2's "average during the experiment").
    """

    iterations: int = 0
    token_states: float = 0.0
    reservation: float = 0.0
    internal: float = 0.0
    external: float = 0.0

    def add(self, fractions: dict[str, float]) -> None:
        """Add one iteration's fractions (as returned by ``MemoryUsage.fractions``)."""
        self.iterations += 1
        self.token_states += fractions["token_states"]
        self.reservation += fractions["reservation"]
        self.internal += fractions["internal"]
        self.external += fractions["external"]

    def mean(self) -> dict[str, float]:
        """Average fraction of KV memory per part (sums to 1); NaNs if nothing was recorded."""
        n = self.iterations or float("nan")
        return {
            "token_states": self.token_states / n,
            "reservation": self.reservation / n,
            "internal": self.internal / n,
            "external": self.external / n,
        }


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


def _groups_from_trace(trace: Seq) -> list[SequenceGroup]:
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
) -> SimulationResult:
    """Serve ``trace`` with the real scheduler over ``kv_manager``; time from ``iteration_time``.

    Args:
        trace: requests with ``prompt_len``, ``output_len`` (tokens) and ``arrival_time``
            (seconds), e.g. a :class:`paged.workloads.Trace`.
        kv_manager: a fresh paged or contiguous KV cache manager.
        iteration_time: seconds one iteration takes, given what the scheduler scheduled.
        max_num_seqs, max_num_batched_tokens, preemption_mode: passed to the
            :class:`~paged.scheduler.Scheduler`.
        record_memory: record the KV memory breakdown at each iteration while requests wait.

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
    groups = _groups_from_trace(trace)
    for group in groups:  # reject impossible requests before any work is done
        if group.prompt_len < 1 or group.output_len < 1:
            raise ValueError(
                f"request {group.request_id!r}: prompt_len={group.prompt_len}, "
                f"output_len={group.output_len}; both must be ≥ 1"
            )
    result = SimulationResult(groups)
    now = 0.0
    next_arrival = 0
    num_groups = len(groups)
    running = SequenceStatus.RUNNING
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
        if record_memory and scheduler.waiting:
            result.memory.add(kv_manager.memory_usage(scheduler.running).fractions())
        result.num_iterations += 1
        result.batched_requests_sum += len(outputs.scheduled_seq_groups)
        for group in outputs.scheduled_seq_groups:
            if group.first_scheduled_time is None:
                group.first_scheduled_time = now
        now += iteration_time(outputs)
        for group in outputs.scheduled_seq_groups:
            for seq in group.seqs:
                if seq.status is not running:
                    continue
                seq.append_token()
                if group.first_token_time is None:
                    group.first_token_time = now
                if seq.num_generated >= group.output_len:
                    scheduler.finish_seq(seq)
        for group in scheduler.free_finished_seq_groups():
            group.finished_time = now
    result.duration = now
    result.num_preemptions = scheduler.num_preemptions
    return result
