"""The simulator's fast-forward gives exactly the step-by-step results (times, counters, memory sums)."""

import pytest
from support import synthetic_trace as synthetic

from paged.block.manager import PagedKVCacheManager
from paged.contiguous import ContiguousKVCacheManager
from paged.sim.cost_model import get_cost_model
from paged.sim.simulator import simulate
from paged.workloads import get_trace


def _snapshot(result):
    return (result.num_iterations, result.batched_requests_sum, result.duration, result.num_preemptions,
            result.memory, [(g.first_scheduled_time, g.first_token_time, g.finished_time,
                             g.seqs[0].num_generated) for g in result.groups])


MANAGERS = {
    "paged16": lambda: PagedKVCacheManager(2048 // 16, 16),
    "paged1": lambda: PagedKVCacheManager(2048, 1),
    "paged64-swap": lambda: PagedKVCacheManager(2048 // 64, 64, num_cpu_blocks=64),
    "oracle": lambda: ContiguousKVCacheManager(2048, "oracle", max_seq_len=1024),
    "pow2": lambda: ContiguousKVCacheManager(2048, "pow2", max_seq_len=1024),
    "max": lambda: ContiguousKVCacheManager(2048, "max", max_seq_len=1024),
}


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
@pytest.mark.parametrize("name", list(MANAGERS))
def test_fast_forward_equals_step_by_step(name, preemption):
    """Times, counters and the memory breakdown (integer sums) are exactly equal."""
    trace = synthetic()
    cost = get_cost_model("opt-13b")
    results = [simulate(trace, MANAGERS[name](), cost, preemption_mode=preemption, fast_forward=ff,
                        max_num_batched_tokens=1024)
               for ff in (True, False)]
    assert _snapshot(results[0]) == _snapshot(results[1])
    assert results[0].memory.iterations > 0  # the cache was the bottleneck: memory was recorded


def test_fast_forward_equals_step_by_step_on_sharegpt():
    trace = get_trace("sharegpt", 300, seed=3, rate=20.0)
    cost = get_cost_model("opt-13b")
    a, b = (simulate(trace, PagedKVCacheManager(cost.num_kv_slots // 16, 16), cost, fast_forward=ff)
            for ff in (True, False))
    assert _snapshot(a) == _snapshot(b)
    assert a.num_preemptions > 0


def test_runs_are_taken_and_count_as_many_iterations():
    """Fast-forward really applies runs (fewer loop steps), yet counts every iteration."""
    from paged.core.scheduler import Scheduler
    from paged.core.serving_loop import ServingLoop
    from paged.sim.executor import SimulatedExecutor
    from paged.sim.simulator import groups_from_trace

    trace = synthetic(n=40, rate=2.0)
    cost = get_cost_model("opt-13b")
    steps = {}
    for ff in (True, False):
        loop = ServingLoop(Scheduler(PagedKVCacheManager(2048 // 16, 16)), SimulatedExecutor(cost, fast_forward=ff),
                           groups_from_trace(trace))
        n = 0
        while loop.has_work:
            loop.step()
            n += 1
        steps[ff] = (n, loop.result.num_iterations)
    assert steps[True][1] == steps[False][1]  # the same iterations, counted
    assert steps[True][0] < steps[False][0] / 5  # in far fewer loop steps
