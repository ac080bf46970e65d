"""Physical KV blocks and their reference counts (paper §4.2, §4.4).

A block's count is the number of logical blocks, in every table, that point at it: sharing (a fork, a beam, a
shared prefix) adds one; at zero the block is free again. The free pool is a stack: block 0 on top at first,
then the most recently freed (a small working set). Single-block operations are O(1).
"""

from __future__ import annotations

from collections.abc import Sequence

from paged.core.checks import as_positive_int

__all__ = ["BlockAllocator", "OutOfBlocksError", "DEFAULT_BLOCK_SIZE"]

#: Default KV block size (tokens), vLLM's and the paper's (§7.2: uses the GPU well, wastes little of a block).
DEFAULT_BLOCK_SIZE = 16


class OutOfBlocksError(MemoryError):
    """No free physical block is left; the scheduler's ``can_allocate`` / ``can_append_slots`` checks prevent it."""


class BlockAllocator:
    """Free pool and counts of ``num_blocks`` physical blocks of ``block_size`` token slots (§4.2). Raises ValueError
    unless both are positive integers, MemoryError if the host cannot hold the bookkeeping (~16 bytes a block)."""

    __slots__ = ("_num_blocks", "_block_size", "_free", "_ref_counts")

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self._num_blocks = as_positive_int(num_blocks, "num_blocks")
        self._block_size = as_positive_int(block_size, "block_size")
        try:
            self._free: list[int] = list(range(self._num_blocks - 1, -1, -1))  # block 0 on top
            self._ref_counts: list[int] = [0] * self._num_blocks
        except MemoryError:
            raise MemoryError(f"not enough host memory for the bookkeeping of {self._num_blocks:,} blocks "
                              f"(about {16 * self._num_blocks / 2**30:.1f} GiB)") from None

    @property
    def num_blocks(self) -> int:
        """Physical blocks in the cache (blocks)."""
        return self._num_blocks

    @property
    def block_size(self) -> int:
        """Token slots per block (tokens)."""
        return self._block_size

    @property
    def num_free_blocks(self) -> int:
        """Blocks nobody references, ready to be handed out (blocks). O(1)."""
        return len(self._free)

    def allocate(self) -> int:
        """Take a free block at count 1 and return its id. O(1). Raises OutOfBlocksError if none is free."""
        block_id = self._take_free_block()
        self._ref_counts[block_id] = 1
        return block_id

    def free(self, block_id: int) -> None:
        """Drop one reference to ``block_id``; at zero the block returns to the free pool. O(1).
        Raises ValueError on a double free or an id out of range, TypeError on an id not an integer."""
        counts = self._ref_counts
        if type(block_id) is not int or block_id < 0:  # a negative id would index from the end
            raise self._bad_id(block_id)
        try:
            count = counts[block_id]
        except IndexError:
            raise self._bad_id(block_id) from None
        if count == 0:
            raise ValueError(f"double free: physical block {block_id} is already free")
        counts[block_id] = count - 1
        if count == 1:
            self._return_free_block(block_id)

    def incref(self, block_id: int) -> None:
        """Add one reference to an allocated block: one more logical block shares it (§4.4). O(1).
        Raises ValueError if the block is free or out of range, TypeError on an id not an integer."""
        if self.ref_count(block_id) == 0:
            raise ValueError(f"cannot share physical block {block_id}: it is free")
        self._ref_counts[block_id] += 1

    def incref_all(self, blocks: list[int]) -> None:
        """:meth:`incref` each of a table's ``blocks`` (a fork, §4.4). O(blocks). Raises as it, changing nothing."""
        counts = self._ref_counts
        self._check_not_negative(blocks)
        try:
            for block_id in blocks:
                if not counts[block_id]:
                    # Undo the blocks before its first occurrence (a repeat would have found it counted).
                    for done in blocks[:blocks.index(block_id)]:
                        counts[done] -= 1
                    raise ValueError(f"cannot share physical block {block_id}: it is free")
                counts[block_id] += 1
        except (IndexError, TypeError):  # an id past the end, or not an index: undo the ids before it
            stop = next((i for i, b in enumerate(blocks) if not self._indexes_a_count(b)), None)
            if stop is None:
                raise
            for done in blocks[:stop]:  # the loop stopped there: each id before it was counted once
                counts[done] -= 1
            raise self._bad_id(blocks[stop]) from None

    def free_all(self, blocks: list[int]) -> None:
        """:meth:`free` each of a table's distinct ``blocks``, tail first. O(blocks). Raises as it; a free or bad id
        changes nothing, a repeated one (no table holds one) is found after the ids past it were freed."""
        counts = self._ref_counts
        self._check_not_negative(blocks)
        try:
            freed = 0 in map(counts.__getitem__, blocks)  # checked first, so a failed free changes nothing
        except (IndexError, TypeError):
            bad = self._first_bad_id(blocks)
            if bad is None:
                raise
            raise self._bad_id(blocks[bad]) from None
        if freed:
            block_id = next(b for b in blocks if counts[b] == 0)
            raise ValueError(f"double free: physical block {block_id} is already free")
        for block_id in reversed(blocks):
            count = counts[block_id]
            if count == 0:  # only an id listed twice gets here
                raise ValueError(f"double free: physical block {block_id} is already free")
            counts[block_id] = count - 1
            if count == 1:
                self._return_free_block(block_id)

    @property
    def ref_counts(self) -> Sequence[int]:
        """Every block's count, indexed by block id: the allocator's own list, for reading only (a block table reads
        its last block's count on every append). Counts change only through this class's methods. O(1)."""
        return self._ref_counts

    def ref_count(self, block_id: int) -> int:
        """Logical blocks, in every table, pointing at ``block_id``. O(1). Raises ValueError / TypeError on a bad id."""
        if type(block_id) is not int or not 0 <= block_id < self._num_blocks:
            raise self._bad_id(block_id)
        return self._ref_counts[block_id]

    def _check_not_negative(self, blocks: list[int]) -> None:
        """Refuse a negative id (as a list index it would count from the end). O(blocks)."""
        try:
            if not blocks or min(blocks) >= 0:
                return
        except TypeError:  # ids that do not compare with each other
            pass
        raise self._bad_id(blocks[self._first_bad_id(blocks)])

    def _indexes_a_count(self, block_id) -> bool:
        """True if ``block_id`` indexes the counts (in range, or any value Python takes as an index)."""
        try:
            self._ref_counts[block_id]
        except (IndexError, TypeError):
            return False
        return True

    def _first_bad_id(self, blocks: list[int]) -> int | None:
        """Position of the first id that is not an integer in range, or None."""
        n = self._num_blocks
        return next((i for i, b in enumerate(blocks) if type(b) is not int or not 0 <= b < n), None)

    def _bad_id(self, block_id) -> Exception:
        """The error for a bad id (a float or bool would index the counts silently)."""
        if type(block_id) is not int:
            return TypeError(f"block id must be an integer, got {block_id!r}")
        return ValueError(f"block id {block_id} out of range [0, {self._num_blocks})")

    def recount(self, counts: list[int]) -> None:
        """Set the counts from ``counts`` (one ≥ 0 per block, else ValueError) and rebuild the free pool, free blocks
        keeping their order: repairs the bookkeeping after an interrupt cut a free, fork or growth short. O(blocks)."""
        if len(counts) != self._num_blocks or min(counts, default=0) < 0:
            raise ValueError(f"recount needs one count >= 0 for each of the {self._num_blocks} blocks")
        self._ref_counts[:] = counts
        self._rebuild_free_pool()

    def _rebuild_free_pool(self) -> None:
        """The free stack from the counts (:meth:`_rebuilt_stack` of the blocks at 0). O(blocks)."""
        counts = self._ref_counts
        self._free[:] = self._rebuilt_stack(lambda b: counts[b] == 0)

    def _rebuilt_stack(self, belongs) -> list[int]:
        """The blocks ``belongs(b)`` puts on the free stack: those already on it in their order (once each), the
        others beneath. O(blocks)."""
        kept = [b for b in dict.fromkeys(self._free) if 0 <= b < self._num_blocks and belongs(b)]
        known = set(kept)
        return [b for b in range(self._num_blocks - 1, -1, -1) if belongs(b) and b not in known] + kept

    def _take_free_block(self) -> int:
        """Pop the most recently freed block. O(1)."""
        try:
            return self._free.pop()
        except IndexError:
            raise OutOfBlocksError(f"no free KV block: all {self._num_blocks} blocks are in use") from None

    def _return_free_block(self, block_id: int) -> None:
        """Push a block whose last reference was dropped. O(1)."""
        self._free.append(block_id)

    def check_invariants(self) -> None:
        """Assert that the free stack holds each block at count 0 once and no count is negative. O(blocks)."""
        free, counts = self._free, self._ref_counts
        assert len(set(free)) == len(free), f"a block is twice in the free pool: {sorted(free)}"
        assert set(free) == {b for b in range(self._num_blocks) if counts[b] == 0}, \
            "the free pool differs from the blocks with reference count 0"
        assert all(c >= 0 for c in counts), "negative reference count"

    def __repr__(self) -> str:
        return f"BlockAllocator(num_blocks={self._num_blocks}, block_size={self._block_size}, free={len(self._free)})"
