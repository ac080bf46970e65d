"""The cost model fitted to an engine profile (paged.sim.linear_cost)."""

import numpy as np
import pandas as pd
import pytest

from paged.core.scheduler import SchedulerOutputs
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus
from paged.sim.linear_cost import LinearCostModel


def _steps(model, rng):
    rows = []
    for _ in range(40):
        n, ctx = int(rng.integers(1, 128)), int(rng.integers(1, 200))
        rows.append({"is_prefill": False, "num_seqs": n, "num_tokens": n, "context_tokens": n * ctx,
                     "sum_sq_tokens": 0, "seconds": model.decode_time(n, n * ctx)})
        lens = [int(x) for x in rng.integers(1, 600, size=int(rng.integers(1, 4)))]
        rows.append({"is_prefill": True, "num_seqs": len(lens), "num_tokens": sum(lens), "context_tokens": 0,
                     "sum_sq_tokens": sum(p * p for p in lens), "seconds": model.prefill_time(lens)})
    return pd.DataFrame(rows)


def test_fit_recovers_the_coefficients_of_exact_data():
    truth = LinearCostModel((3e-3, 2e-4, 1e-6), (2e-3, 1e-3, 5e-5, 1e-8))
    fitted = LinearCostModel.fit(_steps(truth, np.random.default_rng(0)))
    assert np.allclose(fitted.decode, truth.decode, rtol=1e-6) and np.allclose(fitted.prefill, truth.prefill, rtol=1e-6)
    assert np.abs(fitted.relative_errors(_steps(truth, np.random.default_rng(1)))).max() < 1e-6


def test_fit_keeps_coefficients_nonnegative():
    truth = LinearCostModel((3e-3, 2e-4, 0.0), (2e-3, 1e-3, 5e-5, 0.0))
    steps = _steps(truth, np.random.default_rng(2))
    steps["seconds"] *= np.random.default_rng(3).uniform(0.9, 1.1, len(steps))  # noise
    fitted = LinearCostModel.fit(steps)
    assert min(fitted.decode) >= 0 and min(fitted.prefill) >= 0
    assert np.median(np.abs(fitted.relative_errors(steps))) < 0.1


def test_call_dispatches_like_the_gpu_model():
    cost = LinearCostModel((1.0, 0.1, 0.001), (2.0, 0.5, 0.01, 0.0), swap_per_block=0.25)
    group = SequenceGroup(0, 0.0, [Sequence(0, 100, num_generated=5, status=SequenceStatus.RUNNING)], 50)
    assert cost(SchedulerOutputs([group], is_prefill=False)) == pytest.approx(1.0 + 0.1 + 0.105)
    assert cost(SchedulerOutputs([group], is_prefill=True)) == pytest.approx(2.0 + 0.5 + 1.05)
    swapped = SchedulerOutputs([group], is_prefill=False, blocks_to_swap_out=[(0, 0), (1, 1)])
    assert cost(swapped) == pytest.approx(1.205 + 0.5)


def test_fit_needs_both_kinds_of_steps():
    with pytest.raises(ValueError, match="prefill and decode"):
        LinearCostModel.fit([{"is_prefill": False, "num_seqs": 1, "num_tokens": 1, "context_tokens": 5,
                              "sum_sq_tokens": 0, "seconds": 0.01}])
    with pytest.raises(ValueError, match="positive"):
        LinearCostModel.fit([])


def test_scaled_multiplies_every_time_and_refuses_a_bad_factor():
    cost = LinearCostModel((1.0, 0.1, 0.001), (2.0, 0.5, 0.01, 1e-4), swap_per_block=0.25)
    slow = cost.scaled(1.5)
    assert slow.decode_time(7, 300) == pytest.approx(1.5 * cost.decode_time(7, 300))
    assert slow.prefill_time([40, 9]) == pytest.approx(1.5 * cost.prefill_time([40, 9]))
    assert slow.swap_time(4) == pytest.approx(1.5 * cost.swap_time(4))
    for bad in (0, -1.0, float("inf"), float("nan"), "2"):
        with pytest.raises(ValueError, match="factor"):
            cost.scaled(bad)


def test_scaled_takes_numpy_numbers_and_refuses_an_overflow():
    cost = LinearCostModel((1.0, 0.1, 0.001), (2.0, 0.5, 0.01, 1e-4))
    for factor in (np.float32(1.5), np.int64(2), 2):
        assert cost.scaled(factor).decode_time(1, 0) == pytest.approx(float(factor) * 1.1)
        assert all(type(v) is float for v in cost.scaled(factor).decode)
    for bad in (True, None, [2.0]):
        with pytest.raises(ValueError, match="factor"):
            cost.scaled(bad)
    with pytest.raises(ValueError, match="infinite"):
        LinearCostModel((1e300, 0.0, 0.0), (1.0, 0.0, 0.0, 0.0)).scaled(1e10)
