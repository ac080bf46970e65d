"""Physical block allocator with reference counts (paper §4.2, §4.4).

The KV cache is cut into ``num_blocks`` physical blocks of ``block_size`` token slots each.
A :class:`BlockAllocator` hands out free physical blocks and counts how many logical blocks
(across all block tables) point at each one. Sharing a block (fork, beam search, shared
prefix) only increments its reference count; the block returns to the free pool when its
count drops to zero.

Cost: every per-block operation is O(1). The free pool is a Python list used as a stack
(``pop`` / ``append``), and reference counts live in a flat list indexed by block id. A block
table takes and returns its blocks in bulk (:meth:`BlockAllocator.allocate_blocks`,
:meth:`BlockAllocator.free_blocks`): one Python call per table, not one per block.
"""

from __future__ import annotations

from collections.abc import Iterable

from paged.core.checks import as_positive_int

__all__ = ["BlockAllocator", "OutOfBlocksError"]


class OutOfBlocksError(MemoryError):
    """Raised when the KV cache has no free physical block left.

    A subclass of :class:`MemoryError`, so callers that only care that memory ran out can
    catch that. The scheduler avoids it by asking ``can_allocate`` / ``can_append_slots``
    first; seeing it means a caller skipped that check.
    """


class BlockAllocator:
    """Free pool and reference counts of the physical KV blocks (§4.2).

    Args:
        num_blocks: number of physical blocks in the cache (blocks, ≥ 1).
        block_size: token slots per block (tokens, ≥ 1). The paper's default is 16 (§7.2).

    Raises:
        ValueError: if ``num_blocks`` or ``block_size`` is not a positive integer.
        MemoryError: if the host cannot hold the per-block bookkeeping (~16 bytes a block).

    Blocks are handed out lowest id first on a fresh allocator; afterwards the most recently
    freed block is reused first (a stack), which keeps the working set small.
    """

    __slots__ = ("_num_blocks", "_block_size", "_free", "_ref_counts")

    def __init__(self, num_blocks: int, block_size: int) -> None:
        num_blocks, block_size = as_positive_int(num_blocks, "num_blocks"), as_positive_int(block_size, "block_size")
        self._num_blocks = num_blocks
        self._block_size = block_size
        try:
            # Stack of free block ids; popping from the end hands out block 0 first.
            self._free: list[int] = list(range(num_blocks - 1, -1, -1))
            self._ref_counts: list[int] = [0] * num_blocks
        except MemoryError:  # the bookkeeping is ~16 bytes per block
            raise MemoryError(f"not enough host memory for the bookkeeping of {num_blocks:,} blocks "
                              f"(about {16 * num_blocks / 2**30:.1f} GiB)") from None

    # -- properties -------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        """Total number of physical blocks (blocks)."""
        return self._num_blocks

    @property
    def block_size(self) -> int:
        """Token slots per physical block (tokens)."""
        return self._block_size

    @property
    def num_free_blocks(self) -> int:
        """Blocks in the free pool, i.e. with reference count 0 (blocks)."""
        return len(self._free)

    # -- per-block operations, O(1) each -------------------------------------------------
    def allocate(self) -> int:
        """Take a free physical block and give it reference count 1. O(1).

        Returns:
            The physical block id, in ``[0, num_blocks)``.

        Raises:
            OutOfBlocksError: if no block is free.
        """
        try:
            block_id = self._free.pop()
        except IndexError:
            raise OutOfBlocksError(
                f"no free KV block: all {self._num_blocks} blocks are in use"
            ) from None
        self._ref_counts[block_id] = 1
        return block_id

    def allocate_blocks(self, num_blocks: int) -> list[int]:
        """Take ``num_blocks`` free blocks at once, each with reference count 1: the same blocks, in
        the same order, as that many :meth:`allocate` calls. O(num_blocks), one Python call.

        All or nothing: if fewer blocks are free, nothing is taken.

        Raises:
            OutOfBlocksError: if fewer than ``num_blocks`` blocks are free.
        """
        free = self._free
        if num_blocks > len(free):
            raise OutOfBlocksError(f"need {num_blocks} free KV blocks, {len(free)} of {self._num_blocks} are free")
        if num_blocks <= 0:
            return []
        taken = free[:-num_blocks - 1:-1]  # the stack's top first, as successive pops
        del free[-num_blocks:]
        ref_counts = self._ref_counts
        for block_id in taken:
            ref_counts[block_id] = 1
        return taken

    def free_blocks(self, block_ids: Iterable[int]) -> None:
        """:meth:`free` each block of ``block_ids`` in order (a block table's blocks, tail first). O(1)
        per block, one Python call.

        Unchecked ids (the blocks come from a table, so they are in range); a block already free raises
        as :meth:`free` does, after the blocks before it were freed.

        Raises:
            ValueError: on a double free.
        """
        ref_counts = self._ref_counts
        free = self._free
        for block_id in block_ids:
            count = ref_counts[block_id]
            if count == 1:
                ref_counts[block_id] = 0
                free.append(block_id)
            elif count:
                ref_counts[block_id] = count - 1
            else:
                raise ValueError(f"double free: physical block {block_id} is already free")

    def free(self, block_id: int) -> None:
        """Drop one reference to ``block_id``; at zero it returns to the free pool. O(1).

        Raises:
            ValueError: if the block is already free (a double free) or the id is out of range.
            TypeError: if the id is not an integer.
        """
        ref_counts = self._ref_counts
        try:  # costs nothing unless it raises
            if not 0 <= block_id < self._num_blocks:
                raise ValueError(f"block id {block_id} out of range [0, {self._num_blocks})")
            count = ref_counts[block_id]
        except TypeError:
            raise TypeError(f"block id must be an integer, got {block_id!r}") from None
        if count == 0:
            raise ValueError(f"double free: physical block {block_id} is already free")
        count -= 1
        ref_counts[block_id] = count
        if count == 0:
            self._free.append(block_id)

    def incref(self, block_id: int) -> None:
        """Add one reference to an allocated block (a new logical block shares it). O(1).

        Raises:
            ValueError: if the block is free (sharing a free block would corrupt the pool) or
                the id is out of range.
            TypeError: if the id is not an integer.
        """
        if self.ref_count(block_id) == 0:
            raise ValueError(f"cannot share physical block {block_id}: it is free")
        self._ref_counts[block_id] += 1

    def incref_all(self, block_ids: Iterable[int]) -> None:
        """:meth:`incref` every block of ``block_ids`` (a fork). O(1) per block.

        All or nothing: if any block is free or out of range, no count changes.

        Raises:
            ValueError: as :meth:`incref`.
        """
        ref_counts = self._ref_counts
        block_ids = list(block_ids)
        if block_ids and (
            min(block_ids) < 0
            or max(block_ids) >= self._num_blocks
            or 0 in map(ref_counts.__getitem__, block_ids)
        ):
            for block_id in block_ids:
                if not 0 <= block_id < self._num_blocks or ref_counts[block_id] == 0:
                    self.incref(block_id)  # raises the precise error; nothing changed yet
        for block_id in block_ids:
            ref_counts[block_id] += 1

    def share(self, block_ids: list[int]) -> None:
        """Add one reference to each block of a live table that a fork shares (§4.4). O(1) per block.

        Unchecked (the fork hot path of :class:`~paged.block.BlockTable`): every block of a live table
        has a count ≥ 1, an invariant the property tests check. Use :meth:`incref_all` for ids that
        did not come from a table.
        """
        ref_counts = self._ref_counts
        for block_id in block_ids:
            ref_counts[block_id] += 1

    def is_private(self, block_id: int) -> bool:
        """True if exactly one logical block points at the allocated block ``block_id``. O(1).

        Unchecked (a hot path of :class:`~paged.block.BlockTable`): the caller holds the block.
        """
        return self._ref_counts[block_id] == 1

    def ref_count(self, block_id: int) -> int:
        """Number of logical blocks (across all tables) that point at ``block_id``. O(1).

        Raises:
            ValueError: if the id is out of range.
            TypeError: if the id is not an integer.
        """
        try:
            if not 0 <= block_id < self._num_blocks:
                raise ValueError(f"block id {block_id} out of range [0, {self._num_blocks})")
            return self._ref_counts[block_id]
        except TypeError:
            raise TypeError(f"block id must be an integer, got {block_id!r}") from None

    def check_invariants(self) -> None:
        """Raise AssertionError if the pool is inconsistent: the free stack holds exactly the blocks
        with reference count 0, once each, and no count is negative. O(blocks)."""
        counts = self._ref_counts
        free = self._free
        assert len(set(free)) == len(free), f"a block is twice in the free pool: {sorted(free)}"
        assert set(free) == {b for b in range(self._num_blocks) if counts[b] == 0}, \
            "the free pool differs from the blocks with reference count 0"
        assert all(c >= 0 for c in counts), "negative reference count"

    def __repr__(self) -> str:
        return (
            f"BlockAllocator(num_blocks={self._num_blocks}, block_size={self._block_size}, "
            f"free={len(self._free)})"
        )
