"""FasterTransformer's request-level batching (§6.1)."""

from paged.sim.cost_model import get_cost_model
from paged.sim.static_batching import simulate_static_batching
from paged.workloads import Request as Req


def test_static_batching_waits_for_the_whole_batch():
    cost = get_cost_model("opt-13b", paged_kernel=False, block_size=16)
    trace = [Req(0, 10, 5, 0.0), Req(1, 10, 50, 0.0), Req(2, 10, 5, 100.0)]
    result = simulate_static_batching(trace, cost, max_batch_size=7)
    g = sorted(result.groups, key=lambda g: g.request_id)
    assert g[0].finished_time == g[1].finished_time < g[2].arrival_time
    assert result.num_iterations == 50 + 5
