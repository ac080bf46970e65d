"""Notebook 06: does paging still pay on today's models and GPUs? (beyond the paper)

The paper measured multi-head-attention OPT models on A100s with 2K-token contexts. This driver asks
the same question of grouped-query (GQA) and multi-query (MQA) models from their Hugging Face configs
(:mod:`paged.sim.model_config`), on H100 / H200 / L4 as well as A100 (:mod:`paged.sim.gpu_spec`), with
the same scheduler, KV cache managers and cost model as notebooks 01–03:

* :func:`kv_table`: KV bytes per token and per 2K-token request of each model (§3's arithmetic);
* :func:`memory_breakdown`: Fig. 2's breakdown of KV memory for a GQA model on a server;
* :func:`gain_table`: paged ÷ Orca (Oracle, Max) sustained rates for model × server pairs
  (:func:`paged.experiments.serving.sustained_rate`), with what bounds each system there: the batch
  each reaches at its sustained rate, the batch at which a decode step turns compute bound on that
  GPU (:func:`compute_bound_batch`) and how many max-length sequences the KV cache holds;
* :func:`verdicts`: the generated table saying where paging's gain grows, shrinks or vanishes against
  the paper's setup (OPT-13B on one A100-40GB), and the measured reason.

Deployments are named ``<model>@<tp>x<gpu>:<max_seq_len>`` (:mod:`paged.sim.deployment`), which every
function of :mod:`paged.experiments.serving` accepts as a model name.
"""

from __future__ import annotations

import inspect
import math

import pandas as pd

from paged.experiments.nb01_fragmentation.fragmentation import memory_waste_table
from paged.experiments.serving.run_length import long_trace
from paged.experiments.serving import sustained_rate
from paged.sim.cost_model import get_cost_model
from paged.sim.deployment import get_model_spec
from paged.sim.simulator import simulate
from paged.workloads import get_trace

__all__ = ["MODELS", "PAIRS", "LONG_PAIRS", "REFERENCE", "kv_table", "memory_breakdown", "compute_bound_batch",
           "gain_table", "verdicts", "plot_kv_bytes", "plot_gains"]

#: Models of the KV table: the paper's three OPT sizes and the shipped configs.
MODELS = ("opt-13b", "opt-66b", "opt-175b", "llama-3.1-8b", "mistral-7b-v0.3", "qwen2.5-7b", "gemma-2b",
          "llama-3.1-70b", "qwen2.5-72b")
#: The paper's setup, the reference of every verdict: OPT-13B on its Table 1 server.
REFERENCE = "opt-13b"
#: Model × server pairs of the ShareGPT comparison (2,048-token contexts, as the paper's).
PAIRS = (REFERENCE, "opt-13b@1xh100-sxm:2048", "llama-3.1-8b@1xa100-40gb:2048", "llama-3.1-8b@1xh100-sxm:2048",
         "llama-3.1-8b@1xh200:2048", "llama-3.1-8b@1xl4:2048", "gemma-2b@1xl4:2048", "llama-3.1-70b@4xh100-sxm:2048")
#: Long-context pairs: (deployment, trace) with the sessions trace of that context.
LONG_PAIRS = (("llama-3.1-8b@1xh100-sxm:8192", "sharegpt-8k"), ("llama-3.1-8b@1xh100-sxm:32768", "sharegpt-32k"))


def _attention(spec) -> str:
    return "MHA" if spec.num_kv_heads == spec.num_heads else "MQA" if spec.num_kv_heads == 1 else "GQA"


def kv_table(models=MODELS, request_tokens: int = 2048) -> pd.DataFrame:
    """One row per model: attention kind, heads, KV bytes per token and per ``request_tokens``-token
    request, weights, decode attention's arithmetic intensity.

    Raises:
        ValueError: for an unknown model (:func:`paged.sim.deployment.get_model_spec`).
    """
    rows = []
    for name in models:
        m = get_model_spec(name)
        rows.append({"model": name, "attention": _attention(m), "layers": m.num_layers, "query_heads": m.num_heads,
                     "kv_heads": m.num_kv_heads, "head_size": m.head_size, "kv_bytes_per_token": m.kv_bytes_per_token,
                     "kv_kib_per_token": m.kv_bytes_per_token / 1024,
                     f"kv_mib_per_{request_tokens}_tokens": m.kv_bytes_per_token * request_tokens / 2**20,
                     "params_billion": m.num_params / 1e9, "weights_gib": m.weight_bytes / 2**30,
                     "decode_attention_flops_per_byte": m.decode_attention_flops_per_byte})
    return pd.DataFrame(rows)


