"""The cost model's three stated assumptions at the ends of their ranges (sensitivity panels).

Every other constant of the cost model is sourced or measured (:mod:`paged.sim.gpu_measurements`);
three are assumptions with a stated range (:data:`paged.sim.cost_model.ASSUMPTION_RANGES`):

* the fixed host cost per iteration (``iteration_overhead_s``, 0–2 ms): it moves every system that
  has host costs, so its panel is Fig. 12's peak-throughput ratios at each end
  (:func:`paged.experiments.nb03_throughput.efficiency_sensitivity.efficiency_sensitivity` with this
  range: one saturated run per system and end);
* the paged kernel's per-block overhead (``block_overhead_tokens``, 0.15–2 token rows): at 16-token
  blocks it is anchored to the paper's measured 1.2×, so it moves only other block sizes; its panel
  is the kernel's slowdown against a contiguous one per block size (Fig. 18b's small-block side);
* the issue latency of one host↔device copy (``copy_latency_s``, 2–10 µs): its panel is Fig. 19a,
  swapping 1,024 tokens out and in against recomputing them, per block size.

The last two come from the cost model alone (microseconds to compute); what they do end to end is
read off Fig. 18b and 19b, which run at the central values.
"""

from __future__ import annotations

from dataclasses import replace

import matplotlib.pyplot as plt
import pandas as pd

from paged.experiments.notebook.ticks import plain_log_ticks
from paged.sim.cost_model import ASSUMPTION_RANGES, get_cost_model

__all__ = ["kernel_and_copy_table", "plot_assumptions"]

_ENDS = ("low", "central", "high")


def kernel_and_copy_table(block_sizes, model: str = "opt-13b", tokens: int = 1024) -> pd.DataFrame:
    """Per block size and each end of the two kernel-level assumptions: ``assumption``, ``end``,
    ``value``, ``block_size``, ``quantity`` and ``ratio``: the paged kernel's attention time ÷ a
    contiguous kernel's (``block_overhead_tokens``), and swapping ``tokens`` tokens out and back in ÷
    recomputing them (``copy_latency_s``; > 1: recomputation is cheaper).

    Raises:
        ValueError: for a block size that is not an integer ≥ 1, or an unknown model.
    """
    rows = []
    for bs in block_sizes:
        cost = get_cost_model(model, block_size=bs)
        for end, value in zip(_ENDS, ASSUMPTION_RANGES["block_overhead_tokens"]):
            rows.append({"assumption": "block_overhead_tokens", "end": end, "value": value, "block_size": bs,
                         "quantity": "paged ÷ contiguous attention",
                         "ratio": replace(cost, block_overhead_tokens=value).attention_slowdown})
        blocks = -(-tokens // bs)
        for end, value in zip(_ENDS, ASSUMPTION_RANGES["copy_latency_s"]):
            c = replace(cost, copy_latency_s=value)
            rows.append({"assumption": "copy_latency_s", "end": end, "value": value, "block_size": bs,
                         "quantity": f"swap out + in ÷ recompute, {tokens} tokens",
                         "ratio": 2 * c.swap_time(blocks, bs) / c.recompute_time(tokens)})
    return pd.DataFrame(rows)


def plot_assumptions(peaks: pd.DataFrame, table: pd.DataFrame):
    """Three panels: (a) Fig. 12's peak ratios of paged over each baseline vs the per-iteration host
    cost (``peaks``: :func:`~paged.experiments.nb03_throughput.efficiency_sensitivity.efficiency_sensitivity`
    rows of ``iteration_overhead_s``, the first model and trace); (b) the paged kernel's slowdown and
    (c) swap ÷ recompute vs block size at each end (``table``: :func:`kernel_and_copy_table`)."""
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(12.5, 3.4))
    if len(peaks):
        part = peaks[(peaks["model"] == peaks["model"].iloc[0]) & (peaks["trace"] == peaks["trace"].iloc[0])]
        for baseline, line in part.groupby("baseline", sort=False):
            line = line.sort_values("value")
            a.plot(1e3 * line["value"], line["peak ÷"], marker="o", label=baseline)
        a.set_xticks(sorted(set(1e3 * part["value"])))  # the range's ends and centre: 0, 1, 2 ms
        a.set(xlabel="host cost per iteration (ms)", ylabel="peak paged ÷ baseline",
              title=f"(a) {part['model'].iloc[0]}, {part['trace'].iloc[0]}")
        a.legend(frameon=False, fontsize=7)
    for ax, name, title in ((b, "block_overhead_tokens", "(b) per-block kernel overhead"),
                            (c, "copy_latency_s", "(c) copy issue latency")):
        part = table[table["assumption"] == name]
        for end, line in part.groupby("end", sort=False):
            value = line["value"].iloc[0]
            label = f"{1e6 * value:g} µs" if name == "copy_latency_s" else f"{value:g} token rows"
            ax.plot(line["block_size"], line["ratio"], marker="o", label=f"{end}: {label}",
                    linestyle="-" if end == "central" else "--")
        ax.set_xscale("log", base=2)
        plain_log_ticks(ax.xaxis)  # 8, 16, 32 tokens, not 2^3
        ax.axhline(1.0, color="0.6", linewidth=0.8)
        ax.set(xlabel="block size (tokens)", ylabel=part["quantity"].iloc[0], title=title)
        ax.legend(frameon=False, fontsize=7)
    fig.tight_layout()
    return fig
