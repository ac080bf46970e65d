"""Figures and paper comparisons of notebook 03 (§6.2, §6.5, §7.2, §7.3): plotting only.

The numbers come from :mod:`paged.serving`; this module turns its tables into the paper's
figures (Fig. 12, 13, 17, 18b, 19) and the "paper vs this run" table.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from paged.cost_model import get_cost_model
from paged.plotting import SYSTEM_COLORS

__all__ = ["plot_latency_vs_rate", "plot_batched_requests", "plot_vs_block_size", "swap_recompute_table",
           "plot_swap_recompute", "paper_comparison"]


def plot_latency_vs_rate(df: pd.DataFrame, ylim: float = 1.0):
    """Normalized latency (s/token) vs request rate, one panel per (model, trace) (Fig. 12/17)."""
    panels = list(df.groupby(["model", "trace"], sort=False))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.2), squeeze=False)
    for ax, ((model, trace), part) in zip(axes[0], panels):
        sns.lineplot(data=part, x="rate", y="normalized_latency", hue="system", marker="o", ax=ax,
                     palette=SYSTEM_COLORS)
        ax.set_ylim(0, ylim)
        ax.set_title(f"{model}, {trace}")
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel("normalized latency (s/token)")
    fig.tight_layout()
    return fig


def plot_batched_requests(df: pd.DataFrame):
    """Average batched requests per system, one panel per trace/rate (Fig. 13)."""
    panels = list(df.groupby(["trace", "rate"], sort=False))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.0), squeeze=False)
    for ax, ((trace, rate), part) in zip(axes[0], panels):
        sns.barplot(data=part, x="system", y="avg_batched_requests", hue="system", palette=SYSTEM_COLORS,
                    ax=ax, legend=False)
        ax.set_title(f"{trace} @ {rate:g} req/s")
        ax.set_xlabel("")
        ax.set_ylabel("avg. batched requests")
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    return fig


def plot_vs_block_size(df: pd.DataFrame, hue: str = "trace"):
    """Normalized latency vs block size (Fig. 18b, 19b), one line per ``hue`` value."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    sns.lineplot(data=df, x="block_size", y="normalized_latency", hue=hue, marker="o", ax=ax)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("block size (tokens)")
    ax.set_ylabel("normalized latency (s/token)")
    fig.tight_layout()
    return fig


def swap_recompute_table(block_sizes, num_tokens: int = 1024, model: str = "opt-13b") -> pd.DataFrame:
    """Fig. 19a from the cost model: time (ms) to swap ``num_tokens`` tokens of KV out, in, or to
    recompute them (a prefill; flat in block size), per block size."""
    rows = []
    for bs in block_sizes:
        cost = get_cost_model(model, block_size=bs)
        blocks = -(-num_tokens // bs)
        swap = cost.swap_time(blocks) * 1e3
        rows += [{"block_size": bs, "operation": "swap out", "ms": swap},
                 {"block_size": bs, "operation": "swap in", "ms": swap},
                 {"block_size": bs, "operation": "recompute", "ms": cost.recompute_time(num_tokens) * 1e3}]
    return pd.DataFrame(rows)


def plot_swap_recompute(micro: pd.DataFrame, e2e: pd.DataFrame):
    """Fig. 19: (a) swap/recompute time vs block size; (b) normalized latency, swap vs recompute."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.2))
    sns.lineplot(data=micro, x="block_size", y="ms", hue="operation", style="operation", marker="o", ax=a)
    a.set(xscale="log", yscale="log", xlabel="block size (tokens)", ylabel="time (ms)", title="(a) microbenchmark")
    a.set_xscale("log", base=2)
    sns.lineplot(data=e2e, x="block_size", y="normalized_latency", hue="preemption", marker="o", ax=b)
    b.set_xscale("log", base=2)
    b.set(xlabel="block size (tokens)", ylabel="normalized latency (s/token)", title="(b) end to end")
    fig.tight_layout()
    return fig


def paper_comparison(sustained: pd.DataFrame, batched: pd.DataFrame) -> pd.DataFrame:
    """The paper's ShareGPT/OPT-13B claims beside this run: sustained-rate ratios and Fig. 13."""
    from paged.paper import FIG13_BATCHED_REQUESTS

    rate = sustained.set_index("system")["sustained_rate"]
    paper_ratio = {"orca-oracle": "1.7–2.7×", "orca-max": "2.7–8×", "fastertransformer": "up to 22×",
                   "orca-pow2": "not stated"}
    rows = [{"claim": f"sustained rate paged ÷ {s}", "paper": paper_ratio[s],
             "this run": f"{rate['paged'] / rate[s]:.2f}×"} for s in paper_ratio if s in rate and "paged" in rate]
    for (trace, r), part in batched.groupby(["trace", "rate"], sort=False):
        key = f"{trace}@{r:g}"
        paper = FIG13_BATCHED_REQUESTS.get(key, {})
        for _, row in part.iterrows():
            rows.append({"claim": f"avg batched requests, {key}, {row['system']}",
                         "paper": f"{paper[row['system']]:.2f}" if row["system"] in paper else "not stated",
                         "this run": f"{row['avg_batched_requests']:.2f}"})
    return pd.DataFrame(rows)
