"""Figures of notebook 02 (§6.3, §6.4): plotting only.

The numbers come from :mod:`paged.experiments.nb02_sharing.sharing`; this module draws Fig. 14 (latency vs rate
per decoding setting), Fig. 15 (memory saved by sharing), Fig. 16 (shared prefix) and the prefix
caching demonstration; the table that puts each of the paper's numbers beside ours is
:mod:`paged.experiments.nb02_sharing.comparison`.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, NullFormatter

from paged.experiments.notebook.paper import FIG15_SHARING_SAVED_PERCENT
from paged.experiments.notebook.plotting import SYSTEM_COLORS, integer_ticks
from paged.experiments.serving import LATENCY_THRESHOLD

__all__ = ["plot_fig14", "plot_fig15", "plot_fig16", "plot_prefix_caching"]

_LABELS = {"parallel": "parallel sampling, n = {}", "beam": "beam search, width {}", "basic": "one sample"}


def _stopped_early(rows: pd.DataFrame):
    """Per row, whether its run stopped at a latency cap (its latency is then a lower bound)."""
    if "stopped_early" not in rows:
        return pd.Series(False, index=rows.index)
    return rows["stopped_early"].astype("boolean").fillna(False).astype(bool)


#: Line style and marker of a system whose curve may lie on another's (Fig. 16: prefix caching on the
#: reserved prefix): dashed, with larger open square markers, drawn on top, so both stay visible.
_OVERLAID = {"paged (prefix caching)": {"linestyle": "--", "marker": "s", "size": 8.0, "face": "none"}}


def _latency_axes(ax, part: pd.DataFrame, systems, color_of, title: str) -> None:
    """One panel: each system's latency curve, filled markers where the run finished and open
    triangles at the lower bound of runs stopped at the curves' latency cap."""
    for system in systems:
        rows = part[part["system"] == system].sort_values("rate")
        early = _stopped_early(rows)
        color = color_of(system)
        style = _OVERLAID.get(system, {"linestyle": "-", "marker": "o", "size": 6.0, "face": color})
        z = 3 if system in _OVERLAID else 2
        ax.plot(rows["rate"], rows["normalized_latency"], color=color, label=system, linestyle=style["linestyle"], zorder=z)
        ax.plot(rows["rate"][~early], rows["normalized_latency"][~early], style["marker"], color=color,
                markersize=style["size"], markerfacecolor=style["face"], markeredgewidth=1.5, zorder=z)
        ax.plot(rows["rate"][early], rows["normalized_latency"][early], "^", color=color, markerfacecolor="white", zorder=z)
    ax.axhline(LATENCY_THRESHOLD, color="0.35", linestyle="--", linewidth=1)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())  # log minor ticks would print as 3×10⁻¹ beside 0.1
    ax.set_xlim(left=0)
    ax.set_title(title)
    ax.set_xlabel("request rate (req/s)")
    ax.set_ylabel("normalized latency (s/token)")


def _legend(fig, systems, color_of, early: bool = False) -> None:
    handles = [Line2D([], [], color=color_of(s), marker=_OVERLAID.get(s, {}).get("marker", "o"),
                      markerfacecolor=_OVERLAID.get(s, {}).get("face", color_of(s)),
                      linestyle=_OVERLAID.get(s, {}).get("linestyle", "-"), label=s) for s in systems]
    handles.append(Line2D([], [], color="0.35", linestyle="--", label=f"{LATENCY_THRESHOLD:g} s/token (sustained)"))
    if early:  # only when the figure has such markers
        handles.append(Line2D([], [], color="0.3", marker="^", markerfacecolor="white", linestyle="",
                              label="stopped at the cap (≥)"))
    fig.tight_layout()
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)


def plot_fig14(sweep: pd.DataFrame, gains: pd.DataFrame):
    """Fig. 14: one panel per (decoding, width) of :func:`paged.experiments.nb02_sharing.sharing.latency_sweep` rows
    (parallel sampling on the top row, beam search below), each titled with paged ÷ Orca (Oracle)'s
    sustained rate from :func:`paged.experiments.nb02_sharing.sharing.improvement_over_oracle`. Log y-axis;
    open triangles are runs stopped at the curves' latency cap, drawn at their lower bound."""
    panels = [(d, w) for d, w in dict.fromkeys(zip(sweep["decoding"], sweep["width"])) if d != "basic"]
    cols = max(1, max((sum(1 for d, _ in panels if d == kind) for kind in ("parallel", "beam")), default=1))
    kinds = [k for k in ("parallel", "beam") if any(d == k for d, _ in panels)] or ["basic"]
    fig, axes = plt.subplots(len(kinds), cols, figsize=(3.8 * cols, 3.1 * len(kinds)), squeeze=False)
    systems = list(dict.fromkeys(sweep["system"]))
    gain = gains.set_index(["decoding", "width"])["improvement"]
    for r, kind in enumerate(kinds):
        mine = [(d, w) for d, w in panels if d == kind] or [(d, w) for d, w in dict.fromkeys(zip(sweep["decoding"],
                                                                                               sweep["width"]))]
        for c in range(cols):
            ax = axes[r][c]
            if c >= len(mine):
                ax.set_visible(False)
                continue
            d, w = mine[c]
            part = sweep[(sweep["decoding"] == d) & (sweep["width"] == w)]
            title = _LABELS[d].format(w) + (f"\npaged / Oracle: {gain[d, w]:.2f}x" if (d, w) in gain.index else "")
            _latency_axes(ax, part, systems, lambda s: SYSTEM_COLORS.get(s, "0.3"), title)
    _legend(fig, systems, lambda s: SYSTEM_COLORS.get(s, "0.3"), bool(_stopped_early(sweep).any()))
    return fig


