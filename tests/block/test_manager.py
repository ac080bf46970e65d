"""PagedKVCacheManager: admission, growth, sharing, swapping, accounting."""

import pytest

from paged.block.manager import PagedKVCacheManager, ceil_sum
from paged.core.kv_cache_manager import AllocStatus
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus


def group(prompt, output, seq_id=0, arrival=0.0):
    return SequenceGroup(seq_id, arrival, [Sequence(seq_id, prompt)], output)


def run(mgr, g):
    mgr.allocate(g)
    for s in g.seqs:
        s.status = SequenceStatus.RUNNING


def test_admission_ok_later_never():
    mgr = PagedKVCacheManager(10, 4, watermark=0.0)
    assert mgr.can_allocate(group(40, 1)) is AllocStatus.NEVER  # 40 + 1 tokens > 40 slots
    assert mgr.can_allocate(group(20, 10)) is AllocStatus.OK
    run(mgr, group(20, 10, seq_id=1))
    assert mgr.can_allocate(group(24, 1, seq_id=2)) is AllocStatus.LATER


def test_watermark_holds_blocks_back():
    mgr = PagedKVCacheManager(100, 4, watermark=0.1)
    assert mgr.can_allocate(group(4 * 91, 1)) is AllocStatus.NEVER
    assert mgr.can_allocate(group(4 * 89, 1)) is AllocStatus.OK


def test_decode_allocates_on_boundaries_only():
    mgr = PagedKVCacheManager(10, 4)
    g = group(4, 10)
    run(mgr, g)
    seq = g.seqs[0]
    assert mgr.get_num_free_gpu_blocks() == 9
    seq.num_generated = 1
    assert mgr.can_append_slots(g)
    mgr.append_slots(seq)
    assert mgr.get_num_free_gpu_blocks() == 8
    for k in range(2, 5):
        seq.num_generated = k
        mgr.append_slots(seq)
    assert mgr.get_num_free_gpu_blocks() == 8


def test_fork_shares_and_copy_on_write():
    mgr = PagedKVCacheManager(10, 4)
    g = group(6, 10)
    run(mgr, g)
    parent = g.seqs[0]
    child = Sequence(1, 6, status=SequenceStatus.RUNNING)
    mgr.fork(parent, child)
    g.seqs.append(child)
    assert mgr.get_block_table(child) == mgr.get_block_table(parent)
    usage = mgr.memory_usage([g])
    assert usage.token_states == 6  # shared blocks counted once
    child.num_generated = 1
    pairs = mgr.append_slots(child)
    assert len(pairs) == 1 and pairs[0][0] == mgr.get_block_table(parent)[-1]


def test_swap_out_and_in_keeps_sharing():
    mgr = PagedKVCacheManager(10, 4, num_cpu_blocks=10)
    g = group(8, 10)
    run(mgr, g)
    parent = g.seqs[0]
    child = Sequence(1, 8, status=SequenceStatus.RUNNING)
    mgr.fork(parent, child)
    g.seqs.append(child)
    assert mgr.can_swap_out(g)
    out = mgr.swap_out(g)
    assert len(out) == 2  # two shared blocks move once
    assert mgr.get_num_free_gpu_blocks() == 10
    for s in g.seqs:
        s.status = SequenceStatus.SWAPPED
    assert mgr.can_swap_in(g) is AllocStatus.OK
    back = mgr.swap_in(g)
    assert len(back) == 2
    assert mgr.get_block_table(parent) == mgr.get_block_table(child)
    assert mgr.cpu_allocator.num_free_blocks == 10
    assert all(mgr.gpu_allocator.ref_count(b) == 2 for b in mgr.get_block_table(parent))


def test_no_swap_space():
    mgr = PagedKVCacheManager(10, 4)
    g = group(8, 1)
    run(mgr, g)
    assert not mgr.can_swap_out(g)
    with pytest.raises(RuntimeError, match="swap space"):
        mgr.swap_out(g)


def test_memory_usage_sums_to_total():
    mgr = PagedKVCacheManager(10, 4)
    g = group(5, 10)
    run(mgr, g)
    u = mgr.memory_usage([g])
    assert (u.token_states, u.reservation, u.internal) == (5, 3, 0)
    assert sum((u.token_states, u.reservation, u.internal, u.external)) == 40
    g2 = group(5, 1, seq_id=1)
    run(mgr, g2)
    u = mgr.memory_usage([g, g2])
    assert u.internal == 2  # g2 will end at 6 tokens in an 8-slot table
    assert abs(sum(u.fractions().values()) - 1) < 1e-12


def test_ceil_sum():
    for bs in (1, 3, 16):
        for x in range(0, 70):
            assert ceil_sum(x, bs) == sum(-(-m // bs) for m in range(1, x + 1))
