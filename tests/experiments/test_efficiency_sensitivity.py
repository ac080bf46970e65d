"""The efficiency-factor sensitivity of Fig. 12's peak ratios: both ends of each sourced range, one run each."""

import pytest

from paged.experiments.efficiency_sensitivity import efficiency_sensitivity
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
