"""Paper-length traces, the convergence check and the running latency bound (paged.experiments.serving.run_length)."""

import math

import numpy as np
import pytest

from paged.experiments.serving import run_length
from paged.sim.config import ServingConfig
from paged.sim.simulator import groups_from_trace


def test_paper_duration():
    assert run_length.paper_duration("opt-13b") == 3600.0 and run_length.paper_duration("opt-175b") == 900.0


def test_longer_runs_and_other_rates_extend_and_rescale_the_same_requests():
    short = run_length.long_trace("sharegpt", 2.0, 300.0, seed=3)
    longer = run_length.long_trace("sharegpt", 2.0, 900.0, seed=3)
    faster = run_length.long_trace("sharegpt", 4.0, 150.0, seed=3)
    n = len(short)
    assert 450 < n < 750 and len(longer) > 2.5 * n
    assert all(r.arrival_time < 300.0 for r in short)
    assert [(r.prompt_len, r.output_len, r.arrival_time) for r in longer[:n]] == \
        [(r.prompt_len, r.output_len, r.arrival_time) for r in short]
    assert len(faster) == n  # the same unit-rate stream, scaled by 1 / rate
    assert np.allclose([r.arrival_time for r in faster], [r.arrival_time / 2 for r in short])


def test_more_requests_than_the_trace_holds_reuse_it_in_shuffled_passes():
    pool = run_length.get_trace("sharegpt", tokenizer="gpt2")  # long_trace's default counts: OPT's tokenizer
    trace = run_length.long_trace("sharegpt", math.inf, len(pool) + 10, seed=0)
    assert len(trace) == len(pool) + 10 and all(r.arrival_time == 0.0 for r in trace)
    first = sorted((r.prompt_len, r.output_len) for r in trace[: len(pool)])
    assert first == sorted((r.prompt_len, r.output_len) for r in pool)  # each request once per pass


@pytest.mark.parametrize("rate,duration", [(0.0, 10.0), (1.0, 0.0), (-1.0, 5.0), (1.0, math.nan)])
def test_bad_rate_or_duration(rate, duration):
    with pytest.raises(ValueError):
        run_length.long_trace("sharegpt", rate, duration)


def test_latency_bound_is_a_lower_bound_and_stops_at_its_cap():
    trace = run_length.long_trace("sharegpt", 3.0, 200.0, seed=1)
    groups = groups_from_trace(trace)
    bound = run_length.LatencyBound(groups, cap=math.inf)
    seen = []

    def watch(finished):
        bound(finished)
        seen.append(bound.bound(finished[0].finished_time))

    result = ServingConfig(system="orca-max").serve(trace, on_finish=watch)
    final = np.mean([(g.finished_time - g.arrival_time) / g.output_len for g in result.groups])
    assert seen and max(seen) <= final * (1 + 1e-9)
    assert seen[-1] == pytest.approx(final)
    with pytest.raises(run_length.LatencyCapExceeded) as err:
        ServingConfig(system="orca-max").serve(trace, on_finish=run_length.LatencyBound(groups_from_trace(trace),
                                                                                         cap=final / 2))
    assert final / 2 < err.value.bound <= final


def test_convergence_halves():
    class G:
        def __init__(self, a, lat):
            self.arrival_time, self.finished_time, self.output_len = a, a + lat, 1

    first, overall = run_length.convergence([G(0, 1.0), G(1, 1.0), G(2, 3.0), G(3, 3.0)])
    assert (first, overall) == (1.0, 2.0)


def test_capped_duration_scale_cuts_the_paper_length_to_a_request_count():
    from paged.experiments.serving.run_length import capped_duration_scale, paper_duration

    assert capped_duration_scale(40_000, 2.9, "opt-13b") == 1.0  # an hour of ShareGPT: 10,000 requests, kept
    assert capped_duration_scale(40_000, 45.3, "opt-13b") == pytest.approx(40_000 / (45.3 * 3600))
    assert capped_duration_scale(40_000, 45.3, "opt-13b", 0.1) == 0.1  # never longer than asked
    assert capped_duration_scale(1000, 10.0, "opt-175b") == pytest.approx(1000 / (10.0 * paper_duration("opt-175b")))
    for bad in ({"max_requests": 0}, {"max_requests": 1.5}, {"rate": 0.0}, {"rate": float("inf")}, {"scale": -1.0},
                {"scale": True}, {"model": "gpt"}):
        args = {"max_requests": 100, "rate": 1.0, "model": "opt-13b", "scale": 1.0, **bad}
        with pytest.raises(ValueError, match="must be|unknown model 'gpt'"):
            capped_duration_scale(**args)


def test_run_length_table_counts_spans_and_convergence():
    import pandas as pd

    from paged.experiments.serving.run_length import run_length_table

    runs = pd.DataFrame([{"rate": 1.0, "arrival_seconds": 3600.0, "converged": True, "stopped_early": False, "num_requests": 3600},
                         {"rate": 2.0, "arrival_seconds": 7200.0, "converged": False, "stopped_early": True, "num_requests": 14400},
                         {"rate": float("inf"), "arrival_seconds": 0.0, "converged": True, "stopped_early": False, "num_requests": 5000}])
    table = run_length_table({"Fig. 12": runs, "empty": runs.iloc[:0]})
    row = table.iloc[0]
    assert len(table) == 1 and row["runs"] == 2 and row["arrival span (s)"] == "3600–7200"
    assert row["requests"] == "3600–14400" and row["converged"] == 1 and row["stopped early"] == 1
