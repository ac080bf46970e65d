"""One simulated serving run of the paper's systems at paper scale and its metrics (§6).

Systems (:data:`SYSTEMS`), all on the same :class:`~paged.sim.cost_model.CostModel` of a Table 1 server:

* ``paged``: vLLM — the iteration-level :class:`~paged.core.scheduler.Scheduler` over the paged KV cache
  manager, paged attention kernel, preemption by recomputation or swapping (§4.5).
* ``orca-oracle`` / ``orca-pow2`` / ``orca-max``: Orca — the same iteration-level scheduler over
  contiguous buddy reservations (§6.1), contiguous attention kernel.
* ``fastertransformer``: request-level (static) batching: the earliest ≤ ``B`` arrived requests
  run as one batch to completion, ``B`` as large as memory allows when every request reserves
  the maximum sequence length (§6.1); a C++ loop with sampling on the GPU, so none of the cost
  model's host (CPU) costs (:func:`cost_model_for`).

Run length (:mod:`paged.experiments.serving.run_length`): by default a point serves the paper's trace
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

Wall time: rows carry ``sim_wall_seconds`` (:data:`WALL_TIME_COLUMNS`), the only number that
changes between identical runs; leave it out of saved tables.
"""


from __future__ import annotations

import math
import numbers
import time

from paged.core.metrics import request_metrics
from paged.core.scheduler import PREEMPTION_MODES
from paged.core.serving_loop import ServingResult
from paged.experiments.serving.run_length import (CONVERGENCE_ABS_S, CONVERGENCE_TOL, MAX_DURATION_FACTOR,
                                                  LatencyBound, LatencyCapExceeded, convergence, long_trace,
                                                  paper_duration, run_duration)
from paged.sim.cost_model import CostModel, get_cost_model
from paged.sim.simulator import simulate
from paged.sim.static_batching import simulate_static_batching
from paged.systems import PAPER_SYSTEMS, get_system, make_kv_manager
from paged.workloads import get_trace

__all__ = ["SYSTEMS", "TRACES", "LATENCY_THRESHOLD", "THRESHOLDS", "SATURATED_REQUESTS", "CPU_SWAP_BYTES",
           "WALL_TIME_COLUMNS", "cost_model_for", "run_system", "metrics", "simulate_point"]

#: The systems simulated here: the paper's, from the one registry (:data:`paged.systems.PAPER_SYSTEMS`).
SYSTEMS = PAPER_SYSTEMS
TRACES = ("sharegpt", "alpaca", "sharegpt-chat")
#: Normalized latency (s/token) above which a rate is not sustained (:mod:`paged.experiments.serving.sustained`).
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
        record_sharing: record KV blocks with and without sharing (``result.sharing``; by the simulator's
            calendars where they apply, otherwise the run steps one iteration at a time).

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
    return simulate(trace, manager, cost, preemption_mode=preemption, record_memory=False, max_seq_len=max_len,
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
            :data:`~paged.experiments.serving.run_length.MIN_REQUESTS` requests (:func:`run_duration`), doubled
            once if the latency has not converged and is at most ``extend_below`` (s/token)
            (:data:`paged.experiments.serving.run_length.MAX_DURATION_FACTOR`). An int: exactly that many requests (:func:`paged.workloads.get_trace`), no check.
            With ``rate=inf``: the saturated-throughput run (default :data:`SATURATED_REQUESTS`).
        cpu_scale: factor on the cost model's host costs.
        duration_scale: with ``min_duration`` None, the floor is this × the paper's length.
        latency_cap: stop a run once its mean normalized latency is sure to exceed this (s/token);
            the row then has that lower bound and ``stopped_early``.
        n, beam_width, prefix_caching: as :func:`run_system`.
        record_sharing: measure the KV blocks saved by sharing (recorded at every iteration, by the
            simulator's calendars where they apply, otherwise one iteration at a time; same results); None:
            when something can be shared (``n`` or ``beam_width`` above 1, a trace with shared prefixes,
            prefix caching).
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


def _shares(requests, groups: dict) -> bool:
    """Whether a run of ``requests`` with ``groups`` settings has anything to share."""
    return groups["n"] > 1 or groups["beam_width"] > 1 or groups["prefix_caching"] or any(
        getattr(r, "prefix_len", 0) for r in requests)
