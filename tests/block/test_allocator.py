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
def test_a_fresh_pool_hands_out_block_zero_first_then_the_last_freed(cls):
    alloc = cls(8, 4)
    taken = [alloc.allocate() for _ in range(5)]
    assert taken == [0, 1, 2, 3, 4]
    for b in (taken[3], taken[0], taken[4]):
        alloc.free(b)
    assert [alloc.allocate() for _ in range(3)] == [4, 0, 3]
    alloc.check_invariants()


@pytest.mark.parametrize("cls", [BlockAllocator, PrefixCachingBlockAllocator])
def test_whole_table_counts_match_block_by_block(cls):
    """incref_all / free_all take and drop the same references, and return blocks to the free pool in the
    same order, as incref / free of each block (free tail first)."""
    pools = []
    for whole in (False, True):
        alloc = cls(12, 4)
        blocks = [alloc.allocate() for _ in range(5)]
        alloc.incref(blocks[0])
        if whole:
            alloc.incref_all(blocks)
            alloc.free_all(blocks)
            alloc.free_all(blocks[1:])
        else:
            for b in blocks:
                alloc.incref(b)
            for b in reversed(blocks):
                alloc.free(b)
            for b in reversed(blocks[1:]):
                alloc.free(b)
        counts = [alloc.ref_count(b) for b in range(12)]
        order = [alloc.allocate() for _ in range(alloc.num_free_blocks)]
        alloc.check_invariants()
        pools.append((counts, order))
    assert pools[0] == pools[1]
    assert pools[0][0][blocks[0]] == 2  # allocated, shared once more: the rest are free


def test_incref_all_of_a_free_block_changes_nothing():
    alloc = BlockAllocator(6, 4)
    blocks = [alloc.allocate() for _ in range(3)]
    alloc.free(blocks[2])
    with pytest.raises(ValueError, match="free"):
        alloc.incref_all(blocks)
    assert [alloc.ref_count(b) for b in blocks] == [1, 1, 0]
    with pytest.raises(ValueError, match="double free"):
        alloc.free_all(blocks)  # the tail is already free
    assert [alloc.ref_count(b) for b in blocks] == [1, 1, 0]  # a failed free changes nothing either
    alloc.check_invariants()


@pytest.mark.parametrize("call,blocks,error,match", [
    ("free_all", [-1], ValueError, r"block id -1 out of range \[0, 4\)"),
    ("incref_all", [-2], ValueError, r"block id -2 out of range"),
    ("free_all", [1, 77], ValueError, r"block id 77 out of range"),
    ("incref_all", [2, 77], ValueError, r"block id 77 out of range"),
    ("incref_all", [2, 1.0], TypeError, r"block id must be an integer, got 1.0"),
    ("free_all", [2, "x"], TypeError, r"got 'x'"),
])
def test_whole_table_operations_name_a_bad_id_and_change_no_count(call, blocks, error, match):
    """A negative id would index the counts from their end, and an id past it or not an integer fails
    halfway through: each is named, and no count changes (all or nothing)."""
    a = BlockAllocator(4, 16)
    for _ in range(4):
        a.allocate()
    with pytest.raises(error, match=match):
        getattr(a, call)(blocks)
    assert [a.ref_count(b) for b in range(4)] == [1, 1, 1, 1] and a.num_free_blocks == 0


def test_incref_all_undoes_up_to_where_it_stopped():
    """An id Python indexes with (a bool, a numpy integer) before the id that fails: the undo covers every
    id the loop counted, not only those before the first id of a foreign type."""
    np = pytest.importorskip("numpy")
    a = BlockAllocator(4, 16)
    for _ in range(4):
        a.allocate()
    for blocks in ([True, 0, 99], [np.int64(0), 2, 99]):
        with pytest.raises((ValueError, TypeError)):
            a.incref_all(blocks)
        assert [a.ref_count(b) for b in range(4)] == [1, 1, 1, 1], blocks


def test_recount_repairs_a_free_cut_short():
    allocator = BlockAllocator(6, 4)
    blocks = [allocator.allocate() for _ in range(4)]
    allocator.incref(blocks[0])
    allocator.free(blocks[3])  # as if an interrupted free_all had dropped the tail and stopped
    allocator.recount([2, 1, 1, 1, 0, 0])  # what the tables still hold
    allocator.check_invariants()
    assert [allocator.ref_count(b) for b in range(6)] == [2, 1, 1, 1, 0, 0]
    assert allocator.num_free_blocks == 2
    with pytest.raises(ValueError, match="one count >= 0"):
        allocator.recount([1, 1])
    with pytest.raises(ValueError, match="one count >= 0"):
        allocator.recount([0, 0, 0, 0, 0, -1])