def memory_breakdown(deployment: str, trace: str = "sharegpt", num_requests: int = 1000, *, seed: int = 0,
                     block_size: int = 16, tokenizer: str = "cl100k") -> pd.DataFrame:
    """Fig. 2's KV memory breakdown per system (:func:`paged.experiments.nb01_fragmentation.fragmentation.memory_waste_table`)
    with the KV capacity and maximum length of ``deployment``; every request waits from the start."""
    cost = get_cost_model(deployment, block_size=block_size)
    requests = get_trace(trace, num_requests, seed=seed, tokenizer=tokenizer)
    table = memory_waste_table(requests, num_slots=cost.num_kv_slots, block_size=block_size,
                               max_seq_len=cost.model.max_seq_len)
    table.insert(0, "deployment", deployment)
    table.insert(1, "kv_slots", cost.num_kv_slots)
    return table


def compute_bound_batch(deployment: str, slowdown: float = 1.05, limit: int = 4096) -> int:
    """The smallest decode batch (sequences) whose step, without attention and host costs, is
    ``slowdown`` × the step of one sequence: below it a decode step is bound by reading the weights,
    above it by the linear layers' FLOPs (the GPU's roofline with the cost model's efficiencies);
    ``limit`` if not reached. O(log limit) cost-model calls."""
    cost = get_cost_model(deployment, cpu_scale=0.0)
    floor = cost.decode_time(1, 0)
    lo, hi = 1, limit
    if cost.decode_time(hi, 0) <= slowdown * floor:
        return limit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if cost.decode_time(mid, 0) <= slowdown * floor else (lo, mid)
    return hi


#: The scheduler's cap on running sequences in every simulated run (vLLM's ``max_num_seqs`` default).
MAX_NUM_SEQS = inspect.signature(simulate).parameters["max_num_seqs"].default


def _prefill_share(points: pd.DataFrame, model: str, trace: str, count: int, seed: int, tokenizer: str) -> float:
    """Share of paged's saturated run spent in prompt prefills: the cost model's prefill time of each
    of its requests' prompts, one at a time (an upper bound on their batched time only by the
    per-iteration costs), over the run's simulated duration."""
    rows = points[(points["model"] == model) & (points["system"] == "paged") & (points["rate"] == math.inf)]
    if not len(rows):
        return math.nan
    cost = get_cost_model(model)
    requests = long_trace(trace, math.inf, count, seed, tokenizer=tokenizer)
    return sum(cost.prefill_time([r.prompt_len]) for r in requests) / float(rows.iloc[0]["duration"])


def _convergence(points: pd.DataFrame, model: str) -> dict:
    """Runs at finite rates of ``model`` (all systems) that ran to the end, and how many of them had
    converged (:func:`paged.experiments.serving.simulate_point`)."""
    rows = points[(points["model"] == model) & points["rate"].apply(math.isfinite) & ~points["stopped_early"].astype(bool)]
    return {"runs": len(rows), "runs_converged": int(rows["converged"].astype(bool).sum())}


def _batch_at(points: pd.DataFrame, model: str, system: str, rate: float) -> float:
    """Mean batched requests of the simulated run of ``system`` closest at or below ``rate``
    (``inf``: the saturated-throughput run)."""
    rows = points[(points["model"] == model) & (points["system"] == system)]
    rows = rows[rows["rate"] == rate] if math.isinf(rate) else \
        rows[(rows["rate"] <= rate * (1 + 1e-9)) & rows["rate"].apply(math.isfinite)]
    if not len(rows):
        return math.nan
    return float(rows.sort_values("rate").iloc[-1]["avg_batched_requests"])


