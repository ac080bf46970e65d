"""One sequence's block table: logical blocks → physical blocks (paper §4.2–§4.4).

Logical block ``i`` of a sequence holds its tokens ``i*block_size .. (i+1)*block_size-1``;
``physical_blocks[i]`` says where in the KV cache they live. Blocks are allocated on demand,
one whenever a token crosses a block boundary, so a sequence wastes at most the unfilled tail
of its last block (§4.3). ``fork`` shares every block with a child (§4.4); a table that is about
to write into a shared last block first takes a private copy (copy-on-write) and returns the
``(src, dst)`` pair so the caller can copy the KV data in one batched step (§5.1).
"""

from __future__ import annotations

from paged.block.allocator import BlockAllocator, OutOfBlocksError
from paged.block.copy_on_write import copy_on_write, needs_copy
from paged.core.checks import as_int

__all__ = ["BlockTable"]


class BlockTable:
    """Logical→physical block map and token count of one sequence.

    Args:
        allocator: the :class:`BlockAllocator` whose blocks this table holds.

    The table starts empty (no tokens, no blocks).

    Raises:
        TypeError: if ``allocator`` is not a :class:`BlockAllocator`.
    """

    # _capacity is len(_blocks) * block_size (token slots held), _last is _blocks[-1] (None while
    # empty); _counts is the allocator's list of reference counts, read (never written) by the decode
    # step's fast path to see that the last block is private. That fast path (grow_to's first test)
    # is also inlined in PagedKVCacheManager.append_slots_in_order and _append_group, the one reader
    # of these fields outside this class (the latter also calls _grow).
    __slots__ = ("_allocator", "_block_size", "_blocks", "_num_tokens", "_capacity", "_last", "_counts")

    def __init__(self, allocator: BlockAllocator) -> None:
        if not isinstance(allocator, BlockAllocator):
            raise TypeError(f"BlockTable needs a BlockAllocator, got {type(allocator).__name__}")
        self._allocator = allocator
        self._block_size = allocator.block_size
        self._counts = allocator._ref_counts
        self._blocks: list[int] = []
        self._num_tokens = 0
        self._capacity = 0
        self._last = None

    @classmethod
    def _over(cls, allocator: BlockAllocator, blocks: list[int], num_tokens: int) -> BlockTable:
        """A table over ``blocks`` (owned, not copied) holding ``num_tokens`` tokens, unchecked. O(1)."""
        table = cls.__new__(cls)
        table._allocator = allocator
        table._block_size = block_size = allocator.block_size
        table._counts = allocator._ref_counts
        table._blocks = blocks
        table._num_tokens = num_tokens
        table._capacity = len(blocks) * block_size
        table._last = blocks[-1] if blocks else None
        return table

    @classmethod
    def from_blocks(cls, allocator: BlockAllocator, blocks: list[int], num_tokens: int) -> BlockTable:
        """A table over ``blocks`` that the caller already holds one reference to each of.

        Used when blocks move between allocators (swap, §4.5). Takes ownership: the table's
        :meth:`free` drops those references.

        Raises:
            ValueError: if ``num_tokens`` does not need exactly ``len(blocks)`` blocks, or a block
                id is out of range or free (the caller must hold a reference to each).
        """
        num_tokens = as_int(num_tokens, "a token count")
        counts = allocator._ref_counts
        if blocks and (min(blocks) < 0 or max(blocks) >= len(counts) or 0 in map(counts.__getitem__, blocks)):
            for block_id in blocks:  # the precise error: out of range (ref_count raises) or free
                if allocator.ref_count(block_id) == 0:
                    raise ValueError(f"physical block {block_id} is free: the caller must hold a reference to it")
        if -(-num_tokens // allocator.block_size) != len(blocks):
            raise ValueError(
                f"{num_tokens} tokens need {-(-num_tokens // allocator.block_size)} blocks "
                f"of {allocator.block_size}, got {len(blocks)}"
            )
        return cls._over(allocator, list(blocks), num_tokens)

    # -- read-only views --------------------------------------------------------------
    @property
    def allocator(self) -> BlockAllocator:
        """The allocator this table's blocks come from."""
        return self._allocator

    @property
    def physical_blocks(self) -> list[int]:
        """Physical block id of each logical block, in logical order (a copy)."""
        return list(self._blocks)

    @property
    def num_tokens(self) -> int:
        """Token slots this table has made room for (tokens)."""
        return self._num_tokens

    @property
    def num_blocks(self) -> int:
        """Logical blocks in the table (blocks) = ceil(num_tokens / block_size)."""
        return len(self._blocks)

    def num_new_blocks(self, num_tokens: int) -> int:
        """Free blocks that :meth:`append_tokens` of ``num_tokens`` would take (blocks).

        Counts the blocks needed past the current last one, plus one for a copy-on-write
        of a shared, partly filled last block. O(1).

        Raises:
            ValueError: if ``num_tokens`` is negative.
        """
        if num_tokens < 0:
            raise ValueError(f"cannot append a negative number of tokens ({num_tokens})")
        if num_tokens == 0:
            return 0
        blocks = self._blocks
        if self._num_tokens + num_tokens <= self._capacity and self._counts[blocks[-1]] == 1:
            return 0  # fast path: fits in the private last block
        needed = -(-(self._num_tokens + num_tokens) // self._block_size) - len(blocks)
        if self.needs_copy_on_write():
            needed += 1
        return needed

    @property
    def last_block(self) -> int | None:
        """Physical id of the last logical block (the only one ever written), or None if empty."""
        return self._last

    def needs_copy_on_write(self) -> bool:
        """True if the next token would land in a shared, partly filled last block (§4.4). O(1)."""
        blocks = self._blocks
        return bool(blocks) and needs_copy(self._num_tokens, self._block_size, self._allocator.ref_count(blocks[-1]))

    # -- mutation ---------------------------------------------------------------------
    def append_tokens(self, num_tokens: int) -> list[tuple[int, int]]:
        """Make room for ``num_tokens`` more tokens (§4.3, copy-on-write §4.4).

        A new physical block is allocated only when a block boundary is crossed. If the first
        new token lands in a last block whose reference count is above 1, a fresh block
        replaces it in this table, the old block's count drops by one, and ``(src, dst)`` is
        returned so the caller copies that block's KV data (``PagedKVCache.copy_blocks``).

        All or nothing: if the allocator cannot supply every block needed, nothing changes.

        Returns:
            ``[]`` or ``[(src_block, dst_block)]``: the copy-on-write copy to perform.

        Raises:
            ValueError: if ``num_tokens`` is negative.
            TypeError: if ``num_tokens`` is not an integer (a float would corrupt the table).
            OutOfBlocksError: if there are fewer free blocks than the append needs.
        """
        if type(num_tokens) is not int:
            num_tokens = as_int(num_tokens, "a token count")
        return self._grow(num_tokens, strict=True)

    def try_grow_to(self, num_tokens: int) -> list[tuple[int, int]] | None:
        """Room for ``num_tokens`` tokens in all (:meth:`append_tokens` of the difference) if the
        allocator's free blocks cover what it takes (:meth:`num_new_blocks`), else None and nothing
        changes: the check and the append of a decode step in one call. O(1) plus the new blocks.

        Raises:
            ValueError: if ``num_tokens`` is below the tokens the table holds.
            TypeError: if ``num_tokens`` is not an integer (nothing changes).
        """
        if type(num_tokens) is not int:
            num_tokens = as_int(num_tokens, "a token count")
        have = self._num_tokens
        # The common case, before any other work: the tokens fit in a private last block (the test
        # _grow starts with, repeated here to save the call).
        if have < num_tokens <= self._capacity and self._counts[self._last] == 1:
            self._num_tokens = num_tokens
            return []
        if num_tokens < have:
            raise ValueError(f"cannot shrink a table of {have} tokens to {num_tokens}")
        return self._grow(num_tokens - have, strict=False)

    def grow_to(self, num_tokens: int, copies: list[tuple[int, int]]) -> int:
        """The decode step's append (:meth:`paged.block.PagedKVCacheManager.append_slots_in_order`):
        room for ``num_tokens`` tokens in all if the allocator's free blocks cover it, the
        copy-on-write pair (§4.4), if any, appended to ``copies``. O(1) plus the new blocks; a token
        inside a private last block, or the first token past a full one, takes the short way.

        Unchecked (the manager's hot path): ``num_tokens`` is an int, at least the tokens held.

        Returns:
            0 if the tokens fit in the private last block (only the token count changed); 1 if blocks
            were taken (new blocks, a copy-on-write copy); -1 if the free blocks do not cover it
            (nothing changed).
        """
        have = self._num_tokens
        if have < num_tokens <= self._capacity and self._counts[self._last] == 1:
            self._num_tokens = num_tokens
            return 0
        if have == self._capacity and have < num_tokens <= have + self._block_size:
            # A block boundary: the last block is full (shared or not, it is never written again), so
            # one new block and no copy; _grow's general case, in fewer steps.
            try:
                block = self._allocator.allocate()
            except OutOfBlocksError:
                return -1
            self._blocks.append(block)
            self._last = block
            self._capacity += self._block_size
            self._num_tokens = num_tokens
            return 1
        added = self._grow(num_tokens - have, strict=False)
        if added is None:
            return -1
        if added:
            copies.extend(added)
        return 1

    def _grow(self, num_tokens: int, *, strict: bool) -> list[tuple[int, int]] | None:
        """The one body of :meth:`append_tokens` (``strict``: OutOfBlocksError when the free blocks do
        not cover it) and :meth:`try_grow_to` (None then); nothing changes unless all of it fits."""
        if num_tokens < 0:
            raise ValueError(f"cannot append a negative number of tokens ({num_tokens})")
        if not num_tokens:
            return []
        allocator = self._allocator
        blocks = self._blocks
        block_size = self._block_size
        have = self._num_tokens
        shared = bool(blocks) and self._counts[blocks[-1]] > 1
        if not shared and have + num_tokens <= self._capacity:
            self._num_tokens = have + num_tokens  # fast path: fits in the private last block
            return []
        cow = shared and needs_copy(have, block_size, 2)  # the first new token lands in a shared block
        fresh = -(-(have + num_tokens) // block_size) - len(blocks)  # blocks past the last one
        needed = fresh + cow  # as num_new_blocks
        if needed > allocator.num_free_blocks:
            if not strict:
                return None
            raise OutOfBlocksError(
                f"appending {num_tokens} token{'s' * (num_tokens != 1)} needs {needed} free "
                f"block{'s' * (needed != 1)}, {allocator.num_free_blocks} "
                f"{'is' if allocator.num_free_blocks == 1 else 'are'} free"
            )
        copies: list[tuple[int, int]] = []
        if cow:
            copies.append(copy_on_write(allocator, blocks[-1]))  # the shared block keeps its other holders
            blocks[-1] = self._last = copies[-1][1]
        self._num_tokens = have + num_tokens
        if fresh:
            blocks += allocator.allocate_blocks(fresh)
            self._capacity = len(blocks) * block_size
            self._last = blocks[-1]
        return copies

    def fork(self) -> BlockTable:
        """A child table sharing every block of this one (each count +1); allocates nothing.

        O(number of blocks). Used for parallel sampling and beam search (§4.4).
        """
        self._allocator.share(self._blocks)
        return BlockTable._over(self._allocator, self._blocks.copy(), self._num_tokens)

    def free(self) -> None:
        """Release each of this table's blocks once, tail first, and empty the table.

        Freeing the tail first mirrors vLLM: with prefix caching, the least useful blocks
        (the end of a sequence) are evicted first. Freeing an empty table does nothing. O(blocks), one
        allocator call (:meth:`~paged.block.BlockAllocator.free_blocks`).

        Raises:
            ValueError: if a block is already free (the table's bookkeeping was corrupted elsewhere);
                the table then still lists its blocks.
        """
        self._allocator.free_blocks(reversed(self._blocks))
        self._blocks = []
        self._num_tokens = 0
        self._capacity = 0
        self._last = None

    # -- addressing -------------------------------------------------------------------
    def slot_mapping(self, start: int, end: int) -> list[int]:
        """KV cache slot of each token position ``start .. end-1``.

        slot = physical_block × block_size + offset, i.e. the row in a cache flattened to
        ``[num_blocks * block_size, num_kv_heads, head_size]``.

        Raises:
            ValueError: unless ``0 <= start <= end <= num_tokens``.
            TypeError: if ``start`` or ``end`` is not an integer.
        """
        if type(start) is not int or type(end) is not int:
            start, end = as_int(start, "slot_mapping's start"), as_int(end, "slot_mapping's end")
        if not 0 <= start <= end <= self._num_tokens:
            raise ValueError(
                f"slot_mapping({start}, {end}) outside the table's {self._num_tokens} tokens"
            )
        block_size = self._block_size
        blocks = self._blocks
        return [blocks[i // block_size] * block_size + i % block_size for i in range(start, end)]

    def check_invariants(self) -> None:
        """Raise AssertionError unless the table covers its tokens with the fewest blocks and its cached
        fields (slots held, last block) agree with its block list. O(1)."""
        blocks = self._blocks
        assert len(blocks) == -(-self._num_tokens // self._block_size), \
            f"{len(blocks)} blocks for {self._num_tokens} tokens"
        assert self._capacity == len(blocks) * self._block_size, f"capacity {self._capacity} for {len(blocks)} blocks"
        assert self._last == (blocks[-1] if blocks else None), f"last block {self._last} != {blocks[-1:]}"

    def __repr__(self) -> str:
        return f"BlockTable(num_tokens={self._num_tokens}, blocks={self._blocks})"
