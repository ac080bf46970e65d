"""Physical KV blocks and their reference counts (paper §4.2, §4.4).

The KV cache is cut into ``num_blocks`` physical blocks of ``block_size`` token slots each. A
:class:`BlockAllocator` hands out free blocks and counts how many logical blocks (across every block
table) point at each one. Sharing a block (a fork, a beam candidate, a shared prefix) only adds a
reference; the block goes back to the free pool when its last reference is dropped.

Every operation is O(1): the free pool is a stack (a Python list) and the counts a flat list indexed by
block id. A fresh allocator hands out block 0 first; afterwards the most recently freed block is reused
first, which keeps the working set small.
"""

from __future__ import annotations

from paged.core.checks import as_positive_int

__all__ = ["BlockAllocator", "OutOfBlocksError", "DEFAULT_BLOCK_SIZE"]

#: The KV block size (tokens) wherever one is not given: vLLM's default and the paper's (§7.2: 16 is
#: large enough to use the GPU well and small enough to waste little of a block).
DEFAULT_BLOCK_SIZE = 16


class OutOfBlocksError(MemoryError):
    """No free physical block is left for an allocation.

    A :class:`MemoryError`, so callers that only care that memory ran out can catch that. The
    scheduler avoids it by asking ``can_allocate`` / ``can_append_slots`` first: seeing it means a
    caller skipped that check.
    """


