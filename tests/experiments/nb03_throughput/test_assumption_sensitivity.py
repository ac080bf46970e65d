"""The cost model's three stated assumptions at their range ends, as the sensitivity panel shows them."""

import pandas as pd

from paged.experiments.nb03_throughput.assumption_sensitivity import kernel_and_copy_table, plot_assumptions


def test_kernel_slowdown_and_swap_over_recompute_move_the_right_way():
    t = kernel_and_copy_table([1, 16, 256])
    kernel = t[t["assumption"] == "block_overhead_tokens"].pivot_table(index="block_size", columns="end", values="ratio")
    assert (kernel.loc[16] == 1.2).all()  # the paper's measured overhead at 16-token blocks, whatever the assumption
    assert kernel.loc[1, "low"] < kernel.loc[1, "central"] < kernel.loc[1, "high"]
    assert kernel.loc[256, "low"] > kernel.loc[256, "high"]  # fewer blocks: a larger per-block overhead counts less
    copy = t[t["assumption"] == "copy_latency_s"].pivot_table(index="block_size", columns="end", values="ratio")
    assert (copy["low"] < copy["central"]).all() and (copy["central"] < copy["high"]).all()
    assert copy.loc[1, "central"] > copy.loc[256, "central"]  # small blocks swap slowly


def test_plot_has_three_panels():
    peaks = pd.DataFrame([{"model": "opt-13b", "trace": "sharegpt", "baseline": "Orca (Oracle)", "value": v,
                           "peak ÷": 1.5} for v in (0.0, 1e-3, 2e-3)])
    assert len(plot_assumptions(peaks, kernel_and_copy_table([8, 16])).axes) == 3
