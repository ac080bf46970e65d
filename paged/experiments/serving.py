"""Simulated serving of the paper's systems at paper scale: points, sweeps, throughput, sustained rate (§6).

Systems (:data:`SYSTEMS`), all on the same :class:`~paged.sim.cost_model.CostModel` of a Table 1 server:

* ``paged``: vLLM — the iteration-level :class:`~paged.core.scheduler.Scheduler` over the paged KV cache
  manager, paged attention kernel, preemption by recomputation or swapping (§4.5).
* ``orca-oracle`` / ``orca-pow2`` / ``orca-max``: Orca — the same iteration-level scheduler over
  contiguous buddy reservations (§6.1), contiguous attention kernel.
* ``fastertransformer``: request-level (static) batching: the earliest ≤ ``B`` arrived requests
  run as one batch to completion, ``B`` as large as memory allows when every request reserves
  the maximum sequence length (§6.1); a C++ loop with sampling on the GPU, so none of the cost
  model's host (CPU) costs (:func:`cost_model_for`).

Run length (:mod:`paged.experiments.run_length`): by default a point serves the paper's trace
length at its rate (1 hour of arrivals, 15 minutes for OPT-175B), doubled if the mean normalized
latency has not converged (once: up to 2×); ``num_requests=`` runs a fixed number of requests instead.

Lengths: the named traces are counted with GPT-2's BPE by default (``tokenizer="gpt2"``), the
tokenizer of the OPT models the paper serves (:func:`paged.workloads.get_trace`).

Sequence groups (§6.3, §6.4): ``n`` parallel samples or a beam search of width ``beam_width`` per
request, and shared prefixes (a trace's ``prefix_len``), reserved by the provider or found by
automatic prefix caching (:func:`run_system`); the KV blocks saved by sharing are measured with
``record_sharing``.

Metrics (:func:`metrics`): normalized latency (mean of end-to-end latency ÷ output tokens, s/token),
time to first token, time per output token, throughput (requests/s, output tokens/s), the average
batch counted three ways (per iteration with prefills, per decode iteration, per second of busy
time: the paper does not say which it counts), preemptions and the share of prefill tokens that
recompute preempted sequences.

Saturated throughput (:func:`simulate_point` with ``rate=inf``): requests/s served when
:data:`SATURATED_REQUESTS` requests all arrive at t = 0 (the system's peak).

Sustained rate (:func:`sustained_rate`): the highest rate whose paper-length run has a
normalized latency at or under the threshold, for each of :data:`THRESHOLDS` (0.1, 0.2, 0.5
s/token; 0.2 is the headline :data:`LATENCY_THRESHOLD`: people read about 4–5 tokens/s, and it is
5–10× every preset's unloaded latency). Found by bisection on ``[0, saturated throughput]``: a rate
at or above the saturated throughput cannot be served in steady state (the queue grows without
bound), so the sustained rate is never above the throughput.

Wall time: rows carry ``sim_wall_seconds`` (:data:`WALL_TIME_COLUMNS`), the only number that
changes between identical runs; leave it out of saved tables.
"""

from __future__ import annotations

import inspect
import math
import numbers
import time
from itertools import product

import pandas as pd

from paged.core.metrics import request_metrics
from paged.core.scheduler import PREEMPTION_MODES
from paged.core.serving_loop import ServingResult
from paged.experiments.sweep import run_jobs
from paged.experiments.run_length import (CONVERGENCE_ABS_S, CONVERGENCE_TOL, MAX_DURATION_FACTOR, LatencyBound,
                                          LatencyCapExceeded, convergence, long_trace, paper_duration,
                                          run_duration)
from paged.sim.cost_model import CostModel, get_cost_model
from paged.sim.simulator import simulate
from paged.sim.static_batching import simulate_static_batching
from paged.systems import PAPER_SYSTEMS, get_system, make_kv_manager
from paged.workloads import get_trace

__all__ = ["as_names", "SYSTEMS", "TRACES", "LATENCY_THRESHOLD", "THRESHOLDS", "SATURATED_REQUESTS", "CPU_SWAP_BYTES",
           "WALL_TIME_COLUMNS", "cost_model_for", "run_system", "metrics", "simulate_point", "sweep", "reusable",
           "sustained_rate"]

