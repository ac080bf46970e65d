"""Notebook 03's measurements (§6.2, §6.5): peak throughput, latency curves, sustained rates, batches.

Every function here only arranges runs of :mod:`paged.experiments.serving` (paper-length points,
saturated throughput, the sustained-rate bisection); plotting is in :mod:`paged.experiments.nb03_throughput.throughput_figures`.

* :func:`capacity`: for every (model, trace, system): the saturated throughput, a latency curve at
  fractions of it, and the sustained rate at each threshold (whose bisection adds the points near
  the knee to the curve).
* :func:`ratio_table`: paged's sustained rate ÷ each baseline's, per model, trace and threshold,
  beside the paper's ranges.
* :func:`sensitivity`: the same ratios with the cost model's host (CPU) costs at other scales.
* :func:`batched_requests`: Fig. 13's average batch at given rates (the paper's, and the load where
  paged reaches its own knee), counted three ways, at each host-cost scale.
"""

from __future__ import annotations

import math

import pandas as pd

from paged.block.allocator import DEFAULT_BLOCK_SIZE
from paged.experiments.notebook.paper import (FIG11_MEAN_LENS, FIG12_ALPACA_RATIOS, FIG12_SUSTAINED_RATIOS,
                                              FIG13_BATCHED_REQUESTS, FIG17_CHATBOT_RATIO)
from paged.experiments.serving import LATENCY_THRESHOLD, SATURATED_REQUESTS, THRESHOLDS, sustained_rate, sweep
from paged.sim.config import model_name
from paged.systems import get_system

__all__ = ["workload", "capacity", "ratio_table", "sensitivity", "peak_sensitivity", "batched_requests",
           "littles_law", "BATCH_COUNTS"]

#: Fig. 13's average batch, three ways (the paper does not say which it counts): per iteration with
#: the prefill iterations, per decode iteration, and per second of busy time.
BATCH_COUNTS = {"avg_batched_requests": "every iteration (prefills included)",
                "avg_decode_batched_requests": "decode iterations only",
                "time_avg_batched_requests": "per second of busy time"}


def workload(trace: str) -> str:
    """The paper's workload a trace name stands for: ``"chatbot"``, ``"alpaca"`` or ``"sharegpt"``."""
    name = str(trace).lower()
    return "chatbot" if "chat" in name else "alpaca" if name.startswith("alpaca") else "sharegpt"


