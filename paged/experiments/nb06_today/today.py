"""Notebook 06: does paging still pay on today's models and GPUs? (beyond the paper)

The paper measured multi-head-attention OPT models on A100s with 2K-token contexts. This driver asks
the same question of grouped-query (GQA) and multi-query (MQA) models from their Hugging Face configs
(:mod:`paged.sim.model_config`), on H100 / H200 / L4 as well as A100 (:mod:`paged.sim.gpu_spec`), with
the same scheduler, KV cache managers and cost model as notebooks 01–03:

* :func:`kv_table`: KV bytes per token and per 2K-token request of each model (§3's arithmetic);
* :func:`memory_breakdown`: Fig. 2's breakdown of KV memory for a GQA model on a server;
* :func:`gain_table`: paged ÷ Orca (Oracle, Max) sustained rates for model × server pairs at paper-length
  runs (:func:`paged.experiments.serving.sustained_rate`, started from a bracket that a short search
  guesses), with what bounds each system, measured on the iterations of its saturated run
  (:mod:`paged.experiments.nb06_today.iteration_bounds`): the decode batches it reaches, the shares of
  its GPU time that are compute bound, in prefills, in KV reads and in host costs; beside them the
  batch at which a decode step turns compute bound on that GPU (:func:`compute_bound_batch`) and how
  many max-length sequences the KV cache holds;
* :func:`run_table`: every paper-length run of those searches, its arrival span and whether it converged;
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
from paged.experiments.notebook.sweep import run_jobs
from paged.experiments.nb06_today.iteration_bounds import bound_profile
from paged.experiments.serving import sustained_rate
from paged.sim.config import DEFAULT_BLOCK_SIZE, ServingConfig, model_name
from paged.sim.cost_model import get_cost_model
from paged.sim.deployment import get_model_spec
from paged.sim.simulator import simulate
from paged.workloads import get_trace

__all__ = ["MODELS", "PAIRS", "LONG_PAIRS", "REFERENCE", "SYSTEMS", "BOUND_COLUMNS", "SAME_BATCH", "COMPUTE_BOUND",
           "kv_table", "memory_breakdown", "compute_bound_batch", "gain_table", "run_table", "verdicts", "plot_kv_bytes",
           "plot_gains"]

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
                     block_size: int = DEFAULT_BLOCK_SIZE, tokenizer: str = "cl100k") -> pd.DataFrame:
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
    cost = get_cost_model(deployment, block_size=DEFAULT_BLOCK_SIZE, cpu_scale=0.0)
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


#: Columns of :func:`~paged.experiments.nb06_today.iteration_bounds.bound_profile` that :func:`gain_table` keeps per system.
BOUND_COLUMNS = ("decode_batch", "max_decode_batch", "compute_bound_share", "prefill_share", "context_share", "host_share")
#: The systems compared: vLLM's paged KV cache and Orca's reservations with an oracle and with the maximum length.
SYSTEMS = ("paged", "orca-oracle", "orca-max")


def _next_rate(rows: pd.DataFrame, throughput: float, threshold: float, rel_tol: float, lo: float) -> float | None:
    """The next paper-length rate of one system's search (:func:`gain_table`), or None when its bracket
    is within ``rel_tol`` (or below ``lo`` req/s). ``rows``: its paper-length runs so far."""
    passed = rows["normalized_latency"] <= threshold
    fails = [r for r in rows["rate"][~passed] if r < throughput] + [throughput]
    hi = min(fails)
    ok = [r for r in rows["rate"][passed] if r < hi]
    if not ok:  # nothing passed yet: step down from the lowest failure, twice as far each time (galloping)
        step = rel_tol * 2 ** max(0, len(fails) - 3)  # fails holds the peak throughput too
        nxt = hi * (1 - step) if step < 0.5 else hi / 2
        return None if hi <= lo else nxt
    low = max(ok)
    return None if hi - low <= rel_tol * hi or hi <= lo else (low + hi) / 2  # the bisection of sustained_rate


def gain_table(pairs=PAIRS, trace: str = "sharegpt", *, threshold: float = 0.2, duration_scale: float = 1.0,
               guess_duration: float = 60.0, bracket: tuple = (0.96, 1.0), saturated_requests: int = 2000,
               rel_tol: float = 0.05, lo: float = 1e-3, block_size: int = DEFAULT_BLOCK_SIZE, tokenizer: str = "cl100k",
               seed: int = 0, workers: int = 2, return_points: bool = False):
    """Sustained rates of paged, Orca (Oracle) and Orca (Max) at ``threshold`` s/token for each
    deployment in ``pairs`` on ``trace``, at paper-length runs, their ratios, and what bounds each system.

    The search (:func:`paged.experiments.serving.sustained_rate`) evaluates each rate over
    ``duration_scale`` × the paper's trace length (1 hour of arrivals,
    :func:`paged.experiments.serving.run_length.paper_duration`), doubled once while the latency has
    not converged. To spend few paper-length runs it starts from a bracket: a search over
    ``guess_duration`` s of arrivals gives each system a guess ``g``, the rates ``g × bracket`` run at
    paper length (all in parallel; only ``g`` when the guess is within ``rel_tol`` of the peak throughput,
    which counts as failing, so that one run passing closes the bracket), and the paper-length search continues from what they found
    in waves (the next rate of every system in parallel): bisection between the highest rate that passed
    and the lowest that failed (or the peak throughput), and while nothing has passed, steps down from the
    lowest failure by ``rel_tol``, then twice as far each time. The search of
    :func:`~paged.experiments.serving.sustained_rate` then reads these runs and finishes (it bisects the
    same way, so it rarely needs another): the result is the paper-length search's whatever the guess;
    only its cost depends on it.

    Args:
        duration_scale: × the paper's trace length per evaluated rate (1.0: the paper's).
        guess_duration: seconds of arrivals of the short guessing search.
        bracket: fractions of the guess evaluated at paper length first (ideally one passes, one fails).
        saturated_requests: requests of each saturated-throughput run.
        return_points: also return the paper-length runs and the saturated runs (one DataFrame).

    Returns:
        One row per deployment: ``paged_rps``, ``oracle_rps``, ``max_rps`` (req/s), ``paged_over_oracle``,
        ``paged_over_max``, the mean batch of each system at its sustained rate (``*_batch``) and in its
        saturated-throughput run (``*_saturated_batch``: all requests waiting, the most it batches),
        the scheduler's cap ``max_num_seqs``; per system (prefixes ``paged_``, ``oracle_``, ``max_``) what
        bounds its saturated run, iteration by iteration
        (:func:`~paged.experiments.nb06_today.iteration_bounds.bound_profile`, :data:`BOUND_COLUMNS`:
        time-weighted and largest decode batch, shares of GPU time compute bound, in prefills, in KV reads,
        in host costs); ``runs`` / ``runs_converged`` (paper-length runs that ran
        to the end, and those whose latency had converged), ``compute_bound_batch``
        (:func:`compute_bound_batch`), ``kv_slots`` and ``max_len_sequences`` (KV slots ÷ max sequence
        length: Orca (Max)'s batch limit), ``kv_bytes_per_token``, ``trace``, ``duration_scale``;
        with ``return_points``, ``(that table, the runs)``.

    Raises:
        ValueError: as :func:`paged.experiments.serving.sustained_rate` (unknown names, bad numbers), or
            for an empty ``bracket`` or a fraction of it outside (0, 1].
    """
    from paged.experiments.serving import sweep

    pairs = list(pairs)
    bracket = tuple(bracket)
    if not bracket or not all(0 < f <= 1 for f in bracket):
        raise ValueError(f"bracket must hold fractions in (0, 1] of the guessed rate, got {bracket!r}")
    common = dict(trace=trace, seed=seed, block_size=block_size, tokenizer=tokenizer)
    guess, short = sustained_rate(list(SYSTEMS), model=pairs, thresholds=(threshold,), min_duration=guess_duration,
                                  rel_tol=rel_tol, lo=lo, saturated_requests=saturated_requests, workers=workers,
                                  return_points=True, **common)
    saturated = short[short["rate"] == math.inf]
    names = {model_name(name): name for name in pairs}
    peak = {(r.model, r.system): float(r.throughput_rps) for r in guess.itertuples()}
    todo = [(r.model, r.system, r.sustained_rate * f) for r in guess.itertuples() if r.sustained_rate > 0
            for f in ((1.0,) if r.at_throughput else bracket)]  # at the peak, one passing run closes the bracket
    waves = []
    while todo:  # one wave: the next rate of every system whose bracket is still wide, all in parallel
        waves.append(sweep([dict(model=names[m], system=s, rate=rate, duration_scale=duration_scale,
                                 latency_cap=threshold, record_sharing=False, **common) for m, s, rate in todo],
                           workers=workers, desc=f"paper-length runs, wave {len(waves) + 1}"))
        runs = pd.concat(waves, ignore_index=True)
        todo = []
        for (m, s), t in peak.items():
            part = runs[(runs["model"] == m) & (runs["system"] == s)]
            nxt = _next_rate(part, t, threshold, rel_tol, lo) if len(part) else None
            if nxt is not None:
                todo.append((m, s, nxt))
    first = pd.concat(waves, ignore_index=True) if waves else short.iloc[:0]
    table, more = sustained_rate(list(SYSTEMS), model=pairs, thresholds=(threshold,), duration_scale=duration_scale,
                                 rel_tol=rel_tol, lo=lo, saturated_requests=saturated_requests, workers=workers,
                                 known=pd.concat([saturated, first], ignore_index=True), return_points=True, **common)
    points = pd.concat([first, more, saturated], ignore_index=True)
    profiles = run_jobs(bound_profile, [dict(deployment=name, system=s, num_requests=saturated_requests, **common)
                                        for name in pairs for s in SYSTEMS], workers=workers, desc="what bounds each run")
    bounds = {(p["deployment"], p["system"]): p for p in profiles}
    rows = []
    for name in pairs:
        cost = ServingConfig(model=name).cost_model()
        key = cost.model.name
        rate = {s: float(table[(table["model"] == key) & (table["system"] == s)]["sustained_rate"].iloc[0])
                for s in SYSTEMS}
        rows.append({"deployment": name, "server": cost.server.name, "trace": trace, "duration_scale": duration_scale,
                     "paged_rps": rate["paged"], "oracle_rps": rate["orca-oracle"], "max_rps": rate["orca-max"],
                     "paged_over_oracle": rate["paged"] / rate["orca-oracle"] if rate["orca-oracle"] else math.inf,
                     "paged_over_max": rate["paged"] / rate["orca-max"] if rate["orca-max"] else math.inf,
                     **{f"{s.removeprefix('orca-')}_batch": _batch_at(points, key, s, rate[s]) for s in rate},
                     **{f"{s.removeprefix('orca-')}_saturated_batch": _batch_at(points, key, s, math.inf) for s in rate},
                     "compute_bound_batch": compute_bound_batch(name), "max_num_seqs": MAX_NUM_SEQS,
                     "kv_slots": cost.num_kv_slots,
                     "max_len_sequences": cost.num_kv_slots // cost.model.max_seq_len,
                     "kv_bytes_per_token": cost.model.kv_bytes_per_token,
                     **{f"{s.removeprefix('orca-')}_{k}": bounds[(name, s)][k] for s in SYSTEMS for k in BOUND_COLUMNS},
                     **_convergence(points, key)})
    gains = pd.DataFrame(rows)
    return (gains, points.assign(deployment=points["model"].map(names))) if return_points else gains


def run_table(points: pd.DataFrame) -> pd.DataFrame:
    """Each paper-length run of :func:`gain_table` (``return_points``): deployment, trace, system,
    rate (req/s), ``arrival span (s)``, requests served, normalized latency (s/token; for a run
    stopped early, the lower bound that stopped it), whether it converged and whether it stopped
    early (then it has no convergence check). Saturated runs are left out. Sorted by deployment, system, rate."""
    runs = points[points["rate"].apply(math.isfinite)]
    out = pd.DataFrame({"deployment": runs["deployment"], "trace": runs["trace"], "system": runs["system"],
                        "rate": runs["rate"].astype(float), "arrival span (s)": runs["arrival_seconds"].astype(float),
                        "requests": runs["num_requests"].astype(int),
                        "normalized latency": runs["normalized_latency"].astype(float),
                        "converged": runs["converged"].astype(bool) & ~runs["stopped_early"].astype(bool),
                        "stopped early": runs["stopped_early"].astype(bool)})
    return out.drop_duplicates(["deployment", "trace", "system", "rate"]).sort_values(
        ["deployment", "trace", "system", "rate"]).reset_index(drop=True)


#: A baseline whose saturated decode batch is at least this fraction of paged's is not held back by memory.
SAME_BATCH = 0.9
#: Paged's saturated run is called compute bound when more than this share of its GPU time is.
COMPUTE_BOUND = 0.5


def _reason(row, baseline: str) -> str:
    """What bounds the baseline's batch and whether paged's larger batch pays, every number from the
    saturated runs' iterations (:func:`~paged.experiments.nb06_today.iteration_bounds.bound_profile`).
    The label before the colon: ``scheduler cap`` (both reach ``max_num_seqs``), ``compute`` (paged's
    GPU time mostly compute bound), ``memory`` (the baseline batches less than :data:`SAME_BATCH` ×
    paged's and paged's time is mostly memory bound) or ``not memory`` (the batches are alike below the cap)."""
    name = "Orca (Max)" if baseline == "max" else "Orca (Oracle)"
    b, p = row[f"{baseline}_decode_batch"], row["paged_decode_batch"]
    b_top, p_top, cap = row[f"{baseline}_max_decode_batch"], row["paged_max_decode_batch"], row["max_num_seqs"]
    compute, prefill = row["paged_compute_bound_share"], row["paged_prefill_share"]
    time = (f"paged's GPU time {compute:.0%} compute bound ({prefill:.0%} in prefills, "
            f"{row['paged_context_share']:.0%} reading KV, host {row['paged_host_share']:.0%})")
    batches = f"decode batch {b:.0f} (largest {b_top:.0f}) vs paged's {p:.0f} (largest {p_top:.0f})"
    if b >= SAME_BATCH * p:
        label = "scheduler cap" if b_top >= cap and p_top >= cap else "compute" if compute > COMPUTE_BOUND \
            else "not memory"
        held = f"both reach the scheduler's {cap}-sequence cap" if label == "scheduler cap" else \
            f"{name} batches as many as paged"
        return f"{label}: {held}: {batches}; {time}"
    held = f"; {row['max_len_sequences']:,} max-length reservations fit" if baseline == "max" else ""
    if compute > COMPUTE_BOUND:
        return f"compute: the KV cache holds {name} to a {batches}{held}, but {time}"
    return f"memory: the KV cache holds {name} to a {batches}{held}; {time}"


def verdicts(gains: pd.DataFrame, reference: pd.Series | None = None, tolerance: float = 0.05) -> pd.DataFrame:
    """Where paging's gain grows, shrinks or vanishes, per deployment and baseline.

    A gain *vanishes* when the ratio is within ``tolerance`` of 1 or below, else it *grows* or
    *shrinks* against ``reference``'s ratio (default: the row of :data:`REFERENCE` in ``gains``) by
    more than ``tolerance`` (relative), else it is *about the same*. The reason (:func:`_reason`) states
    what the saturated runs' iterations measured: the decode batches each system reached against the
    scheduler's cap and the KV capacity, and the shares of paged's GPU time that were compute bound, in
    prefills, in KV reads and in host costs (the cost model's roofline of each iteration).

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

    few = len(gains) <= 6  # few groups: labels upright, the deployment broken at its "@"
    labels = [f"{d.replace('@', chr(10) + '@') if few else d}\n{t}" for d, t in zip(gains["deployment"], gains["trace"])]
    x = np.arange(len(labels))
    c = sns.color_palette("colorblind", 2)
    fig, ax = plt.subplots(figsize=(max(7.5, 0.9 * len(labels)), 3.6))
    ax.bar(x - 0.2, gains["paged_over_oracle"], 0.4, color=c[0], label="paged ÷ Orca (Oracle)")
    ax.bar(x + 0.2, gains["paged_over_max"], 0.4, color=c[1], label="paged ÷ Orca (Max)")
    ax.axhline(1.0, color="0.3", lw=0.8)
    ax.set_xticks(x, labels, rotation=0 if few else 40, ha="center" if few else "right", fontsize=8 if few else 7)
    ax.set_ylabel("sustained-rate ratio")
    ax.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2, frameon=False)  # above the bars
    fig.tight_layout()
    return fig
