"""Poisson arrivals (§6.1)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from paged.workloads import poisson_arrivals


def test_poisson_arrivals_mean_gap_and_determinism():
    rate, n = 4.0, 20_000
    t = poisson_arrivals(n, rate, seed=7)
    assert t.dtype == np.float64 and t.shape == (n,)
    assert np.all(np.diff(t) >= 0) and t[0] > 0  # the first arrival comes after the first gap
    gaps = np.diff(np.concatenate([[0.0], t]))
    # exponential gaps: std = mean = 1/rate, so the sample mean is within 5 standard errors
    assert abs(gaps.mean() - 1 / rate) < 5 * (1 / rate) / math.sqrt(n)
    np.testing.assert_array_equal(t, poisson_arrivals(n, rate, seed=7))
    assert not np.array_equal(t, poisson_arrivals(n, rate, seed=8))
    np.testing.assert_array_equal(poisson_arrivals(5, float("inf"), seed=0), np.zeros(5))
    assert poisson_arrivals(0, 1.0, seed=0).shape == (0,)


@pytest.mark.parametrize("rate", [0, -1.0, float("nan")])
def test_poisson_arrivals_bad_rate(rate):
    with pytest.raises(ValueError, match="rate"):
        poisson_arrivals(3, rate, seed=0)
