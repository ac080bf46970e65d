"""Sanity of the GPU cost model (paged.sim.cost_model): times grow with batch, context and model size."""

import pytest

from paged.sim.cost_model import SERVERS, get_cost_model
from paged.core.scheduler import SchedulerOutputs
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus


@pytest.fixture(scope="module")
def opt13b():
    return get_cost_model("opt-13b", block_size=16)


def test_table1_capacity():
    assert get_cost_model("opt-13b", block_size=16).num_kv_slots == 15_728  # Table 1: 15.7K
    assert abs(get_cost_model("opt-175b", block_size=16).num_kv_slots - 60_100) < 100  # Table 1: 60.1K
    assert SERVERS["opt-66b"].num_gpus == 4 and SERVERS["opt-175b"].num_gpus == 8


def test_decode_grows_with_batch_and_context(opt13b):
    assert opt13b.decode_time(8, 8 * 100) < opt13b.decode_time(64, 64 * 100) < opt13b.decode_time(256, 256 * 100)
    assert opt13b.decode_time(8, 1000) < opt13b.decode_time(8, 10_000)


def test_decode_is_linear_in_context(opt13b):
    a, b, c = (opt13b.decode_time(16, s) for s in (1000, 2000, 3000))
    assert b - a == pytest.approx(c - b, rel=1e-9)


def test_prefill_costs_more_than_one_decode_step(opt13b):
    for n in (128, 512, 1024):  # (at ~16 tokens both are one weight read: about equal)
        assert opt13b.prefill_time([n]) > opt13b.decode_time(1, n)
    assert opt13b.prefill_time([512]) < opt13b.prefill_time([1024]) < opt13b.prefill_time([1024, 1024])


def test_bigger_models_are_slower_per_token():
    times = [get_cost_model(m, block_size=16).decode_time(32, 32 * 300) for m in ("opt-13b", "opt-66b", "opt-175b")]
    assert times[0] < times[1] < times[2]


