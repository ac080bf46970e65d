"""Sustained-rate search, sweeps and paper-length points of paged.experiments.serving."""

import math

import pandas as pd
import pytest

from paged.experiments import serving
from paged.experiments.serving import sustained, sweeps

SETTINGS = dict(model="opt-13b", trace="sharegpt", seed=0, block_size=16, preemption="recompute", cpu_scale=1.0,
                min_duration=3600.0, n=1, beam_width=1, prefix_caching=False, tokenizer="gpt2")


@pytest.fixture
def linear_latency(monkeypatch):
    """simulate_point replaced by latency = slope × rate (s/token) and a peak of ``peak`` req/s, counting calls."""
    calls = []

    def install(slope=0.1, peak=8.0):
        def fake(model, trace, system, rate, *args, **kwargs):
            calls.append((system, rate))
            if math.isinf(rate):
                return {"throughput_rps": peak, "rate": rate}
            return {"normalized_latency": slope * rate, "converged": True}

        monkeypatch.setattr(sustained, "simulate_point", fake)
        return calls

    return install


def _known(rows, **changes):
    return pd.DataFrame([{**SETTINGS, **changes, "system": s, "rate": r, "normalized_latency": lat}
                         for s, r, lat in rows])


def test_bisection_finds_the_crossing(linear_latency):
    calls = linear_latency(0.1)  # 0.2 s/token is crossed at 2 req/s; the peak is 8 req/s
    out = serving.sustained_rate(["paged"], thresholds=(0.2,), rel_tol=0.03, workers=1)
    rate = out.loc[0, "sustained_rate"]
    assert 2.0 * (1 - 0.03) <= rate <= 2.0 and not out.loc[0, "at_throughput"]
    assert out.loc[0, "throughput_rps"] == 8.0 and calls[0] == ("paged", math.inf)


def test_thresholds_share_their_evaluations(linear_latency):
    calls = linear_latency(0.1)
    out = serving.sustained_rate(["paged"], thresholds=(0.1, 0.2, 0.5), rel_tol=0.03, workers=1).set_index("threshold")
    for thr, crossing in ((0.1, 1.0), (0.2, 2.0), (0.5, 5.0)):
        assert crossing * 0.97 <= out.loc[thr, "sustained_rate"] <= crossing
    shared = len(calls)
    calls.clear()
    for thr in (0.1, 0.2, 0.5):
        serving.sustained_rate(["paged"], thresholds=(thr,), rel_tol=0.03, workers=1)
    assert shared < len(calls)


def test_never_above_the_saturated_throughput(linear_latency):
    linear_latency(0.001, peak=3.0)  # the latency never reaches the threshold: the peak bounds the search
    out = serving.sustained_rate(["paged"], thresholds=(0.2,), rel_tol=0.03, workers=1)
    assert out.loc[0, "sustained_rate"] < 3.0 and out.loc[0, "sustained_rate"] >= 3.0 * 0.97
    assert out.loc[0, "at_throughput"]


def test_known_rows_narrow_the_bracket_and_are_not_run_again(linear_latency):
    calls = linear_latency(0.1)
    serving.sustained_rate(["paged"], thresholds=(0.2,), workers=1)
    n_plain = len(calls)
    calls.clear()
    known = pd.concat([_known([("paged", 1.5, 0.15), ("paged", 2.5, 0.25), ("orca-max", 1.0, 9.0)]),
                       _known([("paged", math.inf, math.nan)], min_duration=math.nan).assign(throughput_rps=8.0)])
    out = serving.sustained_rate(["paged"], thresholds=(0.2,), workers=1, known=known)
    assert len(calls) < n_plain and all(1.5 < r < 2.5 for _, r in calls), "known rates and the peak are reused"
    assert 2.0 * 0.95 <= out.loc[0, "sustained_rate"] <= 2.0


