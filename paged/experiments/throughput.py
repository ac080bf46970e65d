"""Figures and paper comparisons of notebook 03 (§6.2, §6.5, §7.2, §7.3): plotting only.

The numbers come from :mod:`paged.experiments.serving`; this module turns its tables into the paper's
figures (Fig. 12, 13, 17, 18b, 19), the tables saved beside them (:func:`figure_data`, without
wall-clock columns, so a rerun rewrites them byte for byte), the "paper vs this run" table and the
per-request KV footprint of each system on a trace (:func:`kv_footprint`).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from paged.contiguous import BuddyAllocator, reservation_size
from paged.sim.cost_model import get_cost_model
from paged.experiments.plotting import SYSTEM_COLORS
from paged.experiments.serving import LATENCY_THRESHOLD, SYSTEMS, WALL_TIME_COLUMNS

__all__ = ["figure_data", "plot_latency_vs_rate", "plot_batched_requests", "plot_vs_block_size",
           "swap_recompute_table", "plot_swap_recompute", "kv_footprint", "paper_comparison"]


def figure_data(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` without the wall-clock columns (:data:`paged.experiments.serving.WALL_TIME_COLUMNS`): the table to
    save beside a figure, identical on every rerun with the same parameters. ``df`` is not changed."""
    return df.drop(columns=[c for c in WALL_TIME_COLUMNS if c in df.columns])


def _system_order(systems) -> list[str]:
    """Systems in :data:`paged.experiments.serving.SYSTEMS` order, unknown names last (sorted)."""
    present = set(systems)
    return [s for s in SYSTEMS if s in present] + sorted(present - set(SYSTEMS))


def plot_latency_vs_rate(df: pd.DataFrame, *, log_y: bool = True, ylim: tuple[float, float] | None = None,
                         threshold: float | None = LATENCY_THRESHOLD):
    """Normalized latency (s/token) vs request rate (req/s), one panel per (model, trace) (Fig. 12/17).

    The paper plots a linear axis cut at 1 s/token; here the y-axis is logarithmic by default so
    that every system stays visible, including those (FasterTransformer, Orca (Max)) whose
    latency is already seconds per token at the lowest rates. One figure-level legend sits to the
    right of the panels, so it covers no curve.

    Args:
        df: rows of :func:`paged.experiments.serving.sweep` (columns ``model``, ``trace``, ``system``, ``rate``,
            ``normalized_latency``).
        log_y: logarithmic y-axis (else linear from 0).
        ylim: y-axis limits (s/token); None fits the data.
        threshold: draw the sustained-rate threshold (s/token) as a dashed line; None draws none.

    Returns:
        The matplotlib Figure.

    Raises:
        ValueError: if ``df`` is empty.
    """
    if len(df) == 0:
        raise ValueError("no rows to plot")
    panels = list(df.groupby(["model", "trace"], sort=False))
    order = _system_order(df["system"].unique())
    palette = {s: SYSTEM_COLORS.get(s, "0.3") for s in order}
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.2), squeeze=False)
    for ax, ((model, trace), part) in zip(axes[0], panels):
        sns.lineplot(data=part, x="rate", y="normalized_latency", hue="system", hue_order=order, marker="o",
                     ax=ax, palette=palette, legend=False)
        if threshold is not None:
            ax.axhline(threshold, color="0.35", linestyle="--", linewidth=1)
        if log_y:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        else:
            ax.set_ylim(bottom=0)
        if ylim is not None:
            ax.set_ylim(*ylim)
        ax.set_xlim(left=0)
        ax.set_title(f"{model}, {trace}")
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel("normalized latency (s/token)")
    handles = [Line2D([], [], color=palette[s], marker="o", label=s) for s in order]
    if threshold is not None:
        handles.append(Line2D([], [], color="0.35", linestyle="--", label=f"{threshold:g} s/token (sustained)"))
    fig.tight_layout()
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
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


def kv_footprint(trace, model: str = "opt-13b", block_size: int = 16) -> pd.DataFrame:
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

    Args:
        trace: requests with ``prompt_len`` and ``output_len`` (tokens).
        model: a Table 1 preset of :func:`paged.sim.cost_model.get_cost_model`.
        block_size: paged block size (tokens).

    Returns:
        One row per system: paged, Orca (Oracle), Orca (Pow2), Orca (Max) (FasterTransformer
        reserves like Orca (Max)).

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


def _ratio_text(rates: pd.DataFrame, system: str) -> str:
    """``paged ÷ system`` of sustained rates, with both rates; ≥/≤ where a search hit its upper end."""
    r = rates.set_index("system")
    num, den = r.loc["paged", "sustained_rate"], r.loc[system, "sustained_rate"]
    if den <= 0 or math.isnan(den):
        return f"n/a (paged {num:.2f} req/s, {system} {den:.2f} req/s)"
    mark = {(True, False): "≥ ", (False, True): "≤ "}.get((bool(r.loc["paged", "censored_at_max"]),
                                                         bool(r.loc[system, "censored_at_max"])), "")
    return f"{mark}{num / den:.2f}× ({num:.2f} vs {den:.2f} req/s)"


def paper_comparison(sustained: pd.DataFrame, batched: pd.DataFrame,
                     chat_sustained: pd.DataFrame | None = None) -> pd.DataFrame:
    """The paper's OPT-13B claims beside this run: sustained-rate ratios on ShareGPT (§6.2), the
    Fig. 13 batch sizes and, if ``chat_sustained`` is given, the chatbot ratios (§6.5, Fig. 17).

    Args:
        sustained: :func:`paged.experiments.serving.sustained_rate` rows on ShareGPT.
        batched: :func:`paged.experiments.serving.sweep` rows at the Fig. 13 points.
        chat_sustained: :func:`paged.experiments.serving.sustained_rate` rows on ``sharegpt-chat``, or None.

    Returns:
        Columns ``claim``, ``paper``, ``this run`` (text). A ratio is marked ``≥``/``≤`` when a
        sustained-rate search stopped at its upper end (censored).
    """
    from paged.experiments.paper import FIG12_SUSTAINED_RATIOS as paper_ratio
    from paged.experiments.paper import FIG13_BATCHED_REQUESTS, FIG17_CHATBOT_RATIO

    systems = set(sustained["system"])
    rows = [{"claim": f"sustained rate paged ÷ {s}", "paper": paper_ratio[s],
             "this run": _ratio_text(sustained, s)} for s in paper_ratio if s in systems and "paged" in systems]
    for (trace, r), part in batched.groupby(["trace", "rate"], sort=False):
        key = f"{trace}@{r:g}"
        paper = FIG13_BATCHED_REQUESTS.get(key, {})
        for _, row in part.iterrows():
            rows.append({"claim": f"avg batched requests, {key}, {row['system']}",
                         "paper": f"{paper[row['system']]:.2f}" if row["system"] in paper else "not stated",
                         "this run": f"{row['avg_batched_requests']:.2f}"})
    if chat_sustained is not None and "paged" in set(chat_sustained["system"]):
        for s in ("orca-max", "orca-pow2", "orca-oracle"):
            if s in set(chat_sustained["system"]):
                rows.append({"claim": f"chatbot sustained rate paged ÷ {s} (Fig. 17)", "paper": f"{FIG17_CHATBOT_RATIO:g}×",
                             "this run": _ratio_text(chat_sustained, s)})
    return pd.DataFrame(rows)
