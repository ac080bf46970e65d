"""Simulated serving: every request finishes once with its length; serving metrics behave."""

import pytest
from support import synthetic_trace as synthetic

from paged.block.manager import PagedKVCacheManager
from paged.experiments.serving import SYSTEMS, run_system, simulate_point
from paged.sim.cost_model import get_cost_model
from paged.sim.simulator import simulate



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


def test_unknown_system():
    with pytest.raises(ValueError, match="unknown system"):
        run_system(synthetic(3), "tgi")
