"""Figures of notebook 03 (§6.2, §6.5, §7.2, §7.3): plotting only.

The numbers come from :mod:`paged.experiments.serving` and :mod:`paged.experiments.nb03_throughput.throughput`; this
module turns their tables into the paper's figures (Fig. 12, 13, 17, 18b, 19), the tables saved
beside them (:func:`figure_data`, without wall-clock columns, so a rerun rewrites them byte for
byte) and the per-request KV footprint of each system on a trace
(:func:`kv_footprint`); the "paper vs this run" table is
:mod:`paged.experiments.nb03_throughput.comparison`.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, NullFormatter

from paged.block.allocator import DEFAULT_BLOCK_SIZE
from paged.contiguous import BuddyAllocator, reservation_size
from paged.experiments.nb03_throughput.throughput import BATCH_COUNTS, workload
from paged.experiments.notebook.paper import FIG12_RATE_AXES, FIG13_BATCHED_REQUESTS
from paged.experiments.notebook.plotting import SYSTEM_COLORS, plain_log_ticks
from paged.experiments.serving import LATENCY_THRESHOLD, SYSTEMS, WALL_TIME_COLUMNS
from paged.sim.cost_model import PRESETS, get_cost_model

__all__ = ["figure_data", "plot_latency_vs_rate", "plot_sensitivity", "plot_efficiency_sensitivity", "plot_batched_requests", "plot_vs_block_size",
           "swap_recompute_table", "plot_swap_recompute", "kv_footprint", "plot_kv_footprint"]


def figure_data(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` without the wall-clock columns (:data:`paged.experiments.serving.WALL_TIME_COLUMNS`): the table to
    save beside a figure, identical on every rerun with the same parameters. ``df`` is not changed."""
    return df.drop(columns=[c for c in WALL_TIME_COLUMNS if c in df.columns])


def _system_order(systems) -> list[str]:
    """Systems in :data:`paged.experiments.serving.SYSTEMS` order, unknown names last (sorted)."""
    present = set(systems)
    return [s for s in SYSTEMS if s in present] + sorted(present - set(SYSTEMS))


def _curve(ax, part: pd.DataFrame, color, top: float | None) -> None:
    """One system's latency curve: filled markers where the run finished, open ones at the lower
    bound of runs stopped early; points above ``top`` drawn at ``top``."""
    part = part.sort_values("rate")
    y = part["normalized_latency"].to_numpy(dtype=float)
    if top is not None:
        y = np.minimum(y, top)
    early = part["stopped_early"].fillna(False).astype(bool).to_numpy() if "stopped_early" in part else \
        np.zeros(len(part), bool)
    ax.plot(part["rate"], y, color=color, linewidth=1.3)
    ax.plot(part["rate"][~early], y[~early], "o", color=color, markersize=3.5)
    ax.plot(part["rate"][early], y[early], "^", color=color, markersize=4.5, markerfacecolor="white")


