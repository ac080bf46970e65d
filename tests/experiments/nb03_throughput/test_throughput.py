"""Notebook 03's host-cost sensitivity of the peaks (paged.experiments.nb03_throughput.throughput.peak_sensitivity)."""

import math

import pandas as pd
import pytest

from paged.experiments.nb03_throughput import throughput as capacity
from paged.experiments import serving
from paged.experiments.serving import sustained, sweeps


def test_peaks_reuse_known_runs_and_run_fastertransformer_once(monkeypatch):
    runs = []
    real = serving.simulate_point

    def counting(*args, **kwargs):
        runs.append((kwargs["system"], kwargs["cpu_scale"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(sweeps, "simulate_point", counting)
    monkeypatch.setattr(sustained, "simulate_point", counting)
    systems = ["paged", "orca-max", "fastertransformer"]
    fresh = capacity.peak_sensitivity(["sharegpt"], systems, scales=(0.0, 1.0), saturated_requests=60, workers=1)
    assert sorted(runs) == [("fastertransformer", 0.0), ("orca-max", 0.0), ("orca-max", 1.0),
                            ("paged", 0.0), ("paged", 1.0)]  # no host costs: one run serves every scale
    peaks = {s: real("opt-13b", "sharegpt", s, math.inf, num_requests=60)["throughput_rps"] for s in systems}
    known = pd.DataFrame([{"model": "opt-13b", "trace": "sharegpt", "system": s, "cpu_scale": 1.0,
                           "throughput_rps": p} for s, p in peaks.items()])
    runs.clear()
    reused = capacity.peak_sensitivity(["sharegpt"], systems, scales=(0.0, 1.0), saturated_requests=60, workers=1,
                                       known=known)
    assert sorted(runs) == [("orca-max", 0.0), ("paged", 0.0)]
    pd.testing.assert_frame_equal(fresh, reused)
    assert set(fresh["baseline"]) == {"Orca (Max)", "FasterTransformer"} and (fresh["peak ÷"] > 1).all()


def test_littles_law_by_hand():
    batched = pd.DataFrame([{"trace": "sharegpt", "load": "paper", "rate": 2.0, "system": "paged", "throughput_rps": 2.0,
                             "mean_running_seconds": 10.0, "time_avg_batched_requests": 19.5},
                            {"trace": "sharegpt", "load": "paged's knee", "rate": 3.0, "system": "paged",
                             "throughput_rps": 2.9, "mean_running_seconds": 12.0, "time_avg_batched_requests": 36.0},
                            {"trace": "sharegpt", "load": "paper", "rate": 2.0, "system": "orca-max", "throughput_rps": 0.8,
                             "mean_running_seconds": 10.0, "time_avg_batched_requests": 7.0}])
    table = capacity.littles_law(batched, {"sharegpt": 250.0})
    first = table.iloc[0]
    assert first["λ·W"] == 20.0 and first["s/token this run"] == 0.04
    assert first["paper batch"] == 30.42 and first["s/token the paper's batch implies"] == pytest.approx(30.42 / 2 / 337.99)  # the paper's trace
    assert math.isnan(table.iloc[1]["paper batch"])  # the paper states no batch at 3 req/s
    saturated = table.iloc[2]  # served 0.8 of 2 req/s: the law holds with the served rate, no implied step time
    assert not saturated["keeps up"] and saturated["λ·W"] == 8.0 and math.isnan(saturated["s/token the paper's batch implies"])
    with pytest.raises(KeyError, match="alpaca"):
        capacity.littles_law(batched.assign(trace="alpaca"), {"sharegpt": 250.0})