def test_known_rows_with_other_settings_are_ignored(linear_latency):
    calls = linear_latency(0.1)
    serving.sustained_rate(["paged"], thresholds=(0.2,), workers=1)
    n_plain = len(calls)
    calls.clear()
    serving.sustained_rate(["paged"], thresholds=(0.2,), workers=1,
                           known=_known([("paged", 1.5, 0.15), ("paged", 2.5, 0.25)], seed=7))
    assert len(calls) == n_plain


def test_nothing_sustained(linear_latency):
    linear_latency(100.0)  # 0.2 s/token crossed at 0.002 req/s, below lo
    out = serving.sustained_rate(["paged"], thresholds=(0.2,), lo=0.05, workers=1)
    assert out.loc[0, "sustained_rate"] < 0.05


@pytest.mark.parametrize("kwargs", [dict(lo=0.0), dict(rel_tol=0.0), dict(rel_tol=1.5), dict(thresholds=()),
                                    dict(thresholds=(0.0,))])
def test_bad_search_arguments(kwargs):
    with pytest.raises(ValueError):
        serving.sustained_rate(["paged"], workers=1, **kwargs)


def test_sustained_rate_is_at_most_the_throughput_on_a_real_small_run():
    """Unpatched, every system: the search never reports a sustained rate above the saturated throughput."""
    out, points = serving.sustained_rate(list(serving.SYSTEMS), thresholds=(0.1, 0.5), rel_tol=0.1,
                                         duration_scale=0.03, saturated_requests=300, workers=1, return_points=True)
    assert (out["sustained_rate"] <= out["throughput_rps"]).all()
    assert (out["sustained_rate"] > 0).all()
    low, high = (out[out["threshold"] == t].set_index("system")["sustained_rate"] for t in (0.1, 0.5))
    assert (low <= high).all()  # a looser threshold sustains at least as much
    finite = points[points["rate"] < math.inf]
    assert set(points["system"]) == set(serving.SYSTEMS) and (finite["arrival_seconds"] > 0).all()


def test_paper_length_point():
    row = serving.simulate_point("opt-13b", "sharegpt", "paged", 2.0, duration_scale=0.02)
    assert row["min_duration"] == pytest.approx(72.0)
    assert row["arrival_seconds"] in (250.0, 500.0)  # 72 s would hold ~144 requests: lengthened to ~MIN_REQUESTS
    assert row["num_requests"] > 100 and isinstance(row["converged"], bool)
    assert row["avg_decode_batched_requests"] >= row["avg_batched_requests"] > 0
    assert 0 <= row["first_half_latency"] and row["normalized_latency"] > 0
    assert serving.simulate_point("opt-175b", "sharegpt", "paged", 2.0, duration_scale=0.02)["min_duration"] == 18.0


def test_a_low_rate_run_holds_enough_requests():
    from paged.experiments.serving.run_length import MIN_REQUESTS, run_duration

    assert run_duration(3600.0, 10.0) == 3600.0 and run_duration(900.0, 0.002) == MIN_REQUESTS / 0.002
    row = serving.simulate_point("opt-175b", "sharegpt", "fastertransformer", 0.01, duration_scale=0.02)
    assert row["num_requests"] >= 0.8 * MIN_REQUESTS  # the paper's 15 minutes would hold ~9


def test_a_point_past_its_cap_stops_early():
    row = serving.simulate_point("opt-13b", "sharegpt", "orca-max", 3.0, duration_scale=0.1, latency_cap=0.5)
    assert row["stopped_early"] and not row["converged"] and row["normalized_latency"] > 0.5


def test_saturated_point_and_fixed_count_point():
    peak = serving.simulate_point("opt-13b", "sharegpt", "paged", math.inf, num_requests=200)
    assert peak["num_requests"] == 200 and peak["arrival_seconds"] == 0.0 and peak["throughput_rps"] > 0
    fixed = serving.simulate_point("opt-13b", "sharegpt", "paged", 2.0, num_requests=50, seed=4)
    assert fixed["num_requests"] == 50 and math.isnan(fixed["converged"])


