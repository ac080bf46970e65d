"""Notebook 03's host-cost sensitivity of the peaks (paged.experiments.nb03_throughput.throughput.peak_sensitivity)."""

import math

import pandas as pd

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
