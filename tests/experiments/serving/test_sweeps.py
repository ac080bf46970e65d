"""Many simulated points (paged.experiments.serving.sweeps): a point already run is reused, not run again."""

import math

import pandas as pd
import pytest

from paged.experiments import serving
from paged.experiments.serving import sweeps


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


def test_a_run_without_sharing_recorded_is_reused_by_a_point_that_asks_for_none():
    point = dict(model="opt-13b", trace="alpaca-bare", system="paged", rate=4.0, num_requests=30, n=2,
                 record_sharing=False)
    first = serving.sweep([point], workers=1)
    assert serving.reusable(point, first) is not None
    assert serving.reusable(dict(point, record_sharing=True), first) is None  # it would record sharing
    assert serving.reusable(dict(point, record_sharing=None), first) is None  # n = 2: it would record sharing too


def test_a_failing_point_does_not_lose_the_others():
    """One bad point: every other point runs, its row comes back on the error, in the points' order."""
    from paged.experiments.notebook.jobs import SweepFailed

    point = dict(model="opt-13b", trace="sharegpt", system="paged", num_requests=30)
    known = serving.sweep([dict(point, rate=1.0)], workers=1)
    with pytest.raises(SweepFailed, match=r"1 of 2 jobs of 'simulate' failed, first simulate_point\(.*rate=-1.0"):
        serving.sweep([dict(point, rate=1.0), dict(point, rate=-1.0), dict(point, rate=4.0)], workers=1, known=known)
    try:
        serving.sweep([dict(point, rate=1.0), dict(point, rate=-1.0), dict(point, rate=4.0)], workers=1, known=known)
    except SweepFailed as err:
        assert [f.index for f in err.failures] == [1]
        assert err.results[1] is None and [r["rate"] for r in (err.results[0], err.results[2])] == [1.0, 4.0]
