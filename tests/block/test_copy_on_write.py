"""Copy-on-write at block granularity (§4.4): when a write needs a copy, and how many."""

from __future__ import annotations

import pytest

from paged.block import BlockAllocator, BlockTable, OutOfBlocksError
from paged.block.copy_on_write import copies_for_writers, copy_on_write


def test_only_a_shared_partly_filled_last_block_is_copied():
    alloc = BlockAllocator(8, 16)
    table = BlockTable(alloc)
    table.append_tokens(17)
    assert not table.needs_copy_on_write()  # the sole holder writes in place
    child = table.fork()
    assert table.needs_copy_on_write() and child.needs_copy_on_write()
    table.append_tokens(15)
    full = table.fork()  # 32 tokens: a full last block is never written again
    assert not full.needs_copy_on_write()
    assert BlockTable(alloc).needs_copy_on_write() is False  # an empty table has no block to write into


def test_copy_on_write_moves_one_reference():
    alloc = BlockAllocator(4, 16)
    shared = alloc.allocate()
    alloc.incref(shared)
    src, dst = copy_on_write(alloc, shared)
    assert src == shared and dst != shared
    assert alloc.ref_count(shared) == 1 and alloc.ref_count(dst) == 1


def test_copy_on_write_without_a_free_block_changes_nothing():
    alloc = BlockAllocator(1, 16)
    shared = alloc.allocate()
    alloc.incref(shared)
    with pytest.raises(OutOfBlocksError):
        copy_on_write(alloc, shared)
    assert alloc.ref_count(shared) == 2


@pytest.mark.parametrize("ref_count, writers, copies", [(3, 3, 2), (2, 2, 1), (3, 2, 2), (1, 1, 0), (4, 1, 1),
                                                          (2, 0, 0)])
def test_every_writer_but_the_last_copies(ref_count, writers, copies):
    assert copies_for_writers(ref_count, writers) == copies
