"""Copy-on-write at block granularity (paper §4.4).

Forked sequences (parallel samples, beam candidates) share physical blocks; each block counts its
holders (:class:`~paged.block.BlockAllocator`). A sequence about to write a token into a block is
allowed to write in place only if it is the block's sole holder. Otherwise it takes a fresh block,
the shared one loses one holder, and the KV data of the old block must be copied into the new one.
Only the last block of a sequence is ever written, and only while it is partly filled, so a
sequence copies at most one block per step.

The life of one copy, across the layers:

1. decided when a :class:`~paged.block.BlockTable` grows (:meth:`~paged.block.BlockTable.needs_copy_on_write`);
2. recorded as a ``(src, dst)`` pair (:func:`copy_on_write`), returned by ``append_tokens``;
3. collected for the whole step by the scheduler (``SchedulerOutputs.blocks_to_copy``);
4. applied by the engine before the model runs, every layer at once
   (:meth:`paged.engine.kv_cache.PagedKVCache.copy_blocks`, the fused block copy of §5.1).
"""

from __future__ import annotations

from paged.block.allocator import BlockAllocator

__all__ = ["copy_on_write", "copies_for_writers"]


def copy_on_write(allocator: BlockAllocator, block_id: int) -> tuple[int, int]:
    """Give a writer of the shared block ``block_id`` a private block of its own. O(1).

    Allocates the destination, then drops the writer's reference to the source (whose count is
    above 1, so it stays allocated for the other holders).

    Returns:
        ``(src, dst)``: the KV data of block ``src`` must be copied into block ``dst``.

    Raises:
        OutOfBlocksError: if no block is free (nothing has changed then).
    """
    dst = allocator.allocate()
    allocator.free(block_id)
    return block_id, dst


def copies_for_writers(ref_count: int, num_writers: int) -> int:
    """Fresh blocks needed when ``num_writers`` holders of one block (``ref_count`` holders in all)
    each write a token into it this step (§4.4).

    Every writer but the last copies: once the others have taken their copies, the last holder is
    the block's sole owner and writes in place. So writers that are all of the block's holders need
    ``num_writers - 1`` copies; if anyone else still holds the block (another request sharing a
    prefix, a swapped-out sibling), every writer copies. The paged manager asks this when it checks
    whether a group can append (``can_append_slots``, ``can_swap_in``). O(1).
    """
    if num_writers <= 0:
        return 0
    return num_writers - 1 if num_writers >= ref_count else num_writers
