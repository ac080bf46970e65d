"""Counters of the serving loop's result (paged.core.serving_loop): prefills, recomputation, busy time."""

import pytest

from paged.sim.cost_model import get_cost_model
from paged.sim.simulator import simulate
from paged.systems import make_kv_manager
from paged.workloads import Request


def _trace(n=40, prompt=60, output=80, gap=0.01):
    return [Request(i, prompt, output, i * gap) for i in range(n)]


def test_prefill_and_decode_batches_are_counted_apart():
    result = simulate(_trace(), make_kv_manager("paged", 100_000), get_cost_model("opt-13b"), record_memory=False)
    assert 0 < result.num_prefill_iterations < result.num_iterations
    assert result.prefill_tokens == 40 * 60 and result.recomputed_tokens == 0
    decode_sum = result.batched_requests_sum - result.prefill_batched_requests_sum
    assert result.avg_decode_batched_requests == decode_sum / (result.num_iterations - result.num_prefill_iterations)
    assert result.avg_decode_batched_requests > result.avg_batched_requests
    assert 0 < result.busy_seconds <= result.duration
    assert 1 <= result.time_avg_batched_requests <= 40


def test_recomputed_tokens_after_preemption():
    manager = make_kv_manager("paged", 16 * 40, block_size=16)  # too small for the whole batch
    result = simulate(_trace(20, 100, 200, 0.0), manager, get_cost_model("opt-13b"), record_memory=False)
    assert result.num_preemptions > 0
    assert 0 < result.recomputed_tokens < result.prefill_tokens
    assert result.prefill_tokens > 20 * 100


@pytest.mark.parametrize("fast_forward", [True, False])
def test_counters_do_not_depend_on_fast_forward(fast_forward):
    a = simulate(_trace(), make_kv_manager("paged", 100_000), get_cost_model("opt-13b"), record_memory=False,
                 fast_forward=fast_forward)
    b = simulate(_trace(), make_kv_manager("paged", 100_000), get_cost_model("opt-13b"), record_memory=False,
                 fast_forward=not fast_forward)
    assert (a.num_prefill_iterations, a.prefill_batched_requests_sum, a.prefill_tokens) == \
        (b.num_prefill_iterations, b.prefill_batched_requests_sum, b.prefill_tokens)
    assert a.busy_seconds == pytest.approx(b.busy_seconds) and a.batched_requests_seconds == pytest.approx(b.batched_requests_seconds)
