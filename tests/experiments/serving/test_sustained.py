"""Peak (saturated) throughput and the sustained-rate search (paged.experiments.serving.sustained): a bisection per
system that shares its evaluations across thresholds, reuses known rows and never reports more than the peak."""

import math

import pandas as pd
import pytest

from paged.experiments import serving
from paged.experiments.serving import sustained

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


def test_names_take_one_name_or_a_list_and_refuse_empty_or_repeated_lists():
    assert serving.as_names("systems", "paged") == ["paged"]  # one name, not its letters
    assert serving.as_names("widths", (2, 4)) == [2, 4]
    with pytest.raises(ValueError, match="systems must name at least one"):
        serving.sustained_rate([])
    with pytest.raises(ValueError, match="systems names 'paged' twice"):
        serving.sustained_rate(["paged", "paged"])
    with pytest.raises(ValueError, match="model must name at least one"):
        serving.sustained_rate(["paged"], model=[])


def test_a_probe_near_the_peak_ends_a_flat_search_with_one_run(linear_latency):
    calls = linear_latency(0.001, peak=3.0)  # flat to the peak: bisection from [0, peak] takes several runs
    plain = serving.sustained_rate(["paged"], thresholds=(0.2,), rel_tol=0.03, workers=1)
    bisected = len(calls)
    calls.clear()
    probed = serving.sustained_rate(["paged"], thresholds=(0.2,), rel_tol=0.03, workers=1, probes=(0.98,))
    assert [r for _, r in calls] == [math.inf, 0.98 * 3.0]  # the peak, then the probe only
    assert bisected > 3 and probed.loc[0, "at_throughput"] and plain.loc[0, "at_throughput"]
    assert probed.loc[0, "sustained_rate"] == pytest.approx(0.98 * 3.0)


def test_a_failing_probe_only_lowers_the_bracket(linear_latency):
    calls = linear_latency(0.1)  # crosses 0.2 at 2 req/s, far below the probe at 0.98 × 8
    out = serving.sustained_rate(["paged"], thresholds=(0.2,), rel_tol=0.03, workers=1, probes=(0.98,))
    assert calls[1] == ("paged", 0.98 * 8.0)
    assert 2.0 * 0.97 <= out.loc[0, "sustained_rate"] <= 2.0 and not out.loc[0, "at_throughput"]


def test_a_latency_cap_above_the_threshold_lets_runs_go_on_to_it(linear_latency, monkeypatch):
    caps = []

    def fake(model, trace, system, rate, *args, latency_cap=None, **kwargs):
        caps.append(latency_cap)
        if math.isinf(rate):
            return {"throughput_rps": 8.0, "rate": rate}
        return {"normalized_latency": 0.1 * rate, "converged": True}

    monkeypatch.setattr(sustained, "simulate_point", fake)
    serving.sustained_rate(["paged"], thresholds=(0.2,), workers=1)
    assert set(caps[1:]) == {0.2}  # the saturated run has no cap; the search's runs stop at the threshold
    caps.clear()
    out = serving.sustained_rate(["paged"], thresholds=(0.2,), workers=1, latency_cap=0.5)
    assert set(caps[1:]) == {0.5} and 2.0 * 0.97 <= out.loc[0, "sustained_rate"] <= 2.0  # same answer
    with pytest.raises(ValueError, match="latency_cap must be at least the largest threshold"):
        serving.sustained_rate(["paged"], thresholds=(0.2, 0.5), workers=1, latency_cap=0.3)
