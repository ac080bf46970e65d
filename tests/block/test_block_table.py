"""BlockTable: on-demand blocks, fork, copy-on-write, all-or-nothing appends, slot mapping."""

import pytest

from paged import BlockAllocator, BlockTable, OutOfBlocksError


def make(num_blocks=16, block_size=4):
    alloc = BlockAllocator(num_blocks, block_size)
    return alloc, BlockTable(alloc)


def test_starts_empty():
    _, table = make()
    assert table.num_tokens == 0 and table.num_blocks == 0 and table.physical_blocks == []


@pytest.mark.parametrize("n", [4, 8, 16])
def test_exact_multiple_of_block_size(n):
    alloc, table = make()
    assert table.append_tokens(n) == []
    assert table.num_blocks == n // 4
    assert alloc.num_free_blocks == 16 - n // 4


def test_boundary_crossed_by_one_token_and_by_many():
    alloc, table = make()
    table.append_tokens(4)
    assert table.num_blocks == 1
    table.append_tokens(1)  # crosses by one
    assert table.num_blocks == 2
    table.append_tokens(3)  # fills block 2 exactly: no new block
    assert table.num_blocks == 2
    table.append_tokens(9)  # crosses several boundaries at once
    assert table.num_blocks == 5 and table.num_tokens == 17
    assert alloc.num_free_blocks == 11


def test_append_zero_and_negative():
    _, table = make()
    assert table.append_tokens(0) == [] and table.num_blocks == 0
    with pytest.raises(ValueError):
        table.append_tokens(-1)


def test_fork_when_last_block_full_needs_no_copy():
    alloc, parent = make()
    parent.append_tokens(8)
    child = parent.fork()
    assert child.physical_blocks == parent.physical_blocks
    assert all(alloc.ref_count(b) == 2 for b in parent.physical_blocks)
    free_before = alloc.num_free_blocks
    assert child.append_tokens(1) == []  # lands in a fresh block
    assert alloc.num_free_blocks == free_before - 1


def test_fork_when_last_block_partial_copies_on_write():
    alloc, parent = make()
    parent.append_tokens(6)
    child = parent.fork()
    shared_last = parent.physical_blocks[-1]
    copies = child.append_tokens(1)
    assert len(copies) == 1 and copies[0][0] == shared_last
    new_last = copies[0][1]
    assert child.physical_blocks[-1] == new_last != shared_last
    assert alloc.ref_count(shared_last) == 1 and alloc.ref_count(new_last) == 1
    assert child.physical_blocks[0] == parent.physical_blocks[0]
    assert alloc.ref_count(parent.physical_blocks[0]) == 2
    # the parent is now the only holder of the old last block: it writes in place
    assert parent.append_tokens(1) == []


def test_fork_allocates_nothing():
    alloc, parent = make()
    parent.append_tokens(10)
    free = alloc.num_free_blocks
    parent.fork()
    assert alloc.num_free_blocks == free


@pytest.mark.parametrize("order", ["parent_first", "child_first"])
def test_cow_then_free_in_either_order(order):
    alloc, parent = make()
    parent.append_tokens(6)
    child = parent.fork()
    child.append_tokens(3)
    first, second = (parent, child) if order == "parent_first" else (child, parent)
    first.free()
    assert all(alloc.ref_count(b) >= 1 for b in second.physical_blocks)
    second.free()
    assert alloc.num_free_blocks == alloc.num_blocks


def test_out_of_blocks_part_way_leaves_everything_unchanged():
    alloc, table = make(num_blocks=4, block_size=4)
    table.append_tokens(6)
    other = table.fork()  # shared partial last block: an append needs a CoW block too
    before = (table.physical_blocks, table.num_tokens, alloc.num_free_blocks,
              [alloc.ref_count(b) for b in range(4)])
    with pytest.raises(OutOfBlocksError):
        table.append_tokens(10)  # needs 2 new blocks + 1 CoW block, only 2 free
    after = (table.physical_blocks, table.num_tokens, alloc.num_free_blocks,
             [alloc.ref_count(b) for b in range(4)])
    assert before == after
    assert other.num_tokens == 6


