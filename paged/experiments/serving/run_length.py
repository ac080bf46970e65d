"""Paper-length serving runs (§6.1): traces as long as the paper's, a convergence check, an early stop.

The paper serves 1-hour traces at each request rate (15 minutes for OPT-175B). A short trace
measures the fastest system in a transient: overloaded for a short time, its queue has not yet
grown, so a rate above its own peak throughput can look sustained. Here:

* :func:`long_trace`: every request that arrives in ``[0, duration)`` seconds of a Poisson process
  at ``rate``. Arrivals come from one unit-rate stream scaled by ``1 / rate`` and lengths from one
  stream of shuffled passes over the named trace (each request used once per pass), both fixed by
  the seed, so a longer run or another rate extends or rescales the same requests: latency vs rate
  is a smooth curve, and the bisection of :mod:`paged.experiments.serving` compares like with like.
* :data:`MIN_REQUESTS`: at a rate so low that the paper's length holds only a handful of requests
  (OPT-175B at 0.002 req/s: 2 requests in 15 minutes), the run is lengthened to hold about this many,
  so the mean is an average over requests, not the luck of a few (a request-level batch's latency
  depends on which requests share it).
* :func:`convergence`: a run has converged when the mean normalized latency of the requests that
  arrived in its first half is within :data:`CONVERGENCE_TOL` (relative) or
  :data:`CONVERGENCE_ABS_S` (absolute, s/token) of the mean over all of them, whichever is larger
  (the running mean no longer moves by an amount that matters against the thresholds). A run that has not converged is doubled, up to
  :data:`MAX_DURATION_FACTOR` × the paper's length, unless it is already above every threshold and
  still rising (overloaded: a longer run only raises it further).
* :class:`LatencyBound`: a lower bound on a run's final mean normalized latency while it runs
  (finished requests exactly, unfinished ones at least their time so far); a run whose bound passes
  a cap stops early, so an overloaded point does not simulate hours of draining.
"""

from __future__ import annotations

import bisect
import math
import numbers

import numpy as np

from paged.sim.model_spec import get_model
from paged.sim.simulator import gc_paused
from paged.workloads import get_trace
from paged.workloads.trace import Trace

__all__ = ["run_length_table", "PAPER_DURATION_S", "MIN_REQUESTS", "CONVERGENCE_TOL", "CONVERGENCE_ABS_S", "MAX_DURATION_FACTOR", "paper_duration", "run_duration",
           "capped_duration_scale",
           "long_trace",
           "convergence", "LatencyBound", "LatencyCapExceeded"]

#: The paper's trace length (§6.1): 1 hour of arrivals; 15 minutes for OPT-175B.
PAPER_DURATION_S = {"default": 3600.0, "opt-175b": 900.0}
#: Fewest requests (expected) of a paper-length run: its arrivals last at least this ÷ the rate.
MIN_REQUESTS = 500
#: Relative tolerance of the convergence check (module docstring): 10%.
CONVERGENCE_TOL = 0.10
#: Absolute tolerance of the convergence check (s/token): a tenth of the smallest threshold
#: (:data:`paged.experiments.serving.THRESHOLDS`), so a move below it cannot flip a decision by much.
CONVERGENCE_ABS_S = 0.01
#: A run that has not converged is doubled, up to this many times the paper's length (one doubling:
#: a point near the knee costs 1 + 2 paper lengths of simulation).
MAX_DURATION_FACTOR = 2
#: Arrivals are drawn in chunks of this many gaps (any count gives the same prefix).
_CHUNK = 4096


def paper_duration(model: str) -> float:
    """The paper's trace length for ``model`` (seconds of arrivals)."""
    return PAPER_DURATION_S.get(str(model).lower(), PAPER_DURATION_S["default"])