def test_fastertransformer_has_no_host_costs():
    assert serving.cost_model_for("opt-13b", "fastertransformer", cpu_scale=2.0).cpu_scale == 0.0
    assert serving.cost_model_for("opt-13b", "paged", cpu_scale=2.0).cpu_scale == 2.0


@pytest.mark.parametrize("kwargs,match", [(dict(num_requests=0), "num_requests"), (dict(num_requests=2.5), "num_requests"),
                                          (dict(rate=math.nan), "rate must be a number > 0"),
                                          (dict(rate=-1.0), "rate must be a number > 0"), (dict(rate="2"), "rate must be a number"),
                                          (dict(block_size=0, num_requests=5), "block_size must be an integer"),
                                          (dict(duration_scale=-1.0), "duration_scale must be a number > 0"),
                                          (dict(system="hf-generate"), "for the simulator"),
                                          (dict(latency_cap=-1, num_requests=20), "latency_cap must be a number > 0"),
                                          (dict(latency_cap=0.0, num_requests=20), "latency_cap must be a number > 0")])
def test_simulate_point_refuses_bad_input_naming_it(kwargs, match):
    with pytest.raises(ValueError, match=match):
        serving.simulate_point(**kwargs)


def test_a_known_run_is_reused_not_run_again(monkeypatch):
    point = dict(model="opt-13b", trace="sharegpt", system="paged", rate=2.0, duration_scale=0.02)
    first = serving.sweep([point, dict(point, num_requests=40)], workers=1)
    calls = []
    real = serving.simulate_point
    monkeypatch.setattr(sweeps, "simulate_point", lambda **kw: calls.append(kw) or real(**kw))
    again = serving.sweep([point, dict(point, latency_cap=0.5), dict(point, num_requests=40), dict(point, rate=2.5)],
                          workers=1, known=first)
    assert [c["rate"] for c in calls] == [2.5]  # only the new rate ran
    cols = [c for c in first.columns if c not in serving.WALL_TIME_COLUMNS]
    pd.testing.assert_frame_equal(again.loc[[0, 2], cols].reset_index(drop=True), first[cols], check_dtype=False)
    # Another setting, a cap the known run exceeded, or a different count: not the same run.
    assert serving.reusable(dict(point, block_size=32), first) is None
    assert serving.reusable(dict(point, latency_cap=first.loc[0, "normalized_latency"] / 2), first) is None
    assert serving.reusable(dict(point, num_requests=41), first) is None
    assert serving.reusable(dict(point, duration_scale=0.03), first) is None
    assert serving.reusable(point, first.assign(normalized_latency=math.nan)) is None  # no latency: not a finished run
    with pytest.raises(TypeError, match="known must be a DataFrame"):
        serving.sweep([point], workers=1, known=[first])
    with pytest.raises(TypeError, match="no parameter.*'sytem'"):  # a typo must not match paged's row
        serving.sweep([dict(point, sytem="orca-max")], workers=1, known=first)


def test_names_take_one_name_or_a_list_and_refuse_empty_or_repeated_lists():
    assert serving.as_names("systems", "paged") == ["paged"]  # one name, not its letters
    assert serving.as_names("widths", (2, 4)) == [2, 4]
    with pytest.raises(ValueError, match="systems must name at least one"):
        serving.sustained_rate([])
    with pytest.raises(ValueError, match="systems names 'paged' twice"):
        serving.sustained_rate(["paged", "paged"])
    with pytest.raises(ValueError, match="model must name at least one"):
        serving.sustained_rate(["paged"], model=[])


@pytest.mark.parametrize("kwargs", [dict(prefix_caching="no"), dict(record_sharing="yes")])
def test_simulate_point_refuses_a_flag_that_is_not_a_bool(kwargs):
    with pytest.raises(ValueError, match="prefix_caching must be True or False"):
        serving.simulate_point(num_requests=5, **kwargs)