def plot_latency_vs_rate(points: pd.DataFrame, *, log: bool = False, ylim: tuple[float, float] | None = (0.0, 1.0),
                         threshold: float | None = LATENCY_THRESHOLD, paper_axes: dict | None = None):
    """Normalized latency (s/token) vs request rate (req/s), one panel per (trace, model) (Fig. 12/17).

    Linear axes by default, as the paper draws them (y cut at ``ylim``; points above it drawn at the
    top); ``log=True`` gives log-log axes over the whole range, where every system (also
    FasterTransformer at its small rates) is visible. Each system's saturated throughput (its
    ``rate=inf`` row) is a dotted vertical line in its colour: the rate where its latency explodes.
    The paper's rate axis (``paper_axes``, default :data:`paged.experiments.notebook.paper.FIG12_RATE_AXES`)
    ends at the grey dash-dot line; the x-axis reaches past it where our knees lie beyond. Open
    triangles are runs stopped once their latency was sure to pass a cap (plotted at that bound).

    Raises:
        ValueError: if ``points`` has no finite-rate rows.
    """
    finite = points[np.isfinite(points["rate"])]
    if len(finite) == 0:
        raise ValueError("no rows to plot")
    axes_ranges = FIG12_RATE_AXES if paper_axes is None else paper_axes
    kinds = ("sharegpt", "alpaca", "chatbot")
    traces = sorted(dict.fromkeys(finite["trace"]), key=lambda t: kinds.index(workload(t)))
    models = sorted(dict.fromkeys(finite["model"]), key=lambda m: PRESETS.index(m) if m in PRESETS else len(PRESETS))
    order = _system_order(finite["system"].unique())
    fig, axes = plt.subplots(len(traces), len(models), figsize=(3.6 * len(models), 2.9 * len(traces)),
                             squeeze=False)
    paper_drawn = False
    for i, trace in enumerate(traces):
        for j, model in enumerate(models):
            ax = axes[i][j]
            panel = points[(points["trace"] == trace) & (points["model"] == model)]
            peaks = panel[~np.isfinite(panel["rate"])].set_index("system")["throughput_rps"] \
                if "throughput_rps" in panel else pd.Series(dtype=float)
            for s in order:
                part = panel[(panel["system"] == s) & np.isfinite(panel["rate"])]
                if len(part):
                    _curve(ax, part, SYSTEM_COLORS.get(s, "0.3"), None if log else ylim and ylim[1])
                if s in peaks.index:
                    ax.axvline(peaks[s], color=SYSTEM_COLORS.get(s, "0.3"), linestyle=":", linewidth=1)
            if threshold is not None:
                ax.axhline(threshold, color="0.35", linestyle="--", linewidth=1)
            paper = axes_ranges.get((workload(trace), model))
            if paper is not None and not log:
                ax.axvline(paper[1], color="0.55", linestyle="-.", linewidth=1)
                paper_drawn = True
            if log:
                ax.set_xscale("log")
                ax.set_yscale("log")
                for axis in (ax.xaxis, ax.yaxis):
                    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                    axis.set_minor_formatter(NullFormatter())
            else:
                rates = panel.loc[np.isfinite(panel["rate"]), "rate"]
                right = max([paper[1] if paper else 0.0, *(1.1 * peaks.to_numpy()), *rates.to_numpy()])
                ax.set_xlim(0, right)
                if ylim is not None:
                    ax.set_ylim(*ylim)
            ax.set_title(f"{model}, {trace}", fontsize=10)
            ax.set_xlabel("request rate (req/s)" if i == len(traces) - 1 else "")
            ax.set_ylabel("normalized latency (s/token)" if j == 0 else "")
    handles = [Line2D([], [], color=SYSTEM_COLORS.get(s, "0.3"), marker="o", markersize=4, label=s) for s in order]
    handles.append(Line2D([], [], color="0.3", linestyle=":", label="saturated throughput (latency → ∞)"))
    if threshold is not None:
        handles.append(Line2D([], [], color="0.35", linestyle="--", label=f"{threshold:g} s/token"))
    if paper_drawn:  # a legend entry only for what the figure shows
        handles.append(Line2D([], [], color="0.55", linestyle="-.", label="end of the paper's axis"))
    early = "stopped_early" in finite and finite["stopped_early"].fillna(False).astype(bool).any()
    if early:  # only when the figure has such markers
        handles.append(Line2D([], [], color="0.3", marker="^", markerfacecolor="white", linestyle="",
                              label="stopped early (≥)"))
    fig.tight_layout()
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    return fig


def plot_sensitivity(ratios: pd.DataFrame, column: str):
    """Paged ÷ each baseline (``column`` of :func:`paged.experiments.nb03_throughput.throughput.ratio_table` rows with a
    ``cpu_scale`` column) vs the host-cost scale, one panel per trace."""
    panels = list(ratios.groupby("trace", sort=False))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.2), squeeze=False)
    for ax, (trace, part) in zip(axes[0], panels):
        for baseline, line in part.groupby("baseline", sort=False):
            line = line.sort_values("cpu_scale")
            ax.plot(line["cpu_scale"], line[column], marker="o", label=baseline)
        ax.axvline(1.0, color="0.55", linestyle=":", linewidth=1)  # the sourced host costs: the headline runs
        ax.set_xticks(sorted(part["cpu_scale"].unique()))
        ax.set(xlabel="host (CPU) costs × sourced value (dotted: 1×)", title=trace,
               ylabel=f"paged ÷ baseline, sustained rate\n{column.removeprefix('÷ ')}")
    fig.tight_layout()
    fig.legend(*axes[0][0].get_legend_handles_labels(), title="baseline", loc="center left", bbox_to_anchor=(1.0, 0.5),
               frameon=False, fontsize=8)
    return fig


