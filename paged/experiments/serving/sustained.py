"""Peak throughput and the sustained-rate search over simulated points (§6.1).

Sustained rate (:func:`sustained_rate`): the highest rate whose paper-length run has a
normalized latency at or under the threshold, for each of :data:`THRESHOLDS` (0.1, 0.2, 0.5
s/token; 0.2 is the headline :data:`LATENCY_THRESHOLD`: people read about 4–5 tokens/s, and it is
5–10× every preset's unloaded latency). Found by bisection on ``[0, saturated throughput]``: a rate
at or above the saturated throughput cannot be served in steady state (the queue grows without
bound), so the sustained rate is never above the throughput.
"""

from __future__ import annotations

import math
from itertools import product

import pandas as pd

from paged.experiments.notebook.sweep import run_jobs
from paged.experiments.serving.point import SATURATED_REQUESTS, THRESHOLDS, simulate_point
from paged.experiments.serving.run_length import paper_duration
from paged.experiments.serving.sweeps import matching_rows
from paged.sim.config import DEFAULT_BLOCK_SIZE, model_name

__all__ = ["as_names", "sustained_rate"]

def _sustained(system, settings, thresholds, rel_tol, lo, known, saturated_requests, probes=(), latency_cap=None):
    """One system's saturated throughput and sustained rate at each threshold (module docstring)."""
    common = {k: v for k, v in settings.items() if k not in ("min_duration", "num_requests")}
    min_duration, count = settings["min_duration"], settings["num_requests"]
    match = {k: v for k, v in settings.items() if not (k == "num_requests" and v is None)}  # paper-length rows count theirs
    rows = matching_rows(known, match, system)
    saturated = matching_rows(known, {k: v for k, v in match.items() if k != "num_requests"} | {"min_duration": math.nan},
                          system)
    saturated = saturated[saturated["rate"] == math.inf] if len(saturated) else saturated
    if len(saturated):
        peak = saturated.iloc[0].to_dict()
    else:
        peak = simulate_point(system=system, rate=math.inf, num_requests=saturated_requests, record_sharing=False,
                              **common)
    throughput = float(peak["throughput_rps"])
    cache = {float(r["rate"]): float(r["normalized_latency"]) for _, r in rows.iterrows() if math.isfinite(r["rate"])}
    cap = max(thresholds) if latency_cap is None else latency_cap
    points = [] if len(saturated) else [peak]

    def latency(rate):
        if rate not in cache:
            r = simulate_point(system=system, rate=rate, num_requests=count,
                               min_duration=None if count is not None else min_duration, latency_cap=cap,
                               record_sharing=False, **common)
            cache[rate] = float(r["normalized_latency"])
            points.append(r)
        return cache[rate]

    for fraction in probes:  # rates tried before the bisection (a bracket near the knee)
        if fraction * throughput >= lo:
            latency(fraction * throughput)
    out = []
    for thr in sorted(thresholds):
        def ok(rate):
            return latency(rate) <= thr

        failing = [r for r in cache if r < throughput and not ok(r)] + [throughput]
        hi = min(failing)
        lo_ = max([r for r in cache if r < hi and ok(r)], default=0.0)
        while hi - lo_ > rel_tol * hi and hi > lo:
            mid = (lo_ + hi) / 2
            lo_, hi = (mid, hi) if ok(mid) else (lo_, mid)
        out.append({**settings, "system": system, "threshold": thr, "sustained_rate": lo_,
                    "throughput_rps": throughput, "at_throughput": hi >= throughput and lo_ > 0,
                    "evaluations": len(cache)})
    return out, points


def as_names(what: str, value) -> list:
    """One name or a list of names as a list (a bare string is one name, not its letters).

    Raises:
        ValueError: for an empty list or a name given twice.
    """
    names = [value] if isinstance(value, str) else list(value)
    if not names:
        raise ValueError(f"{what} must name at least one, got {value!r}")
    twice = [v for i, v in enumerate(names) if v in names[:i]]
    if twice:
        raise ValueError(f"{what} names {twice[0]!r} twice: {value!r}")
    return names


