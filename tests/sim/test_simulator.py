"""The simulator's fast-forward gives exactly the step-by-step results; serving metrics behave."""


import pytest

from paged.block.manager import PagedKVCacheManager
from paged.contiguous import ContiguousKVCacheManager
from paged.sim.cost_model import get_cost_model
from paged.block.manager import ceil_sum
from paged.workloads import Request as Req, get_trace
from paged.experiments.serving import SYSTEMS, run_system, simulate_point
from paged.sim.static_batching import simulate_static_batching
from paged.sim.simulator import simulate




def synthetic(n=120, rate=8.0, seed=1):
    import random

    rng = random.Random(seed)
    t, reqs = 0.0, []
    for i in range(n):
        t += rng.expovariate(rate)
        reqs.append(Req(i, rng.randint(1, 300), rng.randint(1, 400), t))
    return reqs


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


def test_ceil_sum():
    for bs in (1, 3, 16):
        for x in range(0, 70):
            assert ceil_sum(x, bs) == sum(-(-m // bs) for m in range(1, x + 1))


def test_every_request_finishes_once_with_its_length():
    trace = synthetic(80, rate=50.0)
    for system in SYSTEMS:
        result = run_system(trace, system, "opt-13b")
        assert sorted(g.request_id for g in result.groups) == list(range(80))
        for g, r in zip(sorted(result.groups, key=lambda g: g.request_id), trace):
            assert g.seqs[0].num_generated == r.output_len
            assert g.arrival_time <= g.first_token_time <= g.finished_time


def test_simulate_point_is_deterministic_and_has_keys():
    a = simulate_point("opt-13b", "sharegpt", "paged", 2.0, num_requests=50, seed=4)
    b = simulate_point("opt-13b", "sharegpt", "paged", 2.0, num_requests=50, seed=4)
    for key in ("normalized_latency", "throughput_rps", "throughput_tps", "avg_batched_requests",
                "num_preemptions", "sim_wall_seconds", "ttft", "tpot"):
        assert key in a
    a.pop("sim_wall_seconds"), b.pop("sim_wall_seconds")
    assert a == b


def test_latency_grows_with_rate_and_paged_batches_more():
    lo = simulate_point(system="paged", rate=0.5, num_requests=200)
    hi = simulate_point(system="orca-max", rate=3.0, num_requests=200)
    paged_hi = simulate_point(system="paged", rate=3.0, num_requests=200)
    assert lo["normalized_latency"] < paged_hi["normalized_latency"] < hi["normalized_latency"]
    assert paged_hi["avg_batched_requests"] > hi["avg_batched_requests"]


def test_static_batching_waits_for_the_whole_batch():
    cost = get_cost_model("opt-13b", paged_kernel=False)
    trace = [Req(0, 10, 5, 0.0), Req(1, 10, 50, 0.0), Req(2, 10, 5, 100.0)]
    result = simulate_static_batching(trace, cost, max_batch_size=7)
    g = sorted(result.groups, key=lambda g: g.request_id)
    assert g[0].finished_time == g[1].finished_time < g[2].arrival_time
    assert result.num_iterations == 50 + 5


def test_unknown_system():
    with pytest.raises(ValueError, match="unknown system"):
        run_system(synthetic(3), "tgi")


def test_static_batching_sums_decode_steps_like_the_step_by_step_loop():
    cost = get_cost_model("opt-13b", paged_kernel=False, cpu_scale=0.0)
    trace = [Req(0, 30, 40, 0.0), Req(1, 50, 7, 0.0), Req(2, 20, 1, 0.0)]
    result = simulate_static_batching(trace, cost, max_batch_size=7)
    expected = cost.prefill_time([50] * 3) + sum(cost.decode_time(3, 3 * (50 + step)) for step in range(1, 40))
    assert result.duration == pytest.approx(expected, rel=1e-12)
    assert all(g.finished_time == result.duration for g in result.groups)