def plot_efficiency_sensitivity(df: pd.DataFrame, trace: str | None = None):
    """Paged's peak ÷ each baseline's vs each efficiency factor at its low, central and high
    value (:func:`paged.experiments.nb03_throughput.efficiency_sensitivity.efficiency_sensitivity` rows), for one
    trace (default the first): one row of panels per factor, one column per model, a line per baseline."""
    trace = df["trace"].iloc[0] if trace is None else trace
    df = df[df["trace"] == trace]
    factors, models = list(df["factor"].unique()), list(df["model"].unique())
    fig, axes = plt.subplots(len(factors), len(models), figsize=(3.6 * len(models), 2.8 * len(factors)), squeeze=False)
    for i, factor in enumerate(factors):
        for j, model in enumerate(models):
            ax = axes[i][j]
            part = df[(df["factor"] == factor) & (df["model"] == model)]
            x = "on this GPU" if "on this GPU" in part else "value"  # the value the model ran with
            for baseline, line in part.groupby("baseline", sort=False):
                line = line.sort_values(x)
                ax.plot(line[x], line["peak ÷"], marker="o", label=baseline)
            ax.set(xlabel=factor.replace("_", " "), ylabel="peak paged ÷ baseline", title=f"{model}, {trace}")
            if df["peak ÷"].max() > 3 * df["peak ÷"].min():  # ratios far apart: log, labelled plainly
                ax.set_yscale("log")
                plain_log_ticks(ax.yaxis)
    fig.tight_layout()
    fig.legend(*axes[0][0].get_legend_handles_labels(), title="baseline", loc="center left", bbox_to_anchor=(1.0, 0.5),
               frameon=False, fontsize=8)
    return fig


def plot_batched_requests(df: pd.DataFrame, counts=tuple(BATCH_COUNTS)):
    """Fig. 13: average batched requests per system, one panel per (trace, load), matched-load panels
    first and the paper's rates (``load == "paper"``) after them, one bar per way of counting
    (:data:`paged.experiments.nb03_throughput.throughput.BATCH_COUNTS`); the paper's value, where it
    states one for that trace and rate, is a black diamond."""
    panels = list(df.groupby(["trace", "load", "rate"], sort=False))
    panels.sort(key=lambda panel: panel[0][1] == "paper")  # matched load leads, the paper's rates beside it
    fig, axes = plt.subplots(1, len(panels), figsize=(3.9 * len(panels), 3.2), squeeze=False)
    width = 0.8 / len(counts)
    for ax, ((trace, load, rate), part) in zip(axes[0], panels):
        order = _system_order(part["system"].unique())
        part = part.set_index("system").loc[order]
        x = np.arange(len(order))
        for k, col in enumerate(counts):
            ax.bar(x + (k - (len(counts) - 1) / 2) * width, part[col], width,
                   color=[SYSTEM_COLORS.get(s, "0.4") for s in order], alpha=1.0 - 0.28 * k,
                   label=BATCH_COUNTS[col])
        paper = FIG13_BATCHED_REQUESTS.get(f"{workload(trace)}@{rate:g}", {})
        ys = [paper.get(s, math.nan) for s in order]
        ax.plot(x, ys, "D", color="black", markersize=5, label="paper")
        ax.set_xticks(x, order, rotation=30)
        ax.set_title(f"{trace} @ {rate:.3g} req/s ({load})", fontsize=10)
        ax.set_ylabel("avg. batched requests")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.tight_layout()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(labels), frameon=False)
    return fig


def plot_vs_block_size(df: pd.DataFrame, hue: str = "trace", log_y: bool = True):
    """Normalized latency vs block size (Fig. 18b, 19b), one line per ``hue`` value; open triangles:
    runs stopped early (at their lower bound)."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    any_early = False
    for k, (value, part) in enumerate(df.groupby(hue, sort=False)):
        part = part.sort_values("block_size")
        color = f"C{k}"
        early = part["stopped_early"].fillna(False).astype(bool) if "stopped_early" in part else \
            pd.Series(False, index=part.index)
        ax.plot(part["block_size"], part["normalized_latency"], color=color, label=str(value))
        ax.plot(part["block_size"][~early], part["normalized_latency"][~early], "o", color=color)
        ax.plot(part["block_size"][early], part["normalized_latency"][early], "^", color=color, markerfacecolor="white")
        any_early |= bool(early.any())
    ax.set_xscale("log", base=2)
    plain_log_ticks(ax.xaxis)
    if log_y:
        ax.set_yscale("log")
        plain_log_ticks(ax.yaxis)
    ax.set_xlabel("block size (tokens)")
    ax.set_ylabel("normalized latency (s/token)")
    handles, labels = ax.get_legend_handles_labels()
    if any_early:  # the open markers, explained
        handles.append(Line2D([], [], color="0.3", marker="^", markerfacecolor="white", linestyle="",
                              label="stopped at the latency cap (≥)"))
    ax.legend(handles=handles, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    return fig


def swap_recompute_table(block_sizes, num_tokens: int = 1024, model: str = "opt-13b") -> pd.DataFrame:
    """Fig. 19a from the cost model: time (ms) to swap ``num_tokens`` tokens of KV out, in, out and
    in, or to recompute them (a prefill; flat in block size), per block size."""
    rows = []
    for bs in block_sizes:
        cost = get_cost_model(model, block_size=bs)
        blocks = -(-num_tokens // bs)
        swap = cost.swap_time(blocks) * 1e3
        rows += [{"block_size": bs, "operation": "swap out", "ms": swap},
                 {"block_size": bs, "operation": "swap in", "ms": swap},
                 {"block_size": bs, "operation": "swap in + out", "ms": 2 * swap},
                 {"block_size": bs, "operation": "recompute", "ms": cost.recompute_time(num_tokens) * 1e3}]
    return pd.DataFrame(rows)


def plot_swap_recompute(micro: pd.DataFrame, e2e: pd.DataFrame):
    """Fig. 19: (a) swap/recompute time vs block size; (b) normalized latency, swap vs recompute."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.2))
    for k, (op, part) in enumerate(micro.groupby("operation", sort=False)):
        a.plot(part["block_size"], part["ms"], marker="os^D"[k % 4], linestyle="-" if op != "swap in" else "--",
               label=op)
    a.set(xscale="log", yscale="log", xlabel="block size (tokens)", ylabel="time (ms)", title="(a) microbenchmark")
    a.set_xscale("log", base=2)
    plain_log_ticks(a.xaxis)
    plain_log_ticks(a.yaxis)
    a.legend(frameon=False)
    for k, (mode, part) in enumerate(e2e.groupby("preemption", sort=False)):
        part = part.sort_values("block_size")
        b.plot(part["block_size"], part["normalized_latency"], marker="o", label=mode)
    b.set_xscale("log", base=2)
    b.set_yscale("log")
    plain_log_ticks(b.xaxis)
    plain_log_ticks(b.yaxis)
    b.set(xlabel="block size (tokens)", ylabel="normalized latency (s/token)", title="(b) end to end")
    b.legend(frameon=False)
    fig.tight_layout()
    return fig