def test_slot_mapping():
    alloc = BlockAllocator(8, 4)
    filler = BlockTable(alloc)
    filler.append_tokens(4)  # takes block 0, so the table's blocks are not 0..n
    table = BlockTable(alloc)
    table.append_tokens(6)
    b0, b1 = table.physical_blocks
    assert table.slot_mapping(0, 6) == [b0 * 4, b0 * 4 + 1, b0 * 4 + 2, b0 * 4 + 3, b1 * 4, b1 * 4 + 1]
    assert table.slot_mapping(5, 6) == [b1 * 4 + 1]
    assert table.slot_mapping(3, 3) == []
    with pytest.raises(ValueError):
        table.slot_mapping(0, 7)
    with pytest.raises(ValueError):
        table.slot_mapping(4, 2)
    with pytest.raises(TypeError, match="slot_mapping's start must be an integer, got 'a'"):
        table.slot_mapping("a", 3)
    with pytest.raises(TypeError, match="slot_mapping's end must be an integer, got 2.0"):
        table.slot_mapping(0, 2.0)
    import numpy as np
    assert table.slot_mapping(np.int64(5), np.int32(6)) == [b1 * 4 + 1]


def test_free_twice_is_harmless_and_blocks_return():
    alloc, table = make()
    table.append_tokens(9)
    table.free()
    table.free()
    assert alloc.num_free_blocks == alloc.num_blocks and table.num_tokens == 0


def test_physical_blocks_is_a_copy():
    _, table = make()
    table.append_tokens(5)
    blocks = table.physical_blocks
    blocks.append(99)
    assert table.num_blocks == 2


def test_a_table_over_given_blocks_checks_their_count():
    alloc = BlockAllocator(4, 4)
    with pytest.raises(ValueError):
        BlockTable(alloc, [alloc.allocate()], 5)


@pytest.mark.parametrize("bad", [1.5, True, "3", None])
def test_non_integer_token_counts_change_nothing(bad):
    alloc = BlockAllocator(8, 4)
    table = BlockTable(alloc)
    table.append_tokens(5)
    with pytest.raises(TypeError, match="token count must be an integer"):
        table.append_tokens(bad)
    with pytest.raises(TypeError, match="token count must be an integer"):
        table.num_new_blocks(bad)
    assert table.num_tokens == 5 and alloc.num_free_blocks == 6


def test_table_needs_an_allocator_and_owned_blocks():
    with pytest.raises(TypeError, match="BlockAllocator"):
        BlockTable(None)
    alloc = BlockAllocator(8, 4)
    with pytest.raises(ValueError, match="physical block 7 is free"):
        BlockTable(alloc, [7], 3)
    with pytest.raises(ValueError, match="out of range"):
        BlockTable(alloc, [99], 3)


def test_a_failed_free_changes_nothing_so_a_retry_cannot_hurt_a_sibling():
    alloc = BlockAllocator(8, 4)
    x = BlockTable(alloc)
    x.append_tokens(10)  # blocks 0, 1, 2
    y = x.fork()
    first = x.physical_blocks[0]
    alloc.free(first)
    alloc.free(first)  # corrupted behind the tables' backs: block 0 is free while both list it
    for _ in range(2):
        with pytest.raises(ValueError, match="double free"):
            x.free()
        assert [alloc.ref_count(b) for b in y.physical_blocks] == [0, 2, 2]
    assert x.physical_blocks == y.physical_blocks


def test_a_table_refuses_a_block_listed_twice():
    """Each logical block holds one reference: a repeated id would be freed twice, corrupting a sibling."""
    a = BlockAllocator(8, 4)
    b = a.allocate()
    a.incref(b)
    with pytest.raises(ValueError, match=rf"physical block\(s\) \[{b}\] appear twice"):
        BlockTable(a, [b, b], 8)
    assert a.ref_count(b) == 2  # nothing taken over