def test_swap_small_blocks_slow_recompute_flat(opt13b):
    tokens = 1024
    swap = {bs: opt13b.swap_time(tokens // bs, bs) for bs in (1, 16, 256)}
    assert swap[1] > 5 * swap[16] > 5 * swap[256] / 5
    assert opt13b.recompute_time(tokens) == opt13b.prefill_time([tokens])


def test_paged_kernel_overhead_and_block_size():
    paged16 = get_cost_model("opt-13b", block_size=16)
    contiguous = get_cost_model("opt-13b", paged_kernel=False, block_size=16)
    assert paged16.attention_slowdown == pytest.approx(1.2)
    assert contiguous.attention_slowdown == 1.0
    assert get_cost_model("opt-13b", block_size=1).attention_slowdown > paged16.attention_slowdown


def test_call_matches_decode_time(opt13b):
    group = SequenceGroup(0, 0.0, [Sequence(0, 100, num_generated=5, status=SequenceStatus.RUNNING)], 50)
    outputs = SchedulerOutputs([group], is_prefill=False)
    assert opt13b(outputs) == opt13b.decode_time(1, 105)
    assert opt13b(SchedulerOutputs([group], is_prefill=True)) == opt13b.prefill_time([105])


def test_unknown_model():
    with pytest.raises(ValueError, match="unknown model"):
        get_cost_model("gpt-5", block_size=16)


def test_host_costs_scale_with_the_batch_and_with_cpu_scale():
    none, sourced, double = (get_cost_model("opt-13b", cpu_scale=s, block_size=16) for s in (0.0, 1.0, 2.0))
    for n, ctx in ((1, 100), (64, 64 * 300), (256, 256 * 300)):
        extra = sourced.decode_time(n, ctx) - none.decode_time(n, ctx)
        assert extra == pytest.approx(sourced.host_time(n, n, ctx / 16 + n))
        assert double.decode_time(n, ctx) - none.decode_time(n, ctx) == pytest.approx(2 * extra)
    per_seq = (sourced.host_time(256, 256, 0) - sourced.host_time(1, 1, 0)) / 255
    assert 15e-6 < per_seq < 30e-6  # scheduler 8 + input preparation 6 + sampling 6 µs, plus the copied bytes
    assert none.host_time(256, 256, 10_000) == 0.0
    assert sourced.prefill_time([512]) - none.prefill_time([512]) == pytest.approx(sourced.host_time(1, 512, 0))


@pytest.mark.parametrize("scale", [-1.0, float("inf"), float("nan")])
def test_bad_cpu_scale(scale):
    with pytest.raises(ValueError, match="cpu_scale"):
        get_cost_model("opt-13b", cpu_scale=scale, block_size=16)


def test_host_cost_table_lists_the_sourced_constants():
    from paged.sim.cost_model import HOST_COSTS, SCHEDULER_PER_SEQ_S

    assert HOST_COSTS["scheduler"] == (SCHEDULER_PER_SEQ_S, "sequence")


def test_efficiency_factors_have_measured_ends_and_move_time_the_right_way():
    from paged.sim.cost_model import EFFICIENCY_RANGES

    for name, (low, central, high) in EFFICIENCY_RANGES.items():
        assert 0 < low < central < high <= 1, name
    base = get_cost_model("opt-13b", block_size=16)
    assert base == get_cost_model("opt-13b", memory_efficiency=0.82, compute_efficiency=0.74, block_size=16)  # the A100's measured
    h100 = get_cost_model("llama-3.1-8b", gpu="h100-sxm", block_size=16)
    assert (h100.memory_efficiency, h100.compute_efficiency) == (0.95, 0.73)  # the H100's measured
    slow = get_cost_model("opt-13b", memory_efficiency=EFFICIENCY_RANGES["memory_efficiency"][0], block_size=16)
    fast = get_cost_model("opt-13b", memory_efficiency=EFFICIENCY_RANGES["memory_efficiency"][2], block_size=16)
    assert slow.decode_time(8, 4000) > base.decode_time(8, 4000) > fast.decode_time(8, 4000)
    lo_c = get_cost_model("opt-175b", compute_efficiency=EFFICIENCY_RANGES["compute_efficiency"][0], block_size=16)
    hi_c = get_cost_model("opt-175b", compute_efficiency=EFFICIENCY_RANGES["compute_efficiency"][2], block_size=16)
    assert lo_c.prefill_time([2000]) > hi_c.prefill_time([2000])
    for bad in (0, 1.5, True, "0.8"):
        with pytest.raises(ValueError, match="memory_efficiency must be a fraction"):
            get_cost_model("opt-13b", memory_efficiency=bad, block_size=16)


@pytest.mark.parametrize("cpu_scale", [0.0, 1.0, 2.0])
@pytest.mark.parametrize("block_size", [1, 16, 128])
@pytest.mark.parametrize("preset", ["opt-13b", "opt-175b", "llama-13b"])
def test_decode_time_of_a_batch_is_decode_time_bit_for_bit(preset, block_size, cpu_scale):
    """The simulator's calendars sum per-iteration times from decode_time_of: exactly decode_time's floats."""
    import random

    from paged.sim.linear_cost import LinearCostModel

    rng = random.Random(block_size)
    for model in (get_cost_model(preset, block_size=block_size, cpu_scale=cpu_scale),
                  get_cost_model(preset, block_size=block_size, cpu_scale=cpu_scale, paged_kernel=False),
                  LinearCostModel((0.01, 1e-4 * cpu_scale, 3e-7), (0.01, 0.0, 1e-5, 1e-9))):
        for _ in range(200):
            n = rng.randint(1, 512)
            of = model.decode_time_of(n)
            assert all(of(c) == model.decode_time(n, c) for c in (n, rng.randint(n, 10**6), rng.randint(n, 10**8)))


def test_decode_time_of_follows_an_overridden_decode_time():
    """A cost model that overrides decode_time (a recorder) is still called once per iteration."""
    from dataclasses import fields

    from paged.sim.cost_model import CostModel

    calls = []

    class Counting(CostModel):
        def decode_time(self, num_seqs, context_tokens):
            calls.append((num_seqs, context_tokens))
            return CostModel.decode_time(self, num_seqs, context_tokens)

    cost = get_cost_model("opt-13b", block_size=16)
    counting = Counting(**{f.name: getattr(cost, f.name) for f in fields(CostModel)})
    assert counting.decode_time_of(3)(300) == cost.decode_time(3, 300) and calls == [(3, 300)]


def test_assumption_fields_move_what_they_model():
    from dataclasses import replace

    from paged.sim.cost_model import ASSUMPTION_RANGES

    base = get_cost_model("opt-13b", block_size=16)
    for name, (low, central, high) in ASSUMPTION_RANGES.items():
        assert 0 <= low < central < high and getattr(base, name) == central, name
    lo, hi = (replace(base, iteration_overhead_s=v) for v in ASSUMPTION_RANGES["iteration_overhead_s"][::2])
    assert hi.decode_time(8, 800) - lo.decode_time(8, 800) == pytest.approx(2e-3)
    small_lo, small_hi = (replace(base, block_size=2, block_overhead_tokens=v) for v in (0.15, 2.0))
    assert small_lo.attention_slowdown < small_hi.attention_slowdown
    assert replace(base, block_overhead_tokens=2.0).attention_slowdown == pytest.approx(1.2)  # 16 stays the anchor
    assert replace(base, copy_latency_s=10e-6).swap_time(64) > replace(base, copy_latency_s=2e-6).swap_time(64)


def test_tensor_parallel_all_reduce_is_the_measured_law():
    one, four, eight = (get_cost_model(m, block_size=16) for m in ("opt-13b", "opt-66b", "opt-175b"))
    assert one.allreduce_time(64) == 0.0
    assert four.allreduce_time(1) == pytest.approx(27.8e-6, rel=0.01)  # DGX A100, 4 GPUs: α
    big = eight.allreduce_time(2048) - eight.allreduce_time(0)
    assert big == pytest.approx(2 * 7 / 8 * 2048 * 12288 * 2 / 292e9)  # ring bus bytes at the measured β
