"""Synthetic Alpaca-like lengths: only the paper's means matched (§6.1, Fig. 11b).

Kept under its own name (``"alpaca-synthetic"``) for comparison with the real Alpaca trace.
"""

from __future__ import annotations

import math

import numpy as np

from paged.workloads.trace import Trace

__all__ = ["ALPACA_MEAN_PROMPT_LEN", "ALPACA_MEAN_OUTPUT_LEN", "alpaca_like"]

ALPACA_MEAN_PROMPT_LEN = 19.31  # tokens, §6.1 Fig. 11b
ALPACA_MEAN_OUTPUT_LEN = 58.45  # tokens, §6.1 Fig. 11b


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def _clipped_lognormal_mean(mu: float, sigma: float, lo: float, hi: float) -> float:
    """E[min(max(X, lo), hi)] for X ~ LogNormal(mu, sigma), in closed form."""
    a, b = (math.log(lo) - mu) / sigma, (math.log(hi) - mu) / sigma
    body = math.exp(mu + sigma * sigma / 2) * (_phi(b - sigma) - _phi(a - sigma))
    return lo * _phi(a) + body + hi * (1.0 - _phi(b))


def _solve_mu(target: float, sigma: float, lo: float, hi: float) -> float:
    """The log-mean mu whose clipped lognormal has mean ``target`` (bisection; monotone in mu)."""
    if not lo < target < hi:
        raise ValueError(f"target mean {target} must lie strictly between the clip bounds {lo} and {hi}")
    left, right = math.log(lo) - 10 * sigma, math.log(hi) + 10 * sigma
    for _ in range(200):
        mid = (left + right) / 2
        if _clipped_lognormal_mean(mid, sigma, lo, hi) < target:
            left = mid
        else:
            right = mid
    return (left + right) / 2


def alpaca_like(num_requests: int, seed: int | None, *, mean_prompt_len: float = ALPACA_MEAN_PROMPT_LEN,
                mean_output_len: float = ALPACA_MEAN_OUTPUT_LEN, prompt_sigma: float = 0.6,
                output_sigma: float = 0.9, min_len: int = 4, max_len: int = 1024) -> Trace:
    """Synthetic Alpaca-like lengths (§6.1, Fig. 11b): only the paper's MEANS are matched.

    No Alpaca data ships with this project (nor with any installed package), so the shape of
    the length distributions is a stated assumption, not a fit: each length is an independent
    lognormal (right-skewed and positive, like real instruction/answer lengths: most are short,
    a few are long) with log-space spread ``prompt_sigma=0.6`` (instructions are one or two
    sentences, moderate spread) and ``output_sigma=0.9`` (answers range from one word to
    several paragraphs, wider spread), clipped to ``[min_len, max_len]`` tokens and rounded to
    integers. Clipping moves the mean, so the log-mean ``mu`` is solved (bisection on the
    closed-form mean of the clipped lognormal) so that the clipped distribution's mean equals
    the target; the sample means then land near 19.31 / 58.45 tokens up to sampling noise
    (about ``mean * sqrt(exp(sigma^2) - 1) / sqrt(n)``) and a rounding bias well below 0.1 token.

    Args:
        num_requests: number of requests (>= 0).
        seed: ``numpy.random.default_rng`` seed; the same seed gives the same trace.

    Returns:
        a Trace named ``"alpaca_like"`` with arrival times 0.0 (use ``with_poisson_arrivals``).

    Raises:
        ValueError: ``num_requests`` < 0, a non-positive sigma, or a target mean outside the clip range.
    """
    if num_requests < 0:
        raise ValueError(f"num_requests must be >= 0, got {num_requests}")
    if prompt_sigma <= 0 or output_sigma <= 0:
        raise ValueError(f"sigmas must be > 0, got {prompt_sigma}, {output_sigma}")
    rng = np.random.default_rng(seed)
    lengths = []
    for target, sigma in ((mean_prompt_len, prompt_sigma), (mean_output_len, output_sigma)):
        mu = _solve_mu(target, sigma, min_len, max_len)
        x = np.clip(rng.lognormal(mu, sigma, size=int(num_requests)), min_len, max_len)
        lengths.append(np.rint(x).astype(np.int64))
    source = (f"synthetic: lognormal lengths clipped to [{min_len}, {max_len}] tokens, sigma "
              f"{prompt_sigma}/{output_sigma}, means matched to the paper's Alpaca "
              f"{mean_prompt_len}/{mean_output_len} (no Alpaca data used), seed {seed}")
    return Trace.from_lengths(lengths[0], lengths[1], name="alpaca_like", source=source)
