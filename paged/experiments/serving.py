"""Simulated serving of the paper's systems at paper scale: one point, sweeps, sustained rate (§6).

Systems (:data:`SYSTEMS`), all on the same :class:`~paged.sim.cost_model.CostModel` of a Table 1 server:

* ``paged``: vLLM — the iteration-level :class:`~paged.core.scheduler.Scheduler` over the paged KV cache
  manager, paged attention kernel, preemption by recomputation or swapping (§4.5).
* ``orca-oracle`` / ``orca-pow2`` / ``orca-max``: Orca — the same iteration-level scheduler over
  contiguous buddy reservations (§6.1), contiguous attention kernel.
* ``fastertransformer``: request-level (static) batching: the earliest ≤ ``B`` arrived requests
  run as one batch to completion, ``B`` as large as memory allows when every request reserves
  the maximum sequence length (§6.1). Prompts are padded to the batch's longest, every request
  stays in the batch until the longest output is done, and a request's results return when its
  batch ends (request-level scheduling, as described by Orca, Yu et al., OSDI 2022, §2.2).

FasterTransformer's loop is :func:`paged.sim.static_batching.simulate_static_batching`.

Metrics (:func:`metrics`, from :func:`paged.core.metrics.request_metrics`): normalized latency (mean of end-to-end latency ÷ output tokens,
s/token), mean time to first token, mean time per output token, throughput in requests/s and
output tokens/s, average batched requests per iteration, preemptions.

Sustained rate (:func:`sustained_rate`): the highest request rate whose normalized latency stays
at or under :data:`LATENCY_THRESHOLD` = 0.2 s/token. Why 0.2: people read about 4–5 tokens/s
(≈ 200–250 words/min at ~1.3 tokens/word), so a service slower than 0.2 s per output token falls
behind its reader; it is also 5–10× the unloaded normalized latency of every preset here
(≈ 0.025–0.04 s/token), well inside the "explosion" region of a queue past saturation, so the
rate found hardly depends on the exact value. The search is a bisection on the rate to a relative
tolerance (3% by default); the points of an earlier sweep (:func:`sweep`) can narrow its starting
bracket (``known=``), which saves simulations without changing what is measured.

Wall time: :func:`simulate_point` also returns ``sim_wall_seconds`` (:data:`WALL_TIME_COLUMNS`), the
only number here that changes between identical runs; leave it out of saved tables that must be
byte-identical on a rerun.
"""

from __future__ import annotations

import time

import pandas as pd

from paged.core.metrics import request_metrics
from paged.core.scheduler import PREEMPTION_MODES
from paged.core.serving_loop import ServingResult
from paged.experiments.sweep import run_jobs
from paged.sim.cost_model import CostModel, get_cost_model
from paged.sim.simulator import simulate
from paged.sim.static_batching import simulate_static_batching
from paged.systems import PAPER_SYSTEMS, get_system, make_kv_manager
from paged.workloads import get_trace

__all__ = ["SYSTEMS", "TRACES", "LATENCY_THRESHOLD", "CPU_SWAP_BYTES", "WALL_TIME_COLUMNS", "cost_model_for",
           "run_system", "metrics", "simulate_point", "sweep", "sustained_rate"]

#: The systems simulated here: the paper's, from the one registry (:data:`paged.systems.PAPER_SYSTEMS`).
SYSTEMS = PAPER_SYSTEMS
TRACES = ("sharegpt", "alpaca", "sharegpt-chat")
#: Normalized latency (s/token) above which a rate is not sustained (module docstring).
LATENCY_THRESHOLD = 0.2
#: CPU swap space per server for the paged system (bytes): vLLM's default ``swap_space=4`` GiB
#: per GPU, times the server's GPUs.
CPU_SWAP_BYTES = 4 * 2**30
#: Columns of :func:`simulate_point` / :func:`sweep` that measure this machine's wall time (seconds),
#: not the simulated system: they differ between identical runs.
WALL_TIME_COLUMNS = ("sim_wall_seconds",)


def cost_model_for(model: str | CostModel, system: str, block_size: int = 16) -> CostModel:
    """The cost model of ``model``'s Table 1 server as ``system`` runs it: the paged kernel at
    ``block_size`` for a system with :attr:`~paged.systems.System.paged_kernel`, else a contiguous
    kernel (and 16-token rounding of the KV capacity). A :class:`CostModel` is returned as is.

    Raises:
        ValueError: for an unknown model or system.
    """
    if isinstance(model, CostModel):
        return model
    paged_kernel = get_system(system).paged_kernel
    return get_cost_model(model, block_size=block_size if paged_kernel else 16, paged_kernel=paged_kernel)