def sustained_rate(systems, *, model: str | list[str] = "opt-13b", trace: str | list[str] = "sharegpt",
                   thresholds=THRESHOLDS, lo: float = 1e-3, rel_tol: float = 0.03, seed: int = 0,
                   block_size: int = DEFAULT_BLOCK_SIZE, preemption: str = "recompute", cpu_scale: float | list = 1.0,
                   min_duration: float | None = None, duration_scale: float = 1.0, workers: int = 2,
                   known: pd.DataFrame | None = None, return_points: bool = False,
                   saturated_requests: int = SATURATED_REQUESTS, num_requests: int | None = None,
                   groups: dict | None = None, tokenizer: str = "gpt2", probes=(), latency_cap: float | None = None):
    """Each system's saturated throughput and its sustained rate at each threshold, for every
    (model, trace) given (jobs in parallel over ``workers`` processes).

    The sustained rate at a threshold ``t`` (s/token) is the highest rate whose paper-length run
    (:func:`simulate_point`, extended while not converged) has normalized latency ≤ ``t``; bisection on
    ``[0, throughput]`` until the bracket is within ``rel_tol`` of its upper end (the throughput
    itself counts as failing: it cannot be served in steady state), so it is never above the
    throughput. Latency is assumed to grow with rate (every rate scales one arrival stream).
    Evaluations are shared between thresholds; runs stop early once their latency must pass
    ``latency_cap`` (default the largest threshold), and a run below it that has not converged is doubled.

    Args:
        systems: names from :data:`SYSTEMS`.
        model, trace, cpu_scale: one value or a list each; every combination is searched.
        lo: give up below this rate (requests/s): the sustained rate is then 0.
        min_duration, duration_scale: seconds of arrivals per point, or (None) ``duration_scale``
            × the paper's trace length of each model (:func:`simulate_point`).
        saturated_requests: requests of the saturated-throughput run (when ``known`` has none).
        num_requests: None (default): paper-length points; an int: every point serves exactly that
            many requests (no convergence check: shorter, and a transient at high rates).
        groups: sequence-group settings of :func:`simulate_point` (``n``, ``beam_width``,
            ``prefix_caching``; §6.3, §6.4); also settings ``known`` rows must match.
        tokenizer: the trace's committed counts (:func:`paged.workloads.get_trace`).
        probes: fractions of each system's saturated throughput run before the bisection; the
            bisection then starts from the bracket they give. A probe within ``rel_tol`` of the peak
            (e.g. 0.98 with 0.03) that stays under a threshold ends that threshold's search with one
            run, where bisection from ``[0, peak]`` would take five or six, most far below the knee
            (an iteration-level system's latency stays flat nearly to its peak). Default none.
        known: rows of earlier :func:`sweep` calls (and saturated runs, ``rate=inf``) with the same
            settings (``model``, ``trace``, ``seed``, ``block_size``, ``preemption``,
            ``cpu_scale``, ``min_duration``, ``num_requests``, the groups, ``tokenizer``); their
            outcomes are reused, not simulated again.
        return_points: also return the :func:`simulate_point` rows simulated here (the knee of
            each curve, for the figure; runs past ``latency_cap`` stopped early).
        latency_cap: s/token at or above the largest threshold; None: the largest threshold. A search at
            one threshold with a higher cap still runs (and doubles until converged) the points between
            the two, as a search with every threshold of :data:`THRESHOLDS` does.

    Returns:
        One row per (model, trace, system, threshold): the settings, ``sustained_rate``
        (requests/s), ``throughput_rps`` (saturated), ``at_throughput`` (the search ended within
        ``rel_tol`` of the throughput), ``evaluations`` (distinct rates known or simulated); with
        ``return_points``, ``(that table, the simulated points)``.

    Raises:
        ValueError: if ``lo`` ≤ 0, ``rel_tol`` is not in ``(0, 1)``, no threshold is given, or
            ``systems``, ``model`` or ``trace`` is empty or names one twice (:func:`as_names`);
            from :func:`simulate_point` for unknown names.
    """
    if not lo > 0:
        raise ValueError(f"lo must be > 0 requests/s, got {lo}")
    if not 0 < rel_tol < 1:
        raise ValueError(f"rel_tol must be in (0, 1), got {rel_tol}")
    thresholds = tuple(thresholds)
    if not thresholds or min(thresholds) <= 0:
        raise ValueError(f"thresholds must be positive s/token values, got {thresholds}")
    if latency_cap is not None and not latency_cap >= max(thresholds):
        raise ValueError(f"latency_cap must be at least the largest threshold {max(thresholds)}, got {latency_cap}")
    systems = as_names("systems", systems)
    models = as_names("model", model)
    traces = as_names("trace", trace)
    scales = list(cpu_scale) if isinstance(cpu_scale, (list, tuple)) else [cpu_scale]
    groups = {"n": 1, "beam_width": 1, "prefix_caching": False, **(groups or {})}
    jobs = []
    for m, t, scale, s in product(models, traces, scales, systems):
        floor = paper_duration(m) * duration_scale if min_duration is None else float(min_duration)
        settings = dict(model=model_name(m), trace=str(t), seed=seed, block_size=block_size,
                        preemption=preemption, cpu_scale=scale,
                        min_duration=math.nan if num_requests is not None else floor,
                        num_requests=num_requests, **groups, tokenizer=tokenizer)
        jobs.append(dict(system=s, settings=settings, thresholds=thresholds, rel_tol=rel_tol, lo=lo, known=known,
                         saturated_requests=saturated_requests, probes=tuple(probes), latency_cap=latency_cap))
    results = run_jobs(_sustained, jobs, workers=workers, desc="sustained rate")
    table = pd.DataFrame([r for rows, _ in results for r in rows])
    if return_points:
        return table, pd.DataFrame([p for _, points in results for p in points])
    return table