def plot_fig15(saving: pd.DataFrame, engine: pd.DataFrame | None = None):
    """Fig. 15: KV blocks saved by sharing (%) vs width, one panel per decoding, a line per trace
    (:func:`paged.experiments.nb02_sharing.sharing.memory_saving` rows), the paper's Alpaca bars, and the real
    engine's cross-check as open markers (:func:`paged.experiments.nb02_sharing.sharing.engine_memory_saving`)."""
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.2), squeeze=False)
    for ax, (decoding, key) in zip(axes[0], (("parallel", "parallel"), ("beam", "beam"))):
        paper = FIG15_SHARING_SAVED_PERCENT[key]
        ax.bar(list(map(str, paper)), list(paper.values()), color="0.85", label="paper, Alpaca")
        for trace, part in saving[saving["decoding"] == decoding].groupby("trace", sort=False):
            ax.plot(part["width"].astype(str), part["saving_percent"], marker="o", label=f"simulated, {trace}")
        if engine is not None and len(engine):
            for trace, part in engine[engine["decoding"] == decoding].groupby("trace", sort=False):
                ax.plot(part["width"].astype(str), part["saving_percent"], marker="s", fillstyle="none",
                        linestyle=":", label=f"real engine, {trace} lengths")
        ax.set_title("parallel sampling (n)" if decoding == "parallel" else "beam search (width)")
        ax.set_xlabel("n" if decoding == "parallel" else "beam width")
        ax.set_ylabel("KV blocks saved by sharing (%)")
        ax.set_ylim(0, 100)
    fig.tight_layout()
    fig.legend(*axes[0][1].get_legend_handles_labels(), loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8,
               frameon=False)  # beside the panels: beam search's lines reach the top of their panel
    return fig


def plot_fig16(sweep: pd.DataFrame, rates: pd.DataFrame):
    """Fig. 16: latency vs rate, one panel per prefix (``shot`` column of the sweep), titled with each
    paged variant's sustained rate ÷ Orca (Oracle)'s (:func:`paged.experiments.nb02_sharing.sharing.shared_prefix_rates`)."""
    shots = list(dict.fromkeys(sweep["shot"]))
    fig, axes = plt.subplots(1, len(shots), figsize=(4.6 * len(shots), 3.8), squeeze=False)
    systems = list(dict.fromkeys(sweep["system"]))
    palette = {"paged (reserved prefix)": SYSTEM_COLORS["paged"], "paged (prefix caching)": "#5aae61",
               "orca-oracle": SYSTEM_COLORS["orca-oracle"]}
    ratio = rates.set_index(["shot", "system"])["over_oracle"]
    for ax, shot in zip(axes[0], shots):
        gains = "\n".join(f"{s.split('(')[-1].rstrip(')')} ÷ Oracle: {ratio[shot, s]:.2f}×" for s in systems
                           if s != "orca-oracle" and (shot, s) in ratio.index)  # one line each: no overlap
        _latency_axes(ax, sweep[sweep["shot"] == shot], systems, lambda s: palette.get(s, "0.3"),
                      f"WMT16 {shot}\n{gains}")
    _legend(fig, systems, lambda s: palette.get(s, "0.3"), bool(_stopped_early(sweep).any()))
    return fig


def plot_prefix_caching(demo: pd.DataFrame):
    """The prefix-caching demo: wall and prefill time of each run, caching off and on, per round."""
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.0))
    for ax, column, label in ((axes[0], "seconds", "wall time (s)"), (axes[1], "prefill_seconds", "prefill time (s)")):
        for caching, part in demo.groupby("caching"):
            ax.plot(part["round"], part[column], marker="o", label="caching on" if caching else "caching off")
        ax.set_xlabel("round")
        integer_ticks(ax.xaxis)
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
    axes[0].legend(frameon=False)
    fig.tight_layout()
    return fig