def run_system(trace, system: str, model: str | CostModel = "opt-13b", *, block_size: int = 16,
               preemption: str = "recompute", n: int = 1, beam_width: int = 1, prefix_caching: bool = False,
               record_sharing: bool = False) -> ServingResult:
    """Serve ``trace`` with one of :data:`SYSTEMS` on a Table 1 server.

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
    cost = cost_model_for(model, system, block_size)
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
                    max_num_batched_tokens=max(2048, max_len), n=n, beam_width=beam_width,
                    shared_prefix="tokens" if prefix_caching else "reserved", record_sharing=record_sharing)


def metrics(result: ServingResult) -> dict[str, float]:
    """Latency and throughput of a finished run (module docstring); times in seconds.

    Raises:
        ValueError: if a request did not finish.
    """
    return {**request_metrics(result.groups, result.duration), "avg_batched_requests": result.avg_batched_requests,
            "num_preemptions": result.num_preemptions, "num_iterations": result.num_iterations,
            "duration": result.duration}


def simulate_point(model: str = "opt-13b", trace: str = "sharegpt", system: str = "paged", rate: float = 2.0,
                   num_requests: int = 1000, seed: int = 0, block_size: int = 16,
                   preemption: str = "recompute", n: int = 1, beam_width: int = 1, prefix_caching: bool = False,
                   record_sharing: bool | None = None) -> dict:
    """One simulated serving run: ``num_requests`` of ``trace`` at ``rate`` requests/s.

    Args:
        n, beam_width, prefix_caching: as :func:`run_system`.
        record_sharing: measure the KV blocks saved by sharing (the run then steps one iteration at a
            time; same results); None: when something can be shared (``n`` or ``beam_width`` above 1, a
            trace with shared prefixes, prefix caching).

    Returns:
        The inputs plus :func:`metrics` (``normalized_latency`` s/token, ``ttft``/``tpot`` s,
        ``throughput_rps``, ``throughput_tps``, ``avg_batched_requests``, ``num_preemptions``,
        ...) and ``sim_wall_seconds`` (wall time of the simulation itself); when sharing is measured,
        also ``n``, ``beam_width``, ``prefix_caching`` and the KV blocks saved by sharing:
        ``kv_sharing_saving`` (the fraction of the blocks the sequences would hold without sharing
        that they did not hold, over all iterations, §6.3), ``kv_blocks_in_use_mean`` and
        ``kv_blocks_without_sharing_mean`` (blocks per iteration). Same seed, same numbers (except
        the wall time).

    Raises:
        ValueError: for unknown names or bad numbers.
    """
    requests = get_trace(trace, num_requests, seed=seed, rate=rate)
    cost = cost_model_for(model, system, block_size)  # built outside the timed region
    if record_sharing is None:
        record_sharing = n > 1 or beam_width > 1 or prefix_caching or any(
            getattr(r, "prefix_len", 0) for r in requests)
    start = time.perf_counter()
    result = run_system(requests, system, cost, block_size=block_size, preemption=preemption, n=n,
                        beam_width=beam_width, prefix_caching=prefix_caching, record_sharing=record_sharing)
    wall = time.perf_counter() - start
    row = {"model": cost.model.name, "trace": trace, "system": system, "rate": rate, "num_requests": num_requests,
           "seed": seed, "block_size": block_size, "preemption": preemption}
    if record_sharing:
        sharing = result.sharing
        iterations = max(sharing.iterations, 1)
        row.update(n=n, beam_width=beam_width, prefix_caching=prefix_caching, **metrics(result),
                   kv_sharing_saving=sharing.saving, kv_blocks_in_use_mean=sharing.blocks_in_use / iterations,
                   kv_blocks_without_sharing_mean=sharing.blocks_without_sharing / iterations)
    else:
        row.update(metrics(result))
    row["sim_wall_seconds"] = wall
    return row


def sweep(points: list[dict], workers: int = 2, desc: str = "simulate") -> pd.DataFrame:
    """:func:`simulate_point` for every dict of keyword arguments in ``points``, in parallel
    (:func:`paged.experiments.sweep.run_jobs`: this machine's processes, or a Dask / Ray cluster).

    Nothing is cached between calls. Returns one row per point, in the order given.
    """
    return pd.DataFrame(run_jobs(simulate_point, points, workers=workers, desc=desc))


def _sustained(model, trace, system, lo, hi, num_requests, seed, block_size, preemption, threshold, rel_tol,
               lo_ok=None, hi_ok=None, groups=None):
    """Bisection of one system's sustained rate; ``lo_ok``/``hi_ok`` are already known outcomes;
    ``groups``: :func:`simulate_point`'s ``n``, ``beam_width``, ``prefix_caching``."""
    groups = groups or {}

    def ok(rate):
        return simulate_point(model, trace, system, rate, num_requests, seed, block_size, preemption,
                              record_sharing=False, **groups)["normalized_latency"] <= threshold

    censored = ok(hi) if hi_ok is None else hi_ok
    if censored:
        lo = hi
    elif not (ok(lo) if lo_ok is None else lo_ok):
        hi = lo
        lo = 0.0
    while hi - lo > rel_tol * hi and not censored:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return {"model": model, "trace": trace, "system": system, **groups, "sustained_rate": lo,
            "censored_at_max": censored, "threshold": threshold}


def _bracket(known: pd.DataFrame | None, system: str, lo: float, hi: float, threshold: float,
             settings: dict) -> dict:
    """Narrow ``[lo, hi]`` for ``system`` with the matching rows of ``known`` (see sustained_rate)."""
    out = {"lo": lo, "hi": hi, "lo_ok": None, "hi_ok": None}
    if known is None or len(known) == 0:
        return out
    rows = known[known["system"] == system]
    for key, value in settings.items():
        rows = rows[rows[key] == value] if key in rows.columns else rows.iloc[0:0]
    rows = rows[(rows["rate"] >= lo) & (rows["rate"] <= hi)]
    if len(rows) == 0:
        return out
    ok = rows["normalized_latency"] <= threshold
    failing = rows.loc[~ok, "rate"]
    if len(failing):
        out.update(hi=float(failing.min()), hi_ok=False)
        if out["hi"] <= lo:  # even lo fails: the bisection goes on below lo
            out["lo_ok"] = False
            return out
    elif (rows.loc[ok, "rate"] == hi).any():
        out["hi_ok"] = True
    passing = rows.loc[ok & (rows["rate"] < out["hi"]), "rate"]
    if len(passing):
        out.update(lo=float(passing.max()), lo_ok=True)
    return out


def sustained_rate(systems, *, model: str = "opt-13b", trace: str = "sharegpt", lo: float = 0.05,
                   hi: float = 8.0, num_requests: int = 1000, seed: int = 0, block_size: int = 16,
                   preemption: str = "recompute", threshold: float = LATENCY_THRESHOLD,
                   rel_tol: float = 0.03, workers: int = 2, known: pd.DataFrame | None = None,
                   groups: dict | None = None) -> pd.DataFrame:
    """Each system's sustained rate: the highest rate (requests/s) with normalized latency
    ≤ ``threshold`` (s/token), by bisection on ``[lo, hi]`` until the bracket is within
    ``rel_tol`` of its upper end (systems in parallel over ``workers`` processes).

    Assumes latency grows with rate (arrivals at every rate come from the same seed, scaled).
    A system that sustains ``hi`` is reported as ``hi`` with ``censored_at_max`` (its true
    sustained rate is at least that).

    Args:
        systems: names from :data:`SYSTEMS`.
        known: optional rows of an earlier :func:`sweep` (columns ``system``, ``rate``,
            ``normalized_latency`` and the settings ``model``, ``trace``, ``num_requests``,
            ``seed``, ``block_size``, ``preemption``). Rows with the same settings start the
            bisection from the tightest bracket they give (the lowest failing rate in
            ``[lo, hi]`` and the highest passing rate below it), so those rates are not simulated
            again. Rows with other settings are ignored. The stopping rule is unchanged.
        groups: sequence-group settings passed to :func:`simulate_point` (``n``, ``beam_width``,
            ``prefix_caching``; §6.3, §6.4); they are also settings ``known`` rows must match.

    Returns:
        One row per system: ``model``, ``trace``, ``system``, ``sustained_rate`` (requests/s),
        ``censored_at_max``, ``threshold`` (s/token).

    Raises:
        ValueError: if ``lo`` is not in ``(0, hi)`` or ``rel_tol`` is not in ``(0, 1)``; from
            :func:`simulate_point` for unknown names.
    """
    if not 0 < lo < hi:
        raise ValueError(f"need 0 < lo < hi, got lo={lo}, hi={hi}")
    if not 0 < rel_tol < 1:
        raise ValueError(f"rel_tol must be in (0, 1), got {rel_tol}")
    groups = dict(groups or {})
    settings = dict(model=model, trace=trace, num_requests=num_requests, seed=seed, block_size=block_size,
                    preemption=preemption, **groups)
    jobs = [dict(model=model, trace=trace, system=s, num_requests=num_requests, seed=seed, block_size=block_size,
                 preemption=preemption, threshold=threshold, rel_tol=rel_tol, groups=groups,
                 **_bracket(known, s, lo, hi, threshold, settings))
            for s in systems]
    return pd.DataFrame(run_jobs(_sustained, jobs, workers=workers, desc=f"sustained rate ({trace})"))
