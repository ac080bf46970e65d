"""Contiguous baselines: buddy allocator and the Orca reservation policies (§6.1)."""

import pytest
from hypothesis import given, settings, strategies as st

from paged.contiguous import BuddyAllocator, ContiguousKVCacheManager, reservation_size
from paged.core.kv_cache_manager import AllocStatus
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus


def group(prompt, output, seq_id=0, n=1):
    seqs = [Sequence(seq_id + k, prompt) for k in range(n)]
    return SequenceGroup(seq_id, 0.0, seqs, output)


def test_policies_size_reservations_as_documented():
    assert reservation_size("max", 100, 25, 2048) == 2048
    assert reservation_size("pow2", 100, 25, 2048) == 132  # output 25 reserves 32
    assert reservation_size("pow2", 100, 32, 2048) == 132
    assert reservation_size("pow2", 100, 33, 2048) == 164
    assert reservation_size("pow2", 1100, 900, 2048) == 2048  # capped at the maximum length
    assert reservation_size("oracle", 100, 25, 2048) == 125
    with pytest.raises(ValueError, match="unknown"):
        reservation_size("best", 1, 1, 2048)


def test_buddy_rounds_up_and_merges():
    buddy = BuddyAllocator(64)
    a = buddy.allocate(20)  # 32 slots
    b = buddy.allocate(3)  # 4 slots
    assert buddy.num_free_slots == 64 - 32 - 4
    assert not buddy.can_allocate(64)
    buddy.free(a)
    buddy.free(b)
    assert buddy.num_free_slots == 64 and buddy.can_allocate(64)
    with pytest.raises(ValueError, match="double free"):
        buddy.free(a)


def test_buddy_non_power_of_two_space():
    buddy = BuddyAllocator(15728)
    starts = [buddy.allocate(2048) for _ in range(7)]  # 8192 + 4096 + 2048 hold seven
    assert len(set(starts)) == 7
    assert not buddy.can_allocate(2048)
    with pytest.raises(MemoryError):
        buddy.allocate(2048)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 300)), max_size=60))
def test_buddy_never_overlaps_and_frees_everything(ops):
    buddy = BuddyAllocator(1000)
    live = {}
    for alloc, size in ops:
        if alloc or not live:
            if buddy.can_allocate(size):
                start = buddy.allocate(size)
                live[start] = 1 << buddy.order_for(size)
        else:
            start = next(iter(live))
            buddy.free(start)
            del live[start]
        spans = sorted(live.items())
        for (s1, n1), (s2, _) in zip(spans, spans[1:]):
            assert s1 + n1 <= s2
        assert all(s + n <= 1000 for s, n in spans)
        assert buddy.num_free_slots == 1000 - sum(live.values())
    for start in list(live):
        buddy.free(start)
    assert buddy.num_free_slots == 1000


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 300)), max_size=40), st.integers(1, 300))
def test_buddy_counts_the_reservations_it_could_take(ops, size):
    """num_allocatable is how many allocations of one size succeed in a row (the admission of a group)."""
    buddy = BuddyAllocator(1000)
    live = []
    for alloc, n in ops:
        if alloc and buddy.can_allocate(n):
            live.append(buddy.allocate(n))
        elif live:
            buddy.free(live.pop(0))
    count = buddy.num_allocatable(size)
    assert buddy.num_allocatable(size, 1) >= min(count, 1) and buddy.num_allocatable(size, count) == count
    taken = []
    while buddy.can_allocate(size):
        taken.append(buddy.allocate(size))
    assert len(taken) == count
    for start in taken:
        buddy.free(start)


def test_manager_never_for_requests_outgrowing_reservation_or_cache():
    mgr = ContiguousKVCacheManager(4096, "max", max_seq_len=2048)
    assert mgr.can_allocate(group(2000, 100)) is AllocStatus.NEVER
    small = ContiguousKVCacheManager(1000, "oracle")
    assert small.can_allocate(group(900, 200)) is AllocStatus.NEVER
    assert small.can_allocate(group(100, 200)) is AllocStatus.OK


def test_manager_memory_usage_accounts_every_slot():
    mgr = ContiguousKVCacheManager(4096, "pow2")
    g = group(100, 25)
    mgr.allocate(g)
    g.seqs[0].status = SequenceStatus.RUNNING
    g.seqs[0].num_generated = 5
    usage = mgr.memory_usage([g])
    assert usage.token_states == 105
    assert usage.reservation == 125 - 105  # will still generate 20
    assert usage.internal == 132 - 125  # pow2 over-reservation
    assert usage.token_states + usage.reservation + usage.internal + usage.external == 4096
    assert mgr.rounding_slots == 256 - 132
    mgr.free(g.seqs[0])
    assert mgr.buddy.num_free_slots == 4096


def test_manager_append_beyond_reservation_raises():
    mgr = ContiguousKVCacheManager(4096, "oracle")
    g = group(10, 5)
    mgr.allocate(g)
    seq = g.seqs[0]
    seq.status = SequenceStatus.RUNNING
    seq.num_generated = 5
    assert mgr.can_append_slots(g) and mgr.append_slots(seq) == []
    seq.num_generated = 6
    assert not mgr.can_append_slots(g)
    with pytest.raises(RuntimeError, match="reservation"):
        mgr.append_slots(seq)


def test_manager_fork_copies_reservation_and_does_not_swap():
    mgr = ContiguousKVCacheManager(4096, "oracle")
    g = group(100, 28)
    mgr.allocate(g)
    child = Sequence(7, 100)
    mgr.fork(g.seqs[0], child)
    assert mgr.buddy.num_free_slots == 4096 - 2 * 128
    assert not mgr.can_swap_out(g)
