"""The fast path's fast-forward (a run of identical decode iterations applied at once, recording the memory
breakdown in closed form) gives exactly the reference's results: times, counters, memory sums."""

import pytest
from support import managed
from support import synthetic_trace as synthetic

from paged.core.serving_loop import ServingLoop
from paged.sim import fast as fast_path
from paged.sim.cost_model import get_cost_model
from paged.sim.fast.loop import FastServingLoop
from paged.sim.simulator import groups_from_trace, simulate
from paged.workloads import get_trace


def _snapshot(result):
    return (result.num_iterations, result.batched_requests_sum, result.duration, result.num_preemptions,
            result.memory, [(g.first_scheduled_time, g.first_token_time, g.finished_time,
                             g.seqs[0].num_generated) for g in result.groups])


MANAGERS = {
    "paged16": ("paged", 2048 // 16, 16, {}),
    "paged1": ("paged", 2048, 1, {}),
    "paged64-swap": ("paged", 2048 // 64, 64, dict(num_cpu_blocks=64)),
    "paged16-caching": ("paged", 2048 // 16, 16, dict(enable_prefix_caching=True)),
    "oracle": ("orca-oracle", 2048 // 16, 16, dict(max_seq_len=1024)),
    "pow2": ("orca-pow2", 2048 // 16, 16, dict(max_seq_len=1024)),
    "max": ("orca-max", 2048 // 16, 16, dict(max_seq_len=1024)),
}


def _both(trace, name, cost, **kw):
    """The run through the fast path (the step-by-step loop with fast-forward: the memory breakdown is
    recorded, so no calendar applies) and through the reference."""
    system, blocks, block_size, extra = MANAGERS[name]
    results = []
    for on in (True, False):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(fast_path, "_ENABLED", on)
            manager = managed(system, blocks, block_size, **extra)
            results.append(simulate(trace, manager, cost, **kw))
        manager.check_invariants()
    return results


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
@pytest.mark.parametrize("name", list(MANAGERS))
def test_fast_forward_equals_the_reference(name, preemption):
    """Times, counters and the memory breakdown (integer sums) are exactly equal."""
    trace = synthetic()
    cost = get_cost_model("opt-13b", block_size=MANAGERS[name][2], paged_kernel=MANAGERS[name][0] == "paged")
    fast, ref = _both(trace, name, cost, preemption_mode=preemption, max_num_batched_tokens=1024)
    assert _snapshot(fast) == _snapshot(ref)
    assert fast.busy_seconds == pytest.approx(ref.busy_seconds, rel=1e-12)
    assert fast.memory.iterations > 0  # the cache was the bottleneck: memory was recorded


def test_fast_forward_equals_the_reference_on_sharegpt():
    trace = get_trace("sharegpt", 300, seed=3, rate=20.0)
    cost = get_cost_model("opt-13b", block_size=16)
    system, _, block_size, _ = MANAGERS["paged16"]
    results = []
    for on in (True, False):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(fast_path, "_ENABLED", on)
            results.append(simulate(trace, managed(system, cost.num_kv_blocks, block_size), cost))
    assert _snapshot(results[0]) == _snapshot(results[1])
    assert results[0].num_preemptions > 0


def test_runs_are_taken_and_count_as_many_iterations():
    """Fast-forward really applies runs (fewer loop steps), yet counts every iteration."""
    trace = synthetic(n=40, rate=2.0)
    cost = get_cost_model("opt-13b", block_size=16)
    steps = {}
    for loop_class in (FastServingLoop, ServingLoop):
        loop = loop_class(fast_path.FastScheduler(managed("paged", 2048 // 16, 16)),
                          fast_path.FastSimulatedExecutor(cost), groups_from_trace(trace))
        n = 0
        while loop.has_work:
            loop.step()
            n += 1
        steps[loop_class] = (n, loop.result.num_iterations)
    assert steps[FastServingLoop][1] == steps[ServingLoop][1]  # the same iterations, counted
    assert steps[FastServingLoop][0] < steps[ServingLoop][0] / 5  # in far fewer loop steps