def gain_table(pairs=PAIRS, trace: str = "sharegpt", *, threshold: float = 0.2, min_duration: float = 120.0,
               saturated_requests: int = 2000, rel_tol: float = 0.05, tokenizer: str = "cl100k", seed: int = 0,
               workers: int = 2) -> pd.DataFrame:
    """Sustained rates of paged, Orca (Oracle) and Orca (Max) at ``threshold`` s/token for each
    deployment in ``pairs`` on ``trace``, their ratios, and what bounds each system.

    Args:
        min_duration: seconds of arrivals per rate evaluated (the paper: 3,600; doubled while the
            latency has not converged, :func:`paged.experiments.serving.simulate_point`).
        saturated_requests: requests of each saturated-throughput run.

    Returns:
        One row per deployment: ``paged_rps``, ``oracle_rps``, ``max_rps`` (req/s), ``paged_over_oracle``,
        ``paged_over_max``, the mean batch of each system at its sustained rate (``*_batch``) and in its
        saturated-throughput run (``*_saturated_batch``: all requests waiting, the most it batches),
        the scheduler's cap ``max_num_seqs``, ``prefill_share`` (paged's saturated run: prompt prefill
        time ÷ run time), ``runs`` / ``runs_converged`` (finite-rate runs that ran to the end, and those
        whose latency had converged), ``compute_bound_batch`` (:func:`compute_bound_batch`), ``kv_slots`` and ``max_len_sequences``
        (KV slots ÷ max sequence length: Orca (Max)'s batch limit), ``trace``, ``min_duration``.
    """
    pairs = list(pairs)
    table, points = sustained_rate(["paged", "orca-oracle", "orca-max"], model=pairs, trace=trace,
                                   thresholds=(threshold,), min_duration=min_duration, rel_tol=rel_tol, seed=seed,
                                   saturated_requests=saturated_requests, tokenizer=tokenizer, workers=workers,
                                   return_points=True)
    rows = []
    for name in pairs:
        cost = get_cost_model(name)
        key = cost.model.name
        rate = {s: float(table[(table["model"] == key) & (table["system"] == s)]["sustained_rate"].iloc[0])
                for s in ("paged", "orca-oracle", "orca-max")}
        rows.append({"deployment": name, "server": cost.server.name, "trace": trace, "min_duration": min_duration,
                     "paged_rps": rate["paged"], "oracle_rps": rate["orca-oracle"], "max_rps": rate["orca-max"],
                     "paged_over_oracle": rate["paged"] / rate["orca-oracle"] if rate["orca-oracle"] else math.inf,
                     "paged_over_max": rate["paged"] / rate["orca-max"] if rate["orca-max"] else math.inf,
                     **{f"{s.removeprefix('orca-')}_batch": _batch_at(points, key, s, rate[s]) for s in rate},
                     **{f"{s.removeprefix('orca-')}_saturated_batch": _batch_at(points, key, s, math.inf) for s in rate},
                     "compute_bound_batch": compute_bound_batch(name), "max_num_seqs": MAX_NUM_SEQS,
                     "kv_slots": cost.num_kv_slots,
                     "max_len_sequences": cost.num_kv_slots // cost.model.max_seq_len,
                     "kv_bytes_per_token": cost.model.kv_bytes_per_token,
                     "prefill_share": _prefill_share(points, key, trace, saturated_requests, seed, tokenizer),
                     **_convergence(points, key)})
    return pd.DataFrame(rows)


def _reason(row, baseline: str) -> str:
    """What bounds the baseline's batch, from the saturated runs (every request waiting)."""
    name = "Orca (Max)" if baseline == "max" else "Orca (Oracle)"
    b, p = row[f"{baseline}_saturated_batch"], row["paged_saturated_batch"]
    ridge, share = row["compute_bound_batch"], row["prefill_share"]
    if b >= 0.9 * p:
        why = (f"not memory: {name} batches as many sequences as paged ({b:.0f} vs {p:.0f}; the scheduler runs "
               f"at most {row['max_num_seqs']})")
    elif share >= 0.5:
        why = (f"compute (prefill): prompt prefills take {share:.0%} of the GPU time, so paged's larger batch "
               f"({p:.0f} vs {b:.0f}) shortens little")
    elif b >= ridge:
        why = (f"compute (decode): {name}'s {b:.0f} sequences are past the {ridge} at which a decode step turns "
               f"compute bound; paged runs {p:.0f}")
    else:
        held = f", {row['max_len_sequences']:,} max-length reservations fit" if baseline == "max" else ""
        why = f"memory: the KV cache holds {name} to {b:.0f} sequences{held}; paged runs {p:.0f}"
    return why