def capped_duration_scale(max_requests: int, rate: float, model: str, scale: float = 1.0) -> float:
    """The ``duration_scale`` (× the paper's trace length) of a run at ``rate`` req/s that lasts
    ``scale`` × the paper's length but holds about ``max_requests`` requests at most:
    ``min(scale, max_requests / (rate × paper_duration(model)))``.

    For runs that compare settings at one fixed load (Fig. 18b, 19b) rather than locate a knee: the
    mean latency's sample is the requests served, and an hour of Alpaca at 45 req/s is 163,000 of them.
    Such a run is still doubled while its latency has not converged (:func:`~paged.experiments.serving.simulate_point`).

    Raises:
        ValueError: for ``max_requests`` < 1, a ``rate`` or ``scale`` that is not a finite number > 0, or
            an unknown model (:func:`paged.sim.model_spec.get_model`).
    """
    if isinstance(max_requests, bool) or not isinstance(max_requests, numbers.Integral) or max_requests < 1:
        raise ValueError(f"max_requests must be an integer ≥ 1, got {max_requests!r}")
    for name, value in (("rate", rate), ("scale", scale)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    get_model(model)  # an unknown name is refused (paper_duration alone would fall back to an hour)
    return min(float(scale), max_requests / (rate * paper_duration(model)))


def run_duration(floor: float, rate: float) -> float:
    """Seconds of arrivals of a run at ``rate`` req/s whose length is at least ``floor`` s and holds
    about :data:`MIN_REQUESTS` requests or more (module docstring)."""
    return max(float(floor), MIN_REQUESTS / rate)


def long_trace(trace: str, rate: float, duration: float, seed: int = 0, *, tokenizer: str = "gpt2") -> Trace:
    """The requests of ``trace`` that arrive in ``[0, duration)`` s at ``rate`` req/s (module docstring).

    Args:
        trace: a name (or path) of :func:`paged.workloads.get_trace`; its requests are the pool.
        rate: Poisson rate (requests/s, > 0), or ``inf``: all requests arrive at t = 0 (the
            saturated-throughput run), and ``duration`` is read as the number of requests.
        duration: seconds of arrivals (> 0), or the request count when ``rate`` is ``inf``.
        seed: fixes the arrival stream and the order of the lengths.
        tokenizer: the committed counts of a named trace (:func:`get_trace`; GPT-2's BPE: OPT's).

    Returns:
        A :class:`~paged.workloads.Trace`, requests in arrival order, ids 0..n-1.

    Raises:
        ValueError: a non-positive rate or duration, an empty pool; as :func:`get_trace`.
    """
    if not rate > 0 or not duration > 0 or math.isnan(duration):
        raise ValueError(f"rate and duration must be > 0, got rate={rate}, duration={duration}")
    pool = get_trace(trace, None, seed=seed, tokenizer=tokenizer)
    if len(pool) == 0:
        raise ValueError(f"trace {trace!r} has no requests")
    if math.isinf(rate):
        times = np.zeros(int(duration))
    else:
        rng = np.random.default_rng([seed, 0])
        unit, horizon = [], rate * duration
        total = 0.0
        while total < horizon:
            chunk = np.cumsum(rng.standard_exponential(_CHUNK)) + total
            unit.append(chunk)
            total = float(chunk[-1])
        arrivals = np.concatenate(unit)
        times = arrivals[arrivals < horizon] / rate
    n = len(times)
    rng = np.random.default_rng([seed, 1])
    order = np.concatenate([rng.permutation(len(pool)) for _ in range(n // len(pool) + 1)])[:n].tolist()
    reqs = pool.requests
    with gc_paused():  # one Request per arrival (163,000 for an hour of Alpaca at 45 req/s), no cycles
        return Trace.from_lengths([reqs[i].prompt_len for i in order], [reqs[i].output_len for i in order],
                                  name=pool.name, source=pool.source, arrival_times=times,
                                  prefix_lens=[reqs[i].prefix_len for i in order])


def convergence(groups) -> tuple[float, float]:
    """``(mean normalized latency of the first half of arrivals, of all)`` of finished groups (s/token)."""
    ordered = sorted(groups, key=lambda g: g.arrival_time)
    lat = np.array([(g.finished_time - g.arrival_time) / g.output_len for g in ordered])
    half = max(1, len(lat) // 2)
    return float(lat[:half].mean()), float(lat.mean())


class LatencyCapExceeded(Exception):
    """Raised by :class:`LatencyBound` when the bound passes the cap (the run stops)."""

    def __init__(self, bound: float) -> None:
        super().__init__(f"mean normalized latency ≥ {bound:.3g} s/token")
        self.bound = bound


class LatencyBound:
    """Running lower bound on the final mean normalized latency of ``groups`` (s/token).

    Pass it as the simulator's ``on_finish``: after each iteration it adds the groups that finished
    (exact latencies) and bounds every request that has arrived but not finished by its time so far;
    requests still to arrive count 0. O(finished + log n) per call.

    Args:
        groups: the run's requests (``arrival_time`` s, ``output_len`` tokens).
        cap: raise :class:`LatencyCapExceeded` once the bound exceeds it (s/token).
    """

    def __init__(self, groups, cap: float) -> None:
        ordered = sorted(groups, key=lambda g: g.arrival_time)
        self.arrivals = [g.arrival_time for g in ordered]
        inv = np.array([1.0 / g.output_len for g in ordered])
        self.inv_prefix = np.concatenate([[0.0], np.cumsum(inv)])  # Σ 1/o over the first k arrivals
        self.arr_prefix = np.concatenate([[0.0], np.cumsum(inv * np.array(self.arrivals))])  # Σ a/o
        self.n = len(ordered)
        self.cap = cap
        self.done = self.done_inv = self.done_arr = 0.0

    def bound(self, now: float) -> float:
        """The lower bound at clock ``now`` (s/token)."""
        k = bisect.bisect_right(self.arrivals, now)
        pending = now * (self.inv_prefix[k] - self.done_inv) - (self.arr_prefix[k] - self.done_arr)
        return (self.done + pending) / self.n

    def __call__(self, finished) -> None:
        for g in finished:
            inv = 1.0 / g.output_len
            self.done += (g.finished_time - g.arrival_time) * inv
            self.done_inv += inv
            self.done_arr += g.arrival_time * inv
        value = self.bound(finished[0].finished_time)
        if value > self.cap:
            raise LatencyCapExceeded(value)


def run_length_table(figures: dict) -> "pd.DataFrame":
    """How long each figure's runs were: per figure, the finite-rate runs, their arrival span
    (seconds of arrivals, min–max), requests served (min–max) and how many converged or stopped early.

    Args:
        figures: figure label -> rows of :func:`paged.experiments.serving.simulate_point` (a
            DataFrame with ``rate``, ``arrival_seconds``, ``converged``, ``stopped_early`` and
            ``num_requests``, the requests each run served).

    Returns:
        One row per figure: ``figure``, ``runs``, ``arrival span (s)``, ``requests``, ``converged``,
        ``stopped early`` (counts; a stopped run has no convergence check).
    """
    import pandas as pd

    rows = []
    for label, df in figures.items():
        df = df[df["rate"].astype(float).map(math.isfinite)] if len(df) else df
        if not len(df):
            continue
        served = df["num_requests"] if "num_requests" in df and df["num_requests"].notna().all() else None
        span = df["arrival_seconds"].astype(float)
        rows.append({"figure": label, "runs": len(df), "arrival span (s)": f"{span.min():.0f}–{span.max():.0f}",
                     "requests": "n/a" if served is None else f"{int(served.min())}–{int(served.max())}",
                     "converged": int(df["converged"].astype(bool).sum()),
                     "stopped early": int(df["stopped_early"].astype(bool).sum()) if "stopped_early" in df else 0})
    return pd.DataFrame(rows)