def capacity(models, traces, systems, *, fractions=(0.3, 0.96), thresholds=THRESHOLDS,
             duration_scale: dict | float = 1.0, seed: int = 0, block_size: int = DEFAULT_BLOCK_SIZE,
             preemption: str = "recompute", cpu_scale: float = 1.0, rel_tol: float = 0.05,
             saturated_requests: int = SATURATED_REQUESTS, workers: int = 2) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Peak throughput, latency curves and sustained rates (module docstring).

    Args:
        models, traces, systems: what to run (Table 1 presets, trace names, :data:`~paged.experiments.serving.SYSTEMS`).
        fractions: the curve's rates, as fractions of each system's saturated throughput. A top
            point within ``rel_tol`` of the peak (0.96 with the default 5%) ends the search of a
            system whose latency stays under the thresholds to there without bisection runs (an
            iteration-level system's latency is flat nearly to its peak): each bisection run near
            the peak is a paper-length run at nearly the peak rate, the most expensive there is.
        saturated_requests: requests of each saturated-throughput run (all at t = 0).
        duration_scale: each point's arrivals last this × the paper's trace length (1 h; 15 min for
            OPT-175B) at least; a dict gives it per trace.

    Returns:
        ``(points, sustained)``: every finite-rate :func:`~paged.experiments.serving.simulate_point`
        row run (the curve's and the bisection's) plus the saturated rows (``rate=inf``), and the
        :func:`~paged.experiments.serving.sustained_rate` table.

    Raises:
        ValueError: empty lists or non-positive fractions; as the runs do.
    """
    if not models or not traces or not systems or not fractions or min(fractions) <= 0:
        raise ValueError("need models, traces, systems and positive rate fractions")
    settings = dict(seed=seed, block_size=block_size, preemption=preemption, cpu_scale=cpu_scale)
    peaks = sweep([dict(model=m, trace=t, system=s, rate=math.inf, num_requests=saturated_requests, **settings)
                   for m in models for t in traces for s in systems], workers=workers, desc="saturated throughput")
    points, tables = [peaks], []
    for t in traces:
        scale = duration_scale.get(t, 1.0) if isinstance(duration_scale, dict) else duration_scale
        mine = peaks[peaks["trace"] == str(t)]
        curve = sweep([dict(model=r.model, trace=t, system=r.system, rate=float(f * r.throughput_rps),
                            duration_scale=scale, **settings) for r in mine.itertuples() for f in fractions],
                      workers=workers, desc=f"latency curve ({t})")
        table, knee = sustained_rate(systems, model=list(models), trace=t, thresholds=thresholds, rel_tol=rel_tol,
                                     duration_scale=scale, workers=workers, known=pd.concat([mine, curve]),
                                     return_points=True, **settings)
        points += [curve, knee]
        tables.append(table)
    points = pd.concat([p for p in points if len(p)], ignore_index=True)
    return points.sort_values(["model", "trace", "system", "rate"], kind="stable").reset_index(drop=True), \
        pd.concat(tables, ignore_index=True)


def _per_trace(kwargs: dict, trace: str) -> dict:
    """``kwargs`` with a dict ``duration_scale`` replaced by its value for ``trace`` (default 1)."""
    scale = kwargs.get("duration_scale", 1.0)
    return {**kwargs, "duration_scale": scale.get(trace, 1.0) if isinstance(scale, dict) else scale}


def _paper_ratio(trace: str, model: str, system: str) -> str:
    kind = workload(trace)
    if kind == "sharegpt":
        return FIG12_SUSTAINED_RATIOS.get(system, "not stated")
    if kind == "alpaca":
        return FIG12_ALPACA_RATIOS.get((model, system), "not stated")
    return f"{FIG17_CHATBOT_RATIO:g}×" if system.startswith("orca") else "not stated"


def ratio_table(sustained: pd.DataFrame) -> pd.DataFrame:
    """Paged's sustained rate ÷ each baseline's, one row per (model, trace, baseline), one column per
    threshold (``÷ at 0.2 s/token``), with both rates and the paper's statement beside them, and the
    threshold-free ratio ``peak ÷``: paged's saturated throughput ÷ the baseline's.

    Why the peak (§6.2): the paper reads each curve where its latency "suddenly explodes", i.e. where
    "the request rate surpasses the capacity of the serving system" and the queue grows without
    bound; that rate is the system's saturated throughput, whatever latency a system has before it.
    A fixed latency threshold instead rewards a system whose latency stays flat up to its capacity
    (paged's run within a few % of it) over one whose latency rises gradually long before
    (FasterTransformer's static batches), so ``÷ at t`` moves with ``t`` where ``peak ÷`` does not.

    With the saturated throughputs, each row also gives both systems' sustained rates at the headline
    threshold as fractions of their own peaks (``paged's rate at 0.2 ÷ its peak``, ``baseline's rate
    at 0.2 ÷ its peak``): where they differ, the threshold, not the capacity, sets ``÷ at 0.2``.

    A baseline that sustains nothing at a threshold gives ``inf``.

    Raises:
        ValueError: if ``sustained`` has no paged rows.
    """
    if "paged" not in set(sustained["system"]):
        raise ValueError("the sustained-rate table has no paged rows to divide")
    rows = []
    for (model, trace), part in sustained.groupby(["model", "trace"], sort=False):
        rate = part.pivot_table(index="system", columns="threshold", values="sustained_rate")
        for system in [s for s in part["system"].unique() if s != "paged"]:
            row = {"model": model, "trace": trace, "baseline": get_system(system).label}
            for thr in rate.columns:
                base = rate.loc[system, thr]
                row[f"÷ at {thr:g} s/token"] = rate.loc["paged", thr] / base if base > 0 else math.inf
            thr = LATENCY_THRESHOLD if LATENCY_THRESHOLD in rate.columns else rate.columns[0]
            row[f"rates at {thr:g} (req/s)"] = f"{rate.loc['paged', thr]:.3g} vs {rate.loc[system, thr]:.3g}"
            if "throughput_rps" in part:  # the saturated run of each system (sustained_rate's rows)
                peak = part.groupby("system")["throughput_rps"].first()
                row["peak ÷"] = float(peak["paged"] / peak[system])
                row[f"paged's rate at {thr:g} ÷ its peak"] = float(rate.loc["paged", thr] / peak["paged"])
                row[f"baseline's rate at {thr:g} ÷ its peak"] = float(rate.loc[system, thr] / peak[system])
            row["paper"] = _paper_ratio(trace, model, system)
            rows.append(row)
    return pd.DataFrame(rows)


def sensitivity(base: pd.DataFrame, *, scales=(0.0, 2.0), threshold: float = LATENCY_THRESHOLD,
                workers: int = 2, return_points: bool = False, **kwargs):
    """Sustained rates with the host costs at other ``scales`` beside ``base`` (the scale-1 table).

    For every (model, trace) of ``base`` and every scale, the iteration-level systems of ``base``
    are searched again at ``threshold``; request-level ones (FasterTransformer: no host costs) keep
    their rate. ``kwargs`` go to :func:`~paged.experiments.serving.sustained_rate` (``seed``, ...);
    a dict ``duration_scale`` gives it per trace.

    Returns:
        ``base``'s rows at ``threshold`` plus the new ones; column ``cpu_scale`` tells them apart. With
        ``return_points``, also the searches' runs (:func:`~paged.experiments.serving.simulate_point` rows).
    """
    base = base[base["threshold"] == threshold]
    out, runs = [base], []
    for (model, trace), part in base.groupby(["model", "trace"], sort=False):
        iteration = [s for s in part["system"] if get_system(s).has_kv_cache_manager]
        found, points = sustained_rate(iteration, model=model, trace=trace, thresholds=(threshold,),
                                       cpu_scale=list(scales), workers=workers, return_points=True,
                                       **_per_trace(kwargs, trace))
        runs.append(points)
        out.append(found.drop(columns=[c for c in found.columns if c not in base.columns]))
        out += [part[~part["system"].isin(iteration)].assign(cpu_scale=scale) for scale in scales]
    table = pd.concat(out, ignore_index=True)
    if return_points:
        runs = [r for r in runs if len(r)]
        return table, pd.concat(runs, ignore_index=True) if runs else pd.DataFrame()
    return table


def peak_sensitivity(traces, systems, *, model: str = "opt-13b", scales=(0.0, 1.0, 2.0),
                     saturated_requests: int = SATURATED_REQUESTS, workers: int = 2,
                     known: pd.DataFrame | None = None, **settings) -> pd.DataFrame:
    """Paged's saturated throughput ÷ each baseline's at each host-cost scale (cheap: one run each).

    A system without host costs (FasterTransformer: :meth:`~paged.sim.config.ServingConfig.cost_model`)
    runs once, its peak the same at every scale. ``known``: rows with ``model``, ``trace``,
    ``system``, ``cpu_scale`` and ``throughput_rps`` (e.g. :func:`capacity`'s sustained table, whose
    peaks are these saturated runs) are reused, not run again.

    Returns:
        One row per (trace, cpu_scale, baseline): ``peak ÷`` and both peaks (req/s).
    """
    name = model_name(model)

    def key(trace, system, scale):  # a request-level system's peak does not depend on the scale
        return (trace, system, None if get_system(system).batching == "request" else float(scale))

    have = {}
    if known is not None and len(known):
        for r in known[known["model"] == name].itertuples():
            have[key(r.trace, r.system, r.cpu_scale)] = float(r.throughput_rps)
    jobs = {}
    for t in traces:
        for s in systems:
            for c in scales:
                if key(t, s, c) not in have and key(t, s, c) not in jobs:
                    jobs[key(t, s, c)] = dict(model=model, trace=t, system=s, rate=math.inf,
                                              num_requests=saturated_requests, cpu_scale=c, **settings)
    if jobs:
        runs = sweep(list(jobs.values()), workers=workers, desc="peak throughput × host costs")
        have.update(zip(jobs, runs["throughput_rps"].astype(float)))
    rows = []
    for t in traces:
        for c in scales:
            paged = have[key(t, "paged", c)]
            rows += [{"trace": t, "cpu_scale": c, "baseline": get_system(s).label, "peak ÷": paged / have[key(t, s, c)],
                      "paged peak": paged, "baseline peak": have[key(t, s, c)]} for s in systems if s != "paged"]
    return pd.DataFrame(rows)


def batched_requests(loads: dict, systems, *, model: str = "opt-13b", scales=(1.0,), workers: int = 2,
                     known: pd.DataFrame | None = None, **kwargs) -> pd.DataFrame:
    """Fig. 13: paper-length runs of ``systems`` at each load, per host-cost scale.

    Args:
        loads: ``{(trace, label): rate}``, e.g. ``{("sharegpt", "paper"): 2.0, ("sharegpt", "paged's knee"): 3.7}``.
        kwargs: to :func:`~paged.experiments.serving.simulate_point` (``seed``, ...); a dict
            ``duration_scale`` gives it per trace.
        known: earlier rows (e.g. :func:`capacity`'s points): a run among them is not repeated
            (:func:`~paged.experiments.serving.reusable`).

    Returns:
        :func:`~paged.experiments.serving.sweep` rows with a ``load`` column; the batch columns are
        :data:`BATCH_COUNTS`.
    """
    points, labels = [], []
    for (trace, label), rate in loads.items():
        for scale in scales:
            for s in systems:
                points.append(dict(model=model, trace=trace, system=s, rate=float(rate), cpu_scale=scale,
                                   **_per_trace(kwargs, trace)))
                labels.append(label)
    return sweep(points, workers=workers, desc="Fig. 13", known=known).assign(load=labels)


def littles_law(batched: pd.DataFrame, mean_output_tokens: dict) -> pd.DataFrame:
    """Fig. 13's batches explained by Little's law: requests in the batch = rate × seconds each runs.

    For every row of :func:`batched_requests` (one system at one load): ``λ·W`` = the served rate
    (``throughput_rps``: the arrival rate when the system keeps up, its capacity when it does not)
    × the mean seconds a request runs (first scheduled to finished), beside the measured
    time-averaged batch (the two agree in steady state); ``keeps up`` (served ≥ 97 % of the
    arrival rate); the seconds per generated token each request saw (``W`` ÷ its mean output
    tokens); and, where the paper states a batch at that rate (Fig. 13: ShareGPT at 2, Alpaca at
    30 req/s) and the system keeps up here, the seconds per token that batch implies by the same
    law on the paper's own trace (``paper batch ÷ rate ÷ the paper's Fig. 11 mean output tokens``,
    e.g. 30.42 ÷ 2 ÷ 337.99 = 45 ms on ShareGPT; it assumes the paper's system kept up too): a
    faster simulated iteration gives a smaller batch at the same rate.

    Args:
        batched: :func:`batched_requests` rows (columns ``trace``, ``system``, ``rate``, ``load``,
            ``throughput_rps``, ``mean_running_seconds``, ``time_avg_batched_requests``).
        mean_output_tokens: trace name -> mean output tokens per request of the trace run.

    Returns:
        One row per input row: ``trace``, ``load``, ``rate``, ``system``, ``keeps up``, ``λ·W``,
        ``batch (time average)``, ``s/token this run``, ``paper batch``, ``s/token the paper's batch implies``.

    Raises:
        KeyError: if a trace of ``batched`` has no entry in ``mean_output_tokens`` (named).
    """
    rows = []
    for r in batched.itertuples():
        if r.trace not in mean_output_tokens:
            raise KeyError(f"no mean output length given for trace {r.trace!r}")
        out = float(mean_output_tokens[r.trace])
        paper = FIG13_BATCHED_REQUESTS.get(f"{workload(r.trace)}@{r.rate:g}", {}).get(r.system)
        paper_out = FIG11_MEAN_LENS.get(workload(r.trace), (math.nan, math.nan))[1]
        keeps_up = bool(r.throughput_rps >= 0.97 * r.rate)
        rows.append({"trace": r.trace, "load": r.load, "rate": r.rate, "system": r.system, "keeps up": keeps_up,
                     "λ·W": r.throughput_rps * r.mean_running_seconds, "batch (time average)": r.time_avg_batched_requests,
                     "s/token this run": r.mean_running_seconds / out,
                     "paper batch": math.nan if paper is None else paper,
                     "s/token the paper's batch implies": paper / r.rate / paper_out if paper is not None and keeps_up
                     else math.nan})
    return pd.DataFrame(rows)