#: The systems simulated here: the paper's, from the one registry (:data:`paged.systems.PAPER_SYSTEMS`).
SYSTEMS = PAPER_SYSTEMS
TRACES = ("sharegpt", "alpaca", "sharegpt-chat")
#: Normalized latency (s/token) above which a rate is not sustained (module docstring).
LATENCY_THRESHOLD = 0.2
#: The thresholds whose sustained rates are reported (s/token): the ratios depend on it.
THRESHOLDS = (0.1, 0.2, 0.5)
#: Requests of a saturated-throughput run (all at t = 0); the drain at its end is a few % of it.
SATURATED_REQUESTS = 5_000
#: CPU swap space per server for the paged system (bytes): vLLM's default ``swap_space=4`` GiB
#: per GPU, times the server's GPUs.
CPU_SWAP_BYTES = 4 * 2**30
#: Columns of the rows that measure this machine's wall time (seconds), not the simulated system.
WALL_TIME_COLUMNS = ("sim_wall_seconds",)
#: The settings that make two paper-length rows comparable (the same requests, the same servers).
SETTINGS = ("model", "trace", "seed", "block_size", "preemption", "cpu_scale", "min_duration")


def cost_model_for(model: str | CostModel, system: str, block_size: int = 16, cpu_scale: float = 1.0) -> CostModel:
    """The cost model of ``model``'s Table 1 server as ``system`` runs it: the paged kernel at
    ``block_size`` for a system with :attr:`~paged.systems.System.paged_kernel`, else a contiguous
    kernel (and 16-token rounding of the KV capacity); host costs × ``cpu_scale``, none for a
    request-level (FasterTransformer) system. A :class:`CostModel` is returned as is.

    Raises:
        ValueError: for an unknown model or system, or a bad ``cpu_scale``.
    """
    if isinstance(model, CostModel):
        return model
    spec = get_system(system)
    return get_cost_model(model, block_size=block_size if spec.paged_kernel else 16, paged_kernel=spec.paged_kernel,
                          cpu_scale=0.0 if spec.batching == "request" else cpu_scale)


