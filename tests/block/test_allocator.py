"""BlockAllocator: free pool, reference counts, errors."""

import pytest

from paged import BlockAllocator, OutOfBlocksError
from paged.block import PrefixCachingBlockAllocator


def test_allocate_until_empty_then_out_of_blocks():
    alloc = BlockAllocator(3, 16)
    got = [alloc.allocate() for _ in range(3)]
    assert sorted(got) == [0, 1, 2]
    assert alloc.num_free_blocks == 0
    with pytest.raises(OutOfBlocksError) as err:
        alloc.allocate()
    assert isinstance(err.value, MemoryError)
    assert "3 blocks" in str(err.value)


def test_free_returns_block_only_at_zero():
    alloc = BlockAllocator(2, 4)
    b = alloc.allocate()
    alloc.incref(b)
    assert alloc.ref_count(b) == 2
    alloc.free(b)
    assert alloc.ref_count(b) == 1 and alloc.num_free_blocks == 1
    alloc.free(b)
    assert alloc.ref_count(b) == 0 and alloc.num_free_blocks == 2


def test_double_free_raises_and_changes_nothing():
    alloc = BlockAllocator(2, 4)
    b = alloc.allocate()
    alloc.free(b)
    with pytest.raises(ValueError, match="double free"):
        alloc.free(b)
    assert alloc.num_free_blocks == 2


@pytest.mark.parametrize("bad", [-1, 5, 100])
def test_out_of_range_ids(bad):
    alloc = BlockAllocator(5, 4)
    for op in (alloc.free, alloc.incref, alloc.ref_count):
        with pytest.raises(ValueError, match="out of range"):
            op(bad)


@pytest.mark.parametrize("bad", [1.5, 1.0, "0", None])
def test_non_integer_ids(bad):
    alloc = BlockAllocator(5, 4)
    alloc.allocate()
    for op in (alloc.free, alloc.incref, alloc.ref_count):
        with pytest.raises(TypeError, match="block id must be an integer"):
            op(bad)
    assert alloc.num_free_blocks == 4 and alloc.ref_count(0) == 1


def test_incref_free_block_raises():
    alloc = BlockAllocator(2, 4)
    with pytest.raises(ValueError, match="free"):
        alloc.incref(0)


def test_incref_all_is_all_or_nothing():
    alloc = BlockAllocator(4, 4)
    a, b = alloc.allocate(), alloc.allocate()
    with pytest.raises(ValueError):
        alloc.incref_all([a, b, 3])  # block 3 is free
    assert alloc.ref_count(a) == 1 and alloc.ref_count(b) == 1


@pytest.mark.parametrize("args", [(0, 16), (4, 0), (-1, 16), (4, 1.5), (True, 16)])
def test_bad_construction(args):
    with pytest.raises(ValueError):
        BlockAllocator(*args)


def test_reuses_most_recently_freed_block():
    alloc = BlockAllocator(8, 4)
    blocks = [alloc.allocate() for _ in range(4)]
    alloc.free(blocks[1])
    assert alloc.allocate() == blocks[1]


@pytest.mark.parametrize("cls", [BlockAllocator, PrefixCachingBlockAllocator])
def test_bulk_allocate_and_free_match_one_at_a_time(cls):
    bulk, single = cls(8, 4), cls(8, 4)
    for alloc in (bulk, single):  # a used pool: some blocks freed out of order
        taken = [alloc.allocate() for _ in range(5)]
        for b in (taken[3], taken[0], taken[4]):
            alloc.free(b)
    got = bulk.allocate_blocks(4)
    assert got == [single.allocate() for _ in range(4)]
    assert [bulk.ref_count(b) for b in got] == [1] * 4
    bulk.incref(got[1])
    single.incref(got[1])
    bulk.free_blocks(reversed(got))
    for b in reversed(got):
        single.free(b)
    assert [bulk.ref_count(b) for b in range(8)] == [single.ref_count(b) for b in range(8)]
    assert [bulk.allocate() for _ in range(bulk.num_free_blocks)] == \
        [single.allocate() for _ in range(single.num_free_blocks)]
    bulk.check_invariants()


@pytest.mark.parametrize("cls", [BlockAllocator, PrefixCachingBlockAllocator])
def test_bulk_allocate_is_all_or_nothing_and_bulk_free_catches_a_double_free(cls):
    alloc = cls(4, 4)
    alloc.allocate()
    with pytest.raises(OutOfBlocksError, match="need 4 free KV blocks, 3"):
        alloc.allocate_blocks(4)
    assert alloc.num_free_blocks == 3 and alloc.allocate_blocks(0) == []
    a, b = alloc.allocate_blocks(2)
    with pytest.raises(ValueError, match=f"double free: physical block {b}"):
        alloc.free_blocks([a, b, b])
    assert alloc.ref_count(a) == 0 and alloc.ref_count(b) == 0  # the blocks before it were freed
    alloc.check_invariants()
