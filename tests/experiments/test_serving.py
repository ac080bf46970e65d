"""Sustained-rate search of paged.experiments.serving: bisection, brackets from an earlier sweep, censoring."""

import pandas as pd
import pytest

from paged.experiments import serving

SETTINGS = dict(model="opt-13b", trace="sharegpt", num_requests=1000, seed=0, block_size=16, preemption="recompute")


@pytest.fixture
def linear_latency(monkeypatch):
    """simulate_point replaced by latency = slope × rate (s/token), counting calls."""
    calls = []

    def install(slope=0.1):
        def fake(model, trace, system, rate, *args, **kwargs):
            calls.append((system, rate))
            return {"normalized_latency": slope * rate}

        monkeypatch.setattr(serving, "simulate_point", fake)
        return calls

    return install


def _known(rows):
    return pd.DataFrame([{**SETTINGS, "system": s, "rate": r, "normalized_latency": lat} for s, r, lat in rows])


def test_bisection_finds_the_crossing(linear_latency):
    calls = linear_latency(0.1)  # 0.2 s/token is crossed at 2 req/s
    out = serving.sustained_rate(["paged"], lo=0.05, hi=8.0, rel_tol=0.03, workers=1)
    rate = out.loc[0, "sustained_rate"]
    assert 2.0 * (1 - 0.03) <= rate <= 2.0 and not out.loc[0, "censored_at_max"]
    assert len(calls) >= 8


def test_known_sweep_narrows_the_bracket(linear_latency):
    calls = linear_latency(0.1)
    plain = serving.sustained_rate(["paged"], workers=1).loc[0, "sustained_rate"]
    n_plain = len(calls)
    calls.clear()
    known = _known([("paged", 1.0, 0.1), ("paged", 1.5, 0.15), ("paged", 2.5, 0.25), ("paged", 3.0, 0.3),
                    ("orca-max", 1.0, 9.0)])  # other system: ignored
    narrowed = serving.sustained_rate(["paged"], workers=1, known=known).loc[0, "sustained_rate"]
    assert len(calls) < n_plain
    assert all(1.5 < r < 2.5 for _, r in calls), "the sweep's own rates are not simulated again"
    assert 2.0 * 0.97 <= narrowed <= 2.0 and abs(narrowed - plain) <= 0.03 * 2.5


def test_known_rows_with_other_settings_are_ignored(linear_latency):
    calls = linear_latency(0.1)
    serving.sustained_rate(["paged"], workers=1)
    n_plain = len(calls)
    calls.clear()
    known = _known([("paged", 1.5, 0.15), ("paged", 2.5, 0.25)]).assign(seed=7)
    serving.sustained_rate(["paged"], workers=1, known=known)
    assert len(calls) == n_plain


def test_censored_at_max(linear_latency):
    calls = linear_latency(0.001)
    out = serving.sustained_rate(["paged"], hi=8.0, workers=1)
    assert out.loc[0, "censored_at_max"] and out.loc[0, "sustained_rate"] == 8.0 and len(calls) == 1
    calls.clear()
    out = serving.sustained_rate(["paged"], hi=8.0, workers=1, known=_known([("paged", 8.0, 0.008)]))
    assert out.loc[0, "censored_at_max"] and out.loc[0, "sustained_rate"] == 8.0 and not calls


def test_even_lo_fails(linear_latency):
    linear_latency(100.0)  # crossing at 0.002 req/s, below lo
    out = serving.sustained_rate(["paged"], lo=0.05, workers=1, known=_known([("paged", 0.05, 5.0)]))
    assert out.loc[0, "sustained_rate"] < 0.05


@pytest.mark.parametrize("kwargs", [dict(lo=0.0), dict(lo=2.0, hi=1.0), dict(rel_tol=0.0), dict(rel_tol=1.5)])
def test_bad_search_arguments(kwargs):
    with pytest.raises(ValueError):
        serving.sustained_rate(["paged"], workers=1, **kwargs)


def test_chatbot_from_a_real_sweep():
    """Unpatched: the result lies between the sweep's last passing and first failing rate."""
    common = dict(model="opt-13b", trace="sharegpt-chat", num_requests=80, seed=0, block_size=16,
                  preemption="recompute")
    known = serving.sweep([dict(common, system="paged", rate=r) for r in (0.5, 2.0, 6.0)], workers=1)
    rate = serving.sustained_rate(["paged"], lo=0.05, hi=8.0, workers=1, known=known, **common).loc[0, "sustained_rate"]
    passing = known.normalized_latency <= serving.LATENCY_THRESHOLD
    first_bad = known.rate[~passing].min() if (~passing).any() else 8.0
    below = known.rate[passing & (known.rate < first_bad)]
    assert rate <= first_bad
    if len(below):
        assert rate >= below.max()
