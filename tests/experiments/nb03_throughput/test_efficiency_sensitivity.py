"""The efficiency-factor sensitivity of Fig. 12's peak ratios: both ends of each sourced range, one run each."""

import pytest

from paged.experiments.nb03_throughput.efficiency_sensitivity import efficiency_sensitivity
from paged.sim.cost_model import EFFICIENCY_RANGES


def test_peak_ratios_at_both_ends_of_each_factor():
    df = efficiency_sensitivity(["opt-175b"], ["sharegpt"], ["paged", "orca-oracle"], saturated_requests=60, workers=1)
    assert len(df) == 2 * 3 and set(df["end"]) == {"low", "central", "high"}
    for factor, (low, central, high) in EFFICIENCY_RANGES.items():
        part = df[df["factor"] == factor].set_index("end")
        assert part.loc["low", "value"] == low and part.loc["high", "value"] == high
        assert part.loc["central", "peak ÷"] == df[df["end"] == "central"]["peak ÷"].iloc[0]  # one central run
    # faster memory gives both systems more throughput
    mem = df[df["factor"] == "memory_efficiency"].set_index("end")
    assert mem.loc["high", "paged peak"] > mem.loc["low", "paged peak"]
    with pytest.raises(ValueError, match="must include 'paged'"):
        efficiency_sensitivity(["opt-13b"], ["sharegpt"], ["orca-oracle"])


def test_plot_has_a_panel_per_factor_and_model():
    import pandas as pd

    from paged.experiments.nb03_throughput import throughput_figures as throughput

    rows = [{"model": m, "trace": "sharegpt", "factor": f, "end": e, "value": v, "baseline": "Orca (Oracle)",
             "peak ÷": 1.5 + v} for m in ("opt-13b", "opt-66b") for f in ("memory_efficiency", "compute_efficiency")
            for e, v in (("low", 0.5), ("central", 0.6), ("high", 0.8))]
    fig = throughput.plot_efficiency_sensitivity(pd.DataFrame(rows))
    assert len(fig.axes) == 4


def test_an_efficiency_end_keeps_its_ratio_to_the_gpus_own_central_value_and_other_fields_vary_as_given():
    from paged.experiments.nb03_throughput.efficiency_sensitivity import _used
    from paged.sim.config import ServingConfig
    from paged.sim.cost_model import ASSUMPTION_RANGES

    h100 = ServingConfig(model="llama-3.1-8b@1xh100-sxm:2048", system="paged").cost_model()
    low, central, high = EFFICIENCY_RANGES["memory_efficiency"]
    assert _used(h100, "memory_efficiency", central) == pytest.approx(h100.memory_efficiency)  # 0.95 on an H100
    assert _used(h100, "memory_efficiency", low) == pytest.approx(0.95 * low / central)
    assert _used(h100, "memory_efficiency", high) == pytest.approx(0.95 * high / central)
    assert _used(h100, "memory_efficiency", 0.9) == 1.0  # 0.95 × 0.9 / 0.82 > 1: capped at the datasheet
    a100 = ServingConfig(model="opt-13b", system="paged").cost_model()
    assert _used(a100, "compute_efficiency", 0.68) == pytest.approx(0.68)
    assert _used(a100, "iteration_overhead_s", 2e-3) == 2e-3
    df = efficiency_sensitivity(["opt-13b"], ["sharegpt"], ["paged", "orca-oracle"], saturated_requests=60, workers=1,
                                ranges={"iteration_overhead_s": ASSUMPTION_RANGES["iteration_overhead_s"]})
    part = df.set_index("end")
    assert set(df["factor"]) == {"iteration_overhead_s"} and part.loc["high", "on this GPU"] == 2e-3
    assert part.loc["high", "paged peak"] < part.loc["low", "paged peak"]  # more host time, fewer requests/s
