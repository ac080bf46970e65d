"""Copy-on-write at block granularity (paper §4.4).

A sequence writes into a shared block (a fork, a beam) only after taking a fresh block and copying the KV into
it; its sole holder writes in place. Only a partly filled last block is written: one copy per sequence and step
at most. A copy is decided by ``BlockTable.needs_copy_on_write``, returned as ``(src, dst)`` by ``append_tokens``,
gathered in ``SchedulerOutputs.blocks_to_copy`` and applied to every layer at once (``PagedKVCache.copy_blocks``, §5.1).
"""

from __future__ import annotations

from paged.block.allocator import BlockAllocator

__all__ = ["copy_on_write", "copies_for_writers"]


def copy_on_write(allocator: BlockAllocator, block_id: int) -> tuple[int, int]:
    """Give a writer of the shared block ``block_id`` a private block: allocate it, then drop the writer's
    reference to the source (still held by others). Returns ``(src, dst)``: copy block ``src``'s KV into ``dst``.
    O(1). Raises OutOfBlocksError, changing nothing, if no block is free."""
    dst = allocator.allocate()
    allocator.free(block_id)
    return block_id, dst


def copies_for_writers(ref_count: int, num_writers: int) -> int:
    """Fresh blocks needed when ``num_writers`` of a block's ``ref_count`` holders each write into it this step
    (§4.4): ``num_writers - 1`` if they are all its holders (the last, then sole owner, writes in place), else
    ``num_writers`` (another request or a swapped-out sibling still holds it). O(1)."""
    if num_writers <= 0:
        return 0
    return num_writers - 1 if num_writers >= ref_count else num_writers