def verdicts(gains: pd.DataFrame, reference: pd.Series | None = None, tolerance: float = 0.05) -> pd.DataFrame:
    """Where paging's gain grows, shrinks or vanishes, per deployment and baseline.

    A gain *vanishes* when the ratio is within ``tolerance`` of 1 or below, else it *grows* or
    *shrinks* against ``reference``'s ratio (default: the row of :data:`REFERENCE` in ``gains``) by
    more than ``tolerance`` (relative), else it is *about the same*. The reason states the batches
    measured in the saturated runs against the scheduler's cap and the compute-bound batch of that
    server (:func:`compute_bound_batch`).

    Raises:
        ValueError: when ``reference`` is None and ``gains`` has no :data:`REFERENCE` row.
    """
    if reference is None:
        rows = gains[gains["deployment"] == REFERENCE]
        if not len(rows):
            raise ValueError(f"gains has no {REFERENCE!r} row to compare with; pass reference=")
        reference = rows.iloc[0]
    out = []
    for _, row in gains.iterrows():
        for baseline, column in (("oracle", "paged_over_oracle"), ("max", "paged_over_max")):
            ratio, ref = row[column], reference[column]
            if ratio <= 1 + tolerance:
                verdict = "vanishes"
            elif ratio > ref * (1 + tolerance):
                verdict = "grows"
            elif ratio < ref * (1 - tolerance):
                verdict = "shrinks"
            else:
                verdict = "about the same"
            out.append({"deployment": row["deployment"], "trace": row["trace"],
                        "baseline": "Orca (Oracle)" if baseline == "oracle" else "Orca (Max)",
                        "paged ÷ Orca": round(float(ratio), 2), "paper setup (this run)": round(float(ref), 2),
                        "gain": verdict if row["deployment"] != reference["deployment"] or row["trace"] != reference["trace"]
                        else "reference", "measured reason": _reason(row, baseline)})
    return pd.DataFrame(out)


def plot_kv_bytes(table: pd.DataFrame):
    """Bars of KV KiB per token per model, coloured by attention kind. Returns the Figure."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    colors = dict(zip(("MHA", "GQA", "MQA"), sns.color_palette("colorblind", 3)))
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    ax.bar(table["model"], table["kv_kib_per_token"], color=[colors[a] for a in table["attention"]])
    for x, (v, a) in enumerate(zip(table["kv_kib_per_token"], table["attention"])):
        ax.text(x, v, f"{v:.0f}\n{a}", ha="center", va="bottom", fontsize=7)
    ax.set_ylabel("KV cache per token (KiB)")
    ax.tick_params(axis="x", rotation=35, labelsize=8)
    ax.set_ylim(0, table["kv_kib_per_token"].max() * 1.25)
    fig.tight_layout()
    return fig


def plot_gains(gains: pd.DataFrame):
    """Grouped bars of paged ÷ Orca (Oracle) and ÷ Orca (Max) per deployment and trace. Returns the Figure."""
    import matplotlib.pyplot as plt
    import numpy as np
    import seaborn as sns

    labels = [f"{d}\n{t}" for d, t in zip(gains["deployment"], gains["trace"])]
    x = np.arange(len(labels))
    c = sns.color_palette("colorblind", 2)
    fig, ax = plt.subplots(figsize=(max(7.5, 0.9 * len(labels)), 3.6))
    ax.bar(x - 0.2, gains["paged_over_oracle"], 0.4, color=c[0], label="paged ÷ Orca (Oracle)")
    ax.bar(x + 0.2, gains["paged_over_max"], 0.4, color=c[1], label="paged ÷ Orca (Max)")
    ax.axhline(1.0, color="0.3", lw=0.8)
    ax.set_xticks(x, labels, rotation=40, ha="right", fontsize=7)
    ax.set_ylabel("sustained-rate ratio")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
