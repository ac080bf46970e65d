"""The paper's measures (paged.core.metrics): normalized latency and the KV memory breakdown."""

from __future__ import annotations

import math

import pytest

from paged.core.kv_cache_manager import MemoryUsage
from paged.core.metrics import MemoryStats, SharingStats, request_metrics
from paged.core.sequence import Sequence, SequenceGroup


def finished(arrival, first_token, finish, output_len):
    g = SequenceGroup(0, arrival, [Sequence(0, 5)], output_len)
    g.first_token_time, g.finished_time = first_token, finish
    return g


def test_normalized_latency_is_the_mean_of_latency_per_output_token():
    gs = [finished(0.0, 1.0, 10.0, 10), finished(2.0, 2.5, 4.0, 1)]
    m = request_metrics(gs, duration=10.0)
    assert m["normalized_latency"] == pytest.approx((10.0 / 10 + 2.0 / 1) / 2)
    assert m["ttft"] == pytest.approx((1.0 + 0.5) / 2)
    assert m["tpot"] == pytest.approx(9.0 / 9)  # only requests with more than one token
    assert m["throughput_rps"] == 0.2 and m["throughput_tps"] == 1.1


def test_unfinished_or_no_requests_are_refused():
    with pytest.raises(ValueError, match="finished"):
        request_metrics([finished(0.0, 1.0, None, 3)], 1.0)
    with pytest.raises(ValueError, match="no requests"):
        request_metrics([], 1.0)


def test_memory_stats_average_over_iterations_and_runs_add_exactly():
    stats = MemoryStats()
    stats.add(MemoryUsage(10, 20, 30, 40, 100))
    stats.add_usage(MemoryUsage(30, 0, 30, 140, 200), 2)  # a run of two iterations, summed
    assert stats.iterations == 3 and stats.total == 300 and stats.external == 180
    assert stats.mean() == {"token_states": 40 / 300, "reservation": 20 / 300, "internal": 60 / 300,
                            "external": 180 / 300}
    assert all(math.isnan(v) for v in MemoryStats().mean().values())


def test_sharing_stats_sums_added_at_once_equal_iteration_by_iteration():
    counts = [(3, 5), (4, 7), (4, 9)]
    one, run = SharingStats(), SharingStats()
    for in_use, without in counts:
        one.add(in_use, without)
    run.add_sums(sum(c[0] for c in counts), sum(c[1] for c in counts), len(counts))
    assert one == run and run.iterations == 3
    assert run.saving == 1 - 11 / 21 and SharingStats().saving == 0.0