def kv_footprint(trace, model: str = "opt-13b", block_size: int = DEFAULT_BLOCK_SIZE) -> pd.DataFrame:
    """KV cache slots (tokens) a running request holds under each system, on ``trace``.

    Averages are over iterations: a request counts once per output token it generates, as it
    would in a running batch (so long outputs weigh more).

    * ``paged``: blocks of ``block_size`` grown on demand; a request holds the slots of the blocks
      its ``prompt + generated`` tokens fill at that iteration.
    * ``orca-*``: the policy's reservation (:func:`paged.contiguous.reservation_size`) rounded up to
      its buddy block, held whole from admission to the end.

    Columns: ``system``, ``mean_slots_held`` (tokens), ``requests_that_fit`` = the server's KV slots
    ÷ ``mean_slots_held``: the batch memory allows on average, before the buddy allocator's
    external fragmentation and regardless of compute.

    Raises:
        ValueError: if ``trace`` is empty, ``block_size`` < 1, or a length is not positive.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be ≥ 1, got {block_size}")
    reqs = list(trace)
    if not reqs:
        raise ValueError("empty trace")
    cost = get_cost_model(model, block_size=block_size)
    slots, max_len = cost.num_kv_slots, cost.model.max_seq_len
    orca = ("orca-oracle", "orca-pow2", "orca-max")
    slot_steps = dict.fromkeys(("paged",) + orca, 0)
    steps = 0
    for r in reqs:
        p, o = int(r.prompt_len), int(r.output_len)
        if p < 1 or o < 1:
            raise ValueError(f"lengths must be ≥ 1, got prompt {p}, output {o}")
        steps += o
        slot_steps["paged"] += int((-(-(p + np.arange(1, o + 1)) // block_size)).sum()) * block_size
        for s in orca:
            slot_steps[s] += o << BuddyAllocator.order_for(reservation_size(s.removeprefix("orca-"), p, o, max_len))
    return pd.DataFrame([{"system": s, "mean_slots_held": total / steps, "requests_that_fit": slots * steps / total}
                         for s, total in slot_steps.items()])


def plot_kv_footprint(footprint: pd.DataFrame):
    """Running requests each system's KV cache holds on average (:func:`kv_footprint`), and above each
    Orca bar the bound memory sets on paged's gain over it (paged's requests ÷ its)."""
    order = _system_order(footprint["system"])
    fit = footprint.set_index("system").loc[order, "requests_that_fit"]
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.bar(range(len(order)), fit, color=[SYSTEM_COLORS.get(s, "0.4") for s in order])
    for k, (system, value) in enumerate(fit.items()):
        if system != "paged" and "paged" in fit:
            ax.annotate(f"≤ {fit['paged'] / value:.2f}×", (k, value), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(order)), order, rotation=20)
    ax.set_ylabel("requests the KV cache holds (mean)")
    fig.tight_layout()
    return fig