class BlockAllocator:
    """Free pool and reference counts of the physical KV blocks (§4.2).

    Args:
        num_blocks: physical blocks in the cache (blocks, ≥ 1).
        block_size: token slots per block (tokens, ≥ 1); the paper's default is 16 (§7.2).

    Raises:
        ValueError: if ``num_blocks`` or ``block_size`` is not a positive integer.
        MemoryError: if the host cannot hold the bookkeeping (about 16 bytes a block).
    """

    __slots__ = ("_num_blocks", "_block_size", "_free", "_ref_counts")

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self._num_blocks = as_positive_int(num_blocks, "num_blocks")
        self._block_size = as_positive_int(block_size, "block_size")
        try:
            # A stack of free ids with block 0 on top, and one count per block.
            self._free: list[int] = list(range(self._num_blocks - 1, -1, -1))
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
        """Take a free block and give it reference count 1. O(1).

        Returns:
            The physical block id, in ``[0, num_blocks)``.

        Raises:
            OutOfBlocksError: if no block is free.
        """
        block_id = self._take_free_block()
        self._ref_counts[block_id] = 1
        return block_id

    def free(self, block_id: int) -> None:
        """Drop one reference to ``block_id``; at zero the block returns to the free pool. O(1).

        Raises:
            ValueError: if the block is already free (a double free) or the id is out of range.
            TypeError: if the id is not an integer.
        """
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

        Raises:
            ValueError: if the block is free (sharing it would corrupt the pool) or the id is out of range.
            TypeError: if the id is not an integer.
        """
        if self.ref_count(block_id) == 0:
            raise ValueError(f"cannot share physical block {block_id}: it is free")
        self._ref_counts[block_id] += 1

    def incref_all(self, blocks: list[int]) -> None:
        """Add one reference to each of a block table's ``blocks`` (a fork, §4.4): all or nothing. O(blocks).

        Raises:
            ValueError: if a block is free or an id is out of range; no count has changed then.
            TypeError: if an id is not an integer; no count has changed then.
        """
        counts = self._ref_counts
        self._check_not_negative(blocks)
        try:
            for block_id in blocks:
                if not counts[block_id]:
                    # Undo the blocks before it (its first occurrence: a repeat would have found it counted).
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
        """Drop one reference to each of a block table's ``blocks`` (distinct ids), tail first (:meth:`free`
        of each, in that order): all or nothing. O(blocks).

        Raises:
            ValueError: if a block is already free or an id is out of range; no count has changed then.
            TypeError: if an id is not an integer; no count has changed then.
        """
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

    def ref_count(self, block_id: int) -> int:
        """Logical blocks, across every table, that point at ``block_id``. O(1).

        Raises:
            ValueError: if the id is out of range.
            TypeError: if the id is not an integer.
        """
        if type(block_id) is not int or not 0 <= block_id < self._num_blocks:
            raise self._bad_id(block_id)
        return self._ref_counts[block_id]

    def _check_not_negative(self, blocks: list[int]) -> None:
        """Refuse a negative id before a whole-table operation: as a list index it would name a block from
        the end. O(blocks), in C; other bad ids fail at their index and are named there."""
        try:
            if not blocks or min(blocks) >= 0:
                return
        except TypeError:  # ids that do not compare with each other
            pass
        raise self._bad_id(blocks[self._first_bad_id(blocks)])

    def _indexes_a_count(self, block_id) -> bool:
        """True if ``block_id`` indexes the counts (an id in range, or any value Python takes as an index)."""
        try:
            self._ref_counts[block_id]
        except (IndexError, TypeError):
            return False
        return True

    def _first_bad_id(self, blocks: list[int]) -> int | None:
        """Position of the first id in ``blocks`` that is not an integer in range (None if every id is)."""
        n = self._num_blocks
        return next((i for i, b in enumerate(blocks) if type(b) is not int or not 0 <= b < n), None)

    def _bad_id(self, block_id) -> Exception:
        """The error for an id that is not a block's: a float or bool would index the counts silently."""
        if type(block_id) is not int:
            return TypeError(f"block id must be an integer, got {block_id!r}")
        return ValueError(f"block id {block_id} out of range [0, {self._num_blocks})")

    def recount(self, counts: list[int]) -> None:
        """Set each block's reference count from ``counts`` (one per block: the table entries that point
        at it) and make the free pool hold exactly the blocks at 0, those already free keeping their
        order. This repairs the bookkeeping after an interrupt (Ctrl-C) cut a free, fork or growth
        short, whatever line it stopped on. O(blocks).

        Raises:
            ValueError: if ``counts`` does not give one count ≥ 0 per block.
        """
        if len(counts) != self._num_blocks or min(counts, default=0) < 0:
            raise ValueError(f"recount needs one count >= 0 for each of the {self._num_blocks} blocks")
        self._ref_counts[:] = counts
        self._rebuild_free_pool()

    # -- the free pool (a prefix-caching allocator keeps freed cached blocks apart, prefix_caching.py) --
    def _rebuild_free_pool(self) -> None:
        """The free stack from the counts: the blocks already on it in their order (once each), the
        other blocks at 0 beneath them. O(blocks)."""
        counts = self._ref_counts
        kept = [b for b in dict.fromkeys(self._free) if 0 <= b < self._num_blocks and counts[b] == 0]
        known = set(kept)
        self._free[:] = [b for b in range(self._num_blocks - 1, -1, -1) if counts[b] == 0 and b not in known] + kept

    def _take_free_block(self) -> int:
        """Pop the top of the free stack (the most recently freed block). O(1)."""
        try:
            return self._free.pop()
        except IndexError:
            raise OutOfBlocksError(f"no free KV block: all {self._num_blocks} blocks are in use") from None

    def _return_free_block(self, block_id: int) -> None:
        """Push a block whose last reference was dropped on the free stack. O(1)."""
        self._free.append(block_id)

    def check_invariants(self) -> None:
        """Raise AssertionError unless the free stack holds exactly the blocks with count 0, once each,
        and no count is negative. O(blocks)."""
        free, counts = self._free, self._ref_counts
        assert len(set(free)) == len(free), f"a block is twice in the free pool: {sorted(free)}"
        assert set(free) == {b for b in range(self._num_blocks) if counts[b] == 0}, \
            "the free pool differs from the blocks with reference count 0"
        assert all(c >= 0 for c in counts), "negative reference count"

    def __repr__(self) -> str:
        return f"BlockAllocator(num_blocks={self._num_blocks}, block_size={self._block_size}, free={len(self._free)})"
