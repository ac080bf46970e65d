"""Poisson arrivals (paper §6.1: "request arrival times ... Poisson distribution").

Gaps between arrivals are independent exponentials with mean ``1 / rate``; a rate of ``inf``
puts every request at t = 0 (an offline batch, all waiting from the start).
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

__all__ = ["MIN_RATE", "poisson_arrivals"]


#: Lowest request rate accepted (requests/s). Below it, arrival times (~ num_requests / rate
#: seconds, > 1e9 s) are so large that float64 loses the sub-second latencies measured from them.
MIN_RATE = 1e-6


def poisson_arrivals(num_requests: int, rate: float, seed: int | None) -> np.ndarray:
    """Arrival times of a Poisson process (§6.1: "request arrival times ... Poisson distribution").

    Gaps between arrivals are independent exponentials with mean ``1 / rate`` seconds; the
    times are their cumulative sum, so the FIRST arrival comes after the first gap (not at 0).
    ``rate=float('inf')`` puts every arrival at 0.0 (all requests at once, an offline batch).

    Args:
        num_requests: number of arrivals (>= 0).
        rate: mean arrivals per second (> 0, may be ``inf``).
        seed: seed of ``numpy.random.default_rng``; the same seed gives the same times.

    Returns:
        float64 array of shape ``[num_requests]``, non-decreasing, in seconds.

    Raises:
        ValueError: ``rate`` <= 0, below :data:`MIN_RATE`, or NaN, or ``num_requests`` < 0.
        TypeError: ``rate`` not a real number, ``num_requests`` not an integer.
    """
    if isinstance(num_requests, bool) or not isinstance(num_requests, Integral):
        raise TypeError(f"num_requests must be an integer, got {num_requests!r}")
    if num_requests < 0:
        raise ValueError(f"num_requests must be >= 0, got {num_requests}")
    if isinstance(rate, bool) or not isinstance(rate, Real):
        raise TypeError(f"rate must be a number of requests per second, got {rate!r}")
    if math.isnan(rate) or rate <= 0:
        raise ValueError(f"rate must be > 0 requests/s (or inf), got {rate}")
    if rate < MIN_RATE:
        raise ValueError(f"rate {rate} requests/s is below {MIN_RATE}: arrival times near num_requests / rate "
                         f"seconds would swamp the float64 precision of latencies (seconds)")
    if math.isinf(rate):
        return np.zeros(int(num_requests), dtype=np.float64)
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / float(rate), size=int(num_requests))
    return np.cumsum(gaps, dtype=np.float64)
