"""The paper's workloads side by side: Fig. 11's length distributions and means (§6.1), the WMT16
translation traces with their shared prefixes (§6.4), and how a Fig. 2 breakdown moves with the
tokenizer or the trace (notebook 01).

Every number comes from the committed traces (:func:`paged.workloads.get_trace`); the paper's
are in :mod:`paged.experiments.notebook.paper`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from paged.experiments.notebook.paper import FIG11_MEAN_LENS, FIG16_SHARED_PREFIX
from paged.workloads import get_trace

__all__ = ["FIG11_TRACES", "MEANS_TRACES", "length_histograms", "means_table", "plot_length_distributions",
           "breakdown_by_variant"]

#: The panels of our Fig. 11 (the paper's two, then the translation workload).
FIG11_TRACES = ("sharegpt", "alpaca", "wmt16-1shot", "wmt16-5shot")
#: Rows of :func:`means_table`.
MEANS_TRACES = ("sharegpt", "alpaca", "alpaca-bare", "wmt16-1shot", "wmt16-5shot")
_PAPER_PREFIX = {"wmt16-1shot": FIG16_SHARED_PREFIX["1-shot"]["prefix_tokens"],
                 "wmt16-5shot": FIG16_SHARED_PREFIX["5-shot"]["prefix_tokens"]}


def means_table(tokenizers=("gpt2", "cl100k"), traces=MEANS_TRACES) -> pd.DataFrame:
    """One row per (trace, tokenizer): requests, mean prompt / output tokens, the shared prefix
    (tokens, 0 if none) and the paper's numbers beside them (Fig. 11 means with OPT's tokenizer,
    §6.4 prefix lengths with LLaMA's; NaN where the paper gives none). Cost: reads the CSVs (~0.1 s)."""
    rows = []
    for name in traces:
        paper_prompt, paper_output = FIG11_MEAN_LENS.get(name.split("-")[0] if name.startswith("alpaca") else name,
                                                         (np.nan, np.nan))
        for tok in tokenizers:
            trace = get_trace(name, tokenizer=tok)
            rows.append({"trace": name, "tokenizer": tok, "requests": len(trace),
                         "mean_prompt": round(trace.mean_prompt_len, 2), "paper_prompt": paper_prompt,
                         "mean_output": round(trace.mean_output_len, 2), "paper_output": paper_output,
                         "prefix_len": trace[0].prefix_len, "paper_prefix_len": _PAPER_PREFIX.get(name, np.nan)})
    return pd.DataFrame(rows)


def length_histograms(tokenizer: str = "gpt2", traces=FIG11_TRACES, bins: int = 40) -> pd.DataFrame:
    """The bars of :func:`plot_length_distributions`: one row per (trace, length kind, bin) with
    ``bin_left``/``bin_right`` (tokens), ``count``, ``density`` (per token, over ALL the trace's
    requests), the kind's ``mean`` and the trace's shared ``prefix_len``. Per trace, both kinds
    share equal-width bins from 0 to the larger 99th percentile of the two (the paper's axes
    also stop before the longest requests); the longer 1% or less is left out of the bars, not
    of the means."""
    rows = []
    for name in traces:
        frame = get_trace(name, tokenizer=tokenizer).to_frame()
        top = max(float(np.percentile(frame[f"{k}_len"], 99)) for k in ("prompt", "output"))
        edges = np.linspace(0, top, bins + 1)
        for kind in ("prompt", "output"):
            values = frame[f"{kind}_len"].to_numpy()
            counts, _ = np.histogram(values, bins=edges)
            density = counts / (len(values) * np.diff(edges))
            rows += [{"trace": name, "tokenizer": tokenizer, "length": kind, "bin_left": lo, "bin_right": hi,
                      "count": int(c), "density": d, "mean": float(values.mean()),
                      "prefix_len": int(frame["prefix_len"].iloc[0])}
                     for lo, hi, c, d in zip(edges[:-1], edges[1:], counts, density)]
    return pd.DataFrame(rows)


def plot_length_distributions(bars: pd.DataFrame):
    """Fig. 11: per trace, the density of prompt and output lengths (tokens) with each mean as a
    dashed line and its value, the paper's means beside ours where it gives them, and a shared
    prefix as a dotted line. ``bars`` is :func:`length_histograms`' table. Returns the Figure."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    names = list(dict.fromkeys(bars["trace"]))
    colors = dict(zip(("prompt", "output"), sns.color_palette("colorblind", 2)))
    fig, axes = plt.subplots(1, len(names), figsize=(3.4 * len(names), 3.0))
    for ax, name in zip(np.atleast_1d(axes), names):
        paper = FIG11_MEAN_LENS.get(name)
        for k, kind in enumerate(("prompt", "output")):
            part = bars[(bars["trace"] == name) & (bars["length"] == kind)]
            ax.bar(part["bin_left"], part["density"], width=part["bin_right"] - part["bin_left"], align="edge",
                   alpha=0.55, color=colors[kind], label=kind)
            mean = float(part["mean"].iloc[0])
            ax.axvline(mean, color=colors[kind], ls="--", lw=1.2)
            note = f"mean {mean:.1f}" + (f" (paper {paper[k]:.1f})" if paper else "")
            ax.text(0.97, 0.92 - 0.09 * k, note, transform=ax.transAxes, ha="right", fontsize=7.5, color=colors[kind],
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
        prefix = int(bars.loc[bars["trace"] == name, "prefix_len"].iloc[0])
        if prefix:
            ax.axvline(prefix, color="0.3", ls=":", lw=1.2)
            ax.text(0.97, 0.74, f"shared prefix {prefix}", transform=ax.transAxes, ha="right", fontsize=7.5,
                    color="0.3", bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
        ax.set_title(f"{name} ({bars['tokenizer'].iloc[0]})", fontsize=9)
        ax.set_xlabel("length (tokens)")
    np.atleast_1d(axes)[0].set_ylabel("density")
    np.atleast_1d(axes)[0].legend(fontsize=8, loc="center right", frameon=False)
    fig.tight_layout()
    return fig


def breakdown_by_variant(variants: dict, **kwargs) -> pd.DataFrame:
    """Fig. 2's token-state share (%) and average batched requests per system for each variant
    (label -> :class:`~paged.workloads.Trace`), side by side: how the breakdown moves when the
    tokenizer or the trace changes. ``kwargs`` go to
    :func:`paged.experiments.nb01_fragmentation.fragmentation.memory_waste_table`."""
    from paged.experiments.nb01_fragmentation.fragmentation import memory_waste_table

    rows = []
    for label, trace in variants.items():
        table = memory_waste_table(trace, **kwargs)
        rows += [{"variant": label, "system": r["system"], "token_states_percent": round(100 * r["token_states"], 1),
                  "avg_batched_requests": round(r["avg_batched_requests"], 2)} for _, r in table.iterrows()]
    return pd.DataFrame(rows).pivot(index="system", columns="variant",
                                    values=["token_states_percent", "avg_batched_requests"]).reindex(
        list(dict.fromkeys(r["system"] for r in rows)))