def run_system(trace, system: str, model: str | CostModel = "opt-13b", *, block_size: int = 16,
               preemption: str = "recompute", cpu_scale: float = 1.0, on_finish=None, n: int = 1,
               beam_width: int = 1, prefix_caching: bool = False, record_sharing: bool = False) -> ServingResult:
    """Serve ``trace`` with one of :data:`SYSTEMS` on a Table 1 server (``on_finish``: as
    :func:`paged.sim.simulator.simulate`; FasterTransformer ignores it).

    Args:
        n, beam_width: every request runs ``n`` parallel samples, or a beam search of that width
            (§6.3; :func:`paged.sim.simulator.groups_from_trace`).
        prefix_caching: paged only: automatic prefix caching finds shared prefixes (``prefix_len`` of
            the trace's requests) by their tokens; otherwise the paged system shares them as a
            provider-reserved prefix (§4.4) and Orca cannot share them.
        record_sharing: record KV blocks with and without sharing (``result.sharing``; steps the run).

    Raises:
        ValueError: for an unknown system or preemption mode, groups on FasterTransformer, prefix caching
            on a system other than paged; RequestTooLargeError as :func:`paged.sim.simulator.simulate`.
    """
    if system not in SYSTEMS:
        raise ValueError(f"unknown system {system!r}; choose one of {SYSTEMS}")
    if preemption not in PREEMPTION_MODES:
        raise ValueError(f"preemption must be one of {PREEMPTION_MODES}, got {preemption!r}")
    cost = cost_model_for(model, system, block_size, cpu_scale)
    slots = cost.num_kv_slots
    max_len = cost.model.max_seq_len
    if not get_system(system).has_kv_cache_manager:
        if n > 1 or beam_width > 1 or prefix_caching:
            raise ValueError(f"{system!r} batches whole single-sequence requests: no parallel sampling, beam "
                             "search or prefix caching")
        return simulate_static_batching(trace, cost, slots // max_len)
    cpu_blocks = CPU_SWAP_BYTES * cost.server.num_gpus // (cost.model.kv_bytes_per_token * block_size)
    manager = make_kv_manager(system, slots, block_size=block_size, max_seq_len=max_len, num_cpu_blocks=cpu_blocks,
                              enable_prefix_caching=prefix_caching)
    return simulate(trace, manager, cost, preemption_mode=preemption, record_memory=False,
                    max_num_batched_tokens=max(2048, max_len), on_finish=on_finish, n=n, beam_width=beam_width,
                    shared_prefix="tokens" if prefix_caching else "reserved", record_sharing=record_sharing)


def metrics(result: ServingResult) -> dict[str, float]:
    """Latency, throughput and batch of a finished run (module docstring); times in seconds.

    Raises:
        ValueError: if a request did not finish.
    """
    groups = result.groups
    running = sum(g.finished_time - g.first_scheduled_time for g in groups) / len(groups)
    return {**request_metrics(groups, result.duration), "avg_batched_requests": result.avg_batched_requests,
            "avg_decode_batched_requests": result.avg_decode_batched_requests,
            "time_avg_batched_requests": result.time_avg_batched_requests, "mean_running_seconds": running,
            "num_preemptions": result.num_preemptions, "num_iterations": result.num_iterations,
            "prefill_tokens": result.prefill_tokens,
            "recomputed_share": result.recomputed_tokens / result.prefill_tokens if result.prefill_tokens else 0.0,
            "seconds_per_iteration": result.busy_seconds / result.num_iterations if result.num_iterations else 0.0,
            "duration": result.duration}


def _served(requests, system, cost, block_size, preemption, latency_cap, groups, record_sharing):
    """One run: ``(metrics + first_half_latency [+ sharing], stopped_early)``; a run stopped at
    ``latency_cap`` has only its latency bound (the other metrics are unknown)."""
    bound = LatencyBound(requests, latency_cap) if latency_cap is not None else None  # arrival times, output lengths
    try:
        result = run_system(requests, system, cost, block_size=block_size, preemption=preemption, on_finish=bound,
                            record_sharing=record_sharing, **groups)
    except LatencyCapExceeded as stop:
        return {"normalized_latency": stop.bound, "first_half_latency": math.nan}, True
    out = {**metrics(result), "first_half_latency": convergence(result.groups)[0]}
    if record_sharing:
        sharing = result.sharing
        iterations = max(sharing.iterations, 1)
        out.update(kv_sharing_saving=sharing.saving, kv_blocks_in_use_mean=sharing.blocks_in_use / iterations,
                   kv_blocks_without_sharing_mean=sharing.blocks_without_sharing / iterations)
    return out, False


def simulate_point(model: str = "opt-13b", trace: str = "sharegpt", system: str = "paged", rate: float = 2.0,
                   num_requests: int | None = None, seed: int = 0, block_size: int = 16,
                   preemption: str = "recompute", *, cpu_scale: float = 1.0, min_duration: float | None = None,
                   duration_scale: float = 1.0, latency_cap: float | None = None,
                   extend_below: float = max(THRESHOLDS), n: int = 1, beam_width: int = 1,
                   prefix_caching: bool = False, record_sharing: bool | None = None,
                   tokenizer: str = "gpt2") -> dict:
    """One simulated serving run of ``trace`` at ``rate`` requests/s.

    Args:
        num_requests: None (default): a paper-length run (module docstring): at least
            ``min_duration`` s of arrivals (default the paper's, :func:`paper_duration`) and about
            :data:`~paged.experiments.run_length.MIN_REQUESTS` requests (:func:`run_duration`), doubled
            once if the latency has not converged and is at most ``extend_below`` (s/token)
            (:data:`paged.experiments.run_length.MAX_DURATION_FACTOR`). An int: exactly that many requests (:func:`paged.workloads.get_trace`), no check.
            With ``rate=inf``: the saturated-throughput run (default :data:`SATURATED_REQUESTS`).
        cpu_scale: factor on the cost model's host costs.
        duration_scale: with ``min_duration`` None, the floor is this × the paper's length.
        latency_cap: stop a run once its mean normalized latency is sure to exceed this (s/token);
            the row then has that lower bound and ``stopped_early``.
        n, beam_width, prefix_caching: as :func:`run_system`.
        record_sharing: measure the KV blocks saved by sharing (the run then steps one iteration at a
            time; same results); None: when something can be shared (``n`` or ``beam_width`` above 1, a
            trace with shared prefixes, prefix caching).
        tokenizer: the committed counts of a named trace (:func:`paged.workloads.get_trace`).

    Returns:
        The inputs plus :func:`metrics` (``normalized_latency`` s/token, ``ttft``/``tpot`` s,
        ``throughput_rps``, ``avg_batched_requests``, ``num_preemptions``, ...), ``arrival_seconds``
        (arrivals simulated), ``converged``, ``first_half_latency`` (mean normalized latency of the
        first half of arrivals), ``stopped_early`` and ``sim_wall_seconds``; when sharing is
        measured, also ``kv_sharing_saving`` (the fraction of the blocks the sequences would hold
        without sharing that they did not hold, over all iterations, §6.3), ``kv_blocks_in_use_mean``
        and ``kv_blocks_without_sharing_mean`` (blocks per iteration). Same inputs, same numbers
        (but the wall time).

    Raises:
        ValueError: for unknown names or bad numbers.
    """
    if system not in SYSTEMS:  # before the registry's lookup, whose list also has the engine-only systems
        raise ValueError(f"unknown system {system!r} for the simulator; choose one of {SYSTEMS}")
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not rate > 0:  # NaN fails too
        raise ValueError(f"rate must be a number > 0 requests/s (or inf), got {rate!r}")
    if isinstance(block_size, bool) or not isinstance(block_size, numbers.Integral) or block_size < 1:
        raise ValueError(f"block_size must be an integer ≥ 1 (tokens), got {block_size!r}")
    if latency_cap is not None and (isinstance(latency_cap, bool) or not isinstance(latency_cap, numbers.Real)
                                    or not latency_cap > 0):
        raise ValueError(f"latency_cap must be a number > 0 s/token (or None), got {latency_cap!r}")
    if min_duration is None and not (isinstance(duration_scale, numbers.Real) and duration_scale > 0):
        raise ValueError(f"duration_scale must be a number > 0 (× the paper's trace length), got {duration_scale!r}")
    if num_requests is not None and (isinstance(num_requests, bool) or not isinstance(num_requests, numbers.Integral)
                                     or num_requests < 1):
        raise ValueError(f"num_requests must be an integer ≥ 1 (or None: a paper-length run), got {num_requests!r}")
    cost = cost_model_for(model, system, block_size, cpu_scale)  # built outside the timed region
    row = {"model": cost.model.name, "trace": str(trace), "system": system, "rate": rate, "seed": seed,
           "block_size": block_size, "preemption": preemption, "cpu_scale": cpu_scale,
           "min_duration": math.nan, "num_requests": num_requests, "n": n, "beam_width": beam_width,
           "prefix_caching": prefix_caching, "tokenizer": tokenizer}
    if not isinstance(prefix_caching, bool) or not (record_sharing is None or isinstance(record_sharing, bool)):
        raise ValueError(f"prefix_caching must be True or False and record_sharing True, False or None, got "
                         f"{prefix_caching!r} and {record_sharing!r}")
    groups = dict(n=n, beam_width=beam_width, prefix_caching=prefix_caching)
    start = time.perf_counter()
    if math.isinf(rate) or num_requests is not None:
        count = SATURATED_REQUESTS if num_requests is None else num_requests
        requests = (long_trace(trace, rate, count, seed, tokenizer=tokenizer) if math.isinf(rate)
                    else get_trace(trace, count, seed=seed, rate=rate, tokenizer=tokenizer))
        if record_sharing is None:
            record_sharing = _shares(requests, groups)
        out, early = _served(requests, system, cost, block_size, preemption, latency_cap, groups, record_sharing)
        row.update(num_requests=count, arrival_seconds=requests[-1].arrival_time, converged=math.nan)
    else:
        floor = paper_duration(cost.model.name) * duration_scale if min_duration is None else float(min_duration)
        if not floor > 0:
            raise ValueError(f"min_duration must be > 0 seconds, got {min_duration!r}")
        row["min_duration"] = floor
        duration = start_duration = run_duration(floor, rate)
        while True:
            requests = long_trace(trace, rate, duration, seed, tokenizer=tokenizer)
            if record_sharing is None:
                record_sharing = _shares(requests, groups)
            out, early = _served(requests, system, cost, block_size, preemption, latency_cap, groups, record_sharing)
            first, mean = out["first_half_latency"], out["normalized_latency"]
            converged = not early and abs(mean - first) <= max(CONVERGENCE_TOL * mean, CONVERGENCE_ABS_S)
            overloaded = early or (mean > extend_below and mean >= first)  # longer only raises it
            if converged or overloaded or duration >= start_duration * MAX_DURATION_FACTOR:
                break
            duration *= 2
        row.update(num_requests=len(requests), arrival_seconds=duration, converged=converged)
    row.update(out, stopped_early=early, sim_wall_seconds=time.perf_counter() - start)
    return row


#: simulate_point's defaults, for :func:`reusable` (derived from its signature, not restated).
_POINT_DEFAULTS = {name: p.default for name, p in inspect.signature(simulate_point).parameters.items()}


def _shares(requests, groups: dict) -> bool:
    """Whether a run of ``requests`` with ``groups`` settings has anything to share."""
    return groups["n"] > 1 or groups["beam_width"] > 1 or groups["prefix_caching"] or any(
        getattr(r, "prefix_len", 0) for r in requests)


def sweep(points: list[dict], workers: int = 2, desc: str = "simulate", known: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`simulate_point` for every dict of keyword arguments in ``points``, in parallel.

    Args:
        known: rows of earlier runs (:func:`sweep`, the points of :func:`sustained_rate`); a point
            whose run one of them already is (:func:`reusable`) takes that row instead of running
            again. Nothing else is cached between calls.

    Returns:
        One row per point, in the order given.
    """
    rows: list[dict | None] = [reusable(point, known) for point in points]
    todo = [i for i, row in enumerate(rows) if row is None]
    for i, row in zip(todo, run_jobs(simulate_point, [points[i] for i in todo], workers=workers, desc=desc)):
        rows[i] = row
    return pd.DataFrame(rows)


#: What makes two :func:`simulate_point` runs the same run: their rows' columns (``num_requests``
#: only when given: a paper-length row holds the count it ran).
_RUN_KEYS = ("model", "trace", "system", "rate", "seed", "block_size", "preemption", "cpu_scale", "min_duration",
             "n", "beam_width", "prefix_caching", "tokenizer")


def reusable(point: dict, known: pd.DataFrame | None) -> dict | None:
    """The row of ``known`` that is the run ``simulate_point(**point)`` would do, or None.

    A row matches when every setting of :data:`_RUN_KEYS` is the point's (defaults filled in, the
    paper-length floor from ``duration_scale``), it ran to the end (not ``stopped_early``, a latency
    that is not NaN), and its latency is at most the point's ``latency_cap`` (a run under the cap
    never stops early, so the capped run would have been the same). Runs are deterministic: the row
    is the run's. None when ``known`` is empty or lacks those columns, and for a point that sets
    ``min_duration``, ``record_sharing`` or ``extend_below`` (always run). O(rows).

    Raises:
        TypeError: for a ``known`` that is not a DataFrame, or a point with a name
            :func:`simulate_point` has no parameter for (a typo must not match another run).
    """
    if known is not None and not isinstance(known, pd.DataFrame):
        raise TypeError(f"known must be a DataFrame of earlier rows (or None), got {type(known).__name__}")
    unknown = sorted(set(point) - set(_POINT_DEFAULTS))
    if unknown:  # simulate_point would refuse them: so does the reuse, not match another run's row
        raise TypeError(f"simulate_point() has no parameter(s) {', '.join(map(repr, unknown))}")
    args = {**_POINT_DEFAULTS, **point}  # the defaults simulate_point fills in
    if known is None or len(known) == 0 or args["extend_below"] != _POINT_DEFAULTS["extend_below"] \
            or args["record_sharing"] is not None or args["min_duration"] is not None:
        return None
    model = args["model"]
    name = model.model.name if isinstance(model, CostModel) else get_cost_model(model).model.name
    count, rate = args["num_requests"], float(args["rate"])
    want = {**{key: args[key] for key in _RUN_KEYS if key in args}, "model": name, "trace": str(args["trace"]),
            "rate": rate, "cpu_scale": float(args["cpu_scale"]),
            "min_duration": math.nan if count is not None or math.isinf(rate)
            else paper_duration(name) * args["duration_scale"]}
    rows = _matching(known, {k: v for k, v in want.items() if k != "system"}, want["system"])
    if not len(rows) or not {"num_requests", "stopped_early", "normalized_latency"} <= set(rows.columns):
        return None
    if count is not None:
        rows = rows[rows["num_requests"] == count]
    rows = rows[~rows["stopped_early"].astype(bool) & rows["normalized_latency"].notna()]
    if args["latency_cap"] is not None:
        rows = rows[rows["normalized_latency"] <= args["latency_cap"]]
    if not len(rows):
        return None
    row = rows.iloc[0].to_dict()
    row["num_requests"] = int(row["num_requests"])
    return row


def _matching(known: pd.DataFrame | None, settings: dict, system: str) -> pd.DataFrame:
    """The rows of ``known`` for ``system`` with exactly ``settings`` (NaN matches NaN)."""
    if known is None or len(known) == 0 or "system" not in known.columns:
        return pd.DataFrame()
    rows = known[known["system"] == system]
    for key, value in settings.items():
        if key not in rows.columns:
            return pd.DataFrame()
        col = rows[key]
        rows = rows[col.isna()] if value is None or (isinstance(value, float) and math.isnan(value)) \
            else rows[col == value]
    return rows


def _sustained(system, settings, thresholds, rel_tol, lo, known, saturated_requests):
    """One system's saturated throughput and sustained rate at each threshold (module docstring)."""
    common = {k: v for k, v in settings.items() if k not in ("min_duration", "num_requests")}
    min_duration, count = settings["min_duration"], settings["num_requests"]
    match = {k: v for k, v in settings.items() if not (k == "num_requests" and v is None)}  # paper-length rows count theirs
    rows = _matching(known, match, system)
    saturated = _matching(known, {k: v for k, v in match.items() if k != "num_requests"} | {"min_duration": math.nan},
                          system)
    saturated = saturated[saturated["rate"] == math.inf] if len(saturated) else saturated
    if len(saturated):
        peak = saturated.iloc[0].to_dict()
    else:
        peak = simulate_point(system=system, rate=math.inf, num_requests=saturated_requests, record_sharing=False,
                              **common)
    throughput = float(peak["throughput_rps"])
    cache = {float(r["rate"]): float(r["normalized_latency"]) for _, r in rows.iterrows() if math.isfinite(r["rate"])}
    cap = max(thresholds)
    points = [] if len(saturated) else [peak]

    def latency(rate):
        if rate not in cache:
            r = simulate_point(system=system, rate=rate, num_requests=count,
                               min_duration=None if count is not None else min_duration, latency_cap=cap,
                               record_sharing=False, **common)
            cache[rate] = float(r["normalized_latency"])
            points.append(r)
        return cache[rate]

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
                   block_size: int = 16, preemption: str = "recompute", cpu_scale: float | list = 1.0,
                   min_duration: float | None = None, duration_scale: float = 1.0, workers: int = 2,
                   known: pd.DataFrame | None = None, return_points: bool = False,
                   saturated_requests: int = SATURATED_REQUESTS, num_requests: int | None = None,
                   groups: dict | None = None, tokenizer: str = "gpt2"):
    """Each system's saturated throughput and its sustained rate at each threshold, for every
    (model, trace) given (jobs in parallel over ``workers`` processes).

    The sustained rate at a threshold ``t`` (s/token) is the highest rate whose paper-length run
    (:func:`simulate_point`, extended while not converged) has normalized latency ≤ ``t``; bisection on
    ``[0, throughput]`` until the bracket is within ``rel_tol`` of its upper end (the throughput
    itself counts as failing: it cannot be served in steady state), so it is never above the
    throughput. Latency is assumed to grow with rate (every rate scales one arrival stream).
    Evaluations are shared between thresholds; runs stop early once their latency must pass the
    largest threshold.

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
        known: rows of earlier :func:`sweep` calls (and saturated runs, ``rate=inf``) with the same
            settings (``model``, ``trace``, ``seed``, ``block_size``, ``preemption``,
            ``cpu_scale``, ``min_duration``, ``num_requests``, the groups, ``tokenizer``); their
            outcomes are reused, not simulated again.
        return_points: also return the :func:`simulate_point` rows simulated here (the knee of
            each curve, for the figure; runs past the largest threshold stopped early).

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
    systems = as_names("systems", systems)
    models = as_names("model", model)
    traces = as_names("trace", trace)
    scales = list(cpu_scale) if isinstance(cpu_scale, (list, tuple)) else [cpu_scale]
    groups = {"n": 1, "beam_width": 1, "prefix_caching": False, **(groups or {})}
    jobs = []
    for m, t, scale, s in product(models, traces, scales, systems):
        floor = paper_duration(m) * duration_scale if min_duration is None else float(min_duration)
        settings = dict(model=get_cost_model(m).model.name, trace=str(t), seed=seed, block_size=block_size,
                        preemption=preemption, cpu_scale=scale,
                        min_duration=math.nan if num_requests is not None else floor,
                        num_requests=num_requests, **groups, tokenizer=tokenizer)
        jobs.append(dict(system=s, settings=settings, thresholds=thresholds, rel_tol=rel_tol, lo=lo, known=known,
                         saturated_requests=saturated_requests))
    results = run_jobs(_sustained, jobs, workers=workers, desc="sustained rate")
    table = pd.DataFrame([r for rows, _ in results for r in rows])
    if return_points:
        return table, pd.DataFrame([p for _, points in results for p in points])
    return table
