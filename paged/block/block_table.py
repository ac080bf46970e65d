"""One sequence's block table: logical blocks → physical blocks (paper §4.2–§4.4).

Logical block ``i`` of a sequence holds its tokens ``i*block_size .. (i+1)*block_size-1``, and
``physical_blocks[i]`` says where in the KV cache they live. A block is allocated only when a token
crosses a block boundary, so a sequence wastes at most the unfilled tail of its last block (§4.3).
``fork`` shares every block with a child (§4.4). Only the last block is ever written; when it is shared
and partly filled, the next append first gives this table a private copy (copy-on-write, decided by
:meth:`BlockTable.needs_copy_on_write`, taken by :func:`paged.block.copy_on_write.copy_on_write`) and
returns the ``(src, dst)`` pair, so the caller copies the KV data in one batched step (§5.1).
"""

from __future__ import annotations

from paged.block.allocator import BlockAllocator, OutOfBlocksError
from paged.block.copy_on_write import copy_on_write
from paged.core.checks import as_int

__all__ = ["BlockTable"]


class BlockTable:
    """Logical→physical block map and token count of one sequence.

    Args:
        allocator: the :class:`BlockAllocator` whose blocks this table holds.
        blocks: physical blocks in logical order, one reference to each of which the caller holds and
            hands over to the table (its :meth:`free` drops them): a swapped sequence's new blocks
            (§4.5), a planned prefill's; empty (the default) for a new sequence. Copied.
        num_tokens: tokens those blocks hold (tokens); they must need exactly ``len(blocks)`` blocks.
        validate: False skips the checks below, for blocks known to be held once each (a fork's copy, a
            swap's new blocks).

    Raises:
        TypeError: if ``allocator`` is not a :class:`BlockAllocator`, or a count or id is not an integer.
        ValueError: if ``num_tokens`` does not need exactly ``len(blocks)`` blocks, or a block is free, out
            of range or listed twice. O(blocks).
    """

    __slots__ = ("_allocator", "_block_size", "_blocks", "_num_tokens")

    def __init__(self, allocator: BlockAllocator, blocks=(), num_tokens: int = 0, *, validate: bool = True) -> None:
        blocks = list(blocks)  # the table's own list
        if validate:
            if not isinstance(allocator, BlockAllocator):
                raise TypeError(f"BlockTable needs a BlockAllocator, got {type(allocator).__name__}")
            num_tokens = as_int(num_tokens, "a token count")
            if num_tokens < 0:
                raise ValueError(f"a block table holds a token count ≥ 0, got {num_tokens}")
            for block_id in blocks:
                if allocator.ref_count(block_id) == 0:
                    raise ValueError(f"physical block {block_id} is free: the caller must hold a reference to it")
            if len(set(blocks)) != len(blocks):  # one reference per logical block: a repeat would be freed twice
                repeated = sorted({b for b in blocks if blocks.count(b) > 1})
                raise ValueError(f"physical block(s) {repeated} appear twice in one table")
            needed = -(-num_tokens // allocator.block_size)
            if needed != len(blocks):
                raise ValueError(f"{num_tokens} tokens need {needed} blocks of {allocator.block_size}, "
                                 f"got {len(blocks)}")
        self._allocator = allocator
        self._block_size = allocator.block_size  # read on every append: kept, as the allocator's never changes
        self._blocks: list[int] = blocks
        self._num_tokens = num_tokens

    # -- read-only views --------------------------------------------------------------
    @property
    def allocator(self) -> BlockAllocator:
        """The allocator this table's blocks come from."""
        return self._allocator

    @property
    def physical_blocks(self) -> list[int]:
        """Physical block id of each logical block, in logical order (a copy). O(blocks)."""
        return list(self._blocks)

    @property
    def num_tokens(self) -> int:
        """Token slots this table has made room for (tokens)."""
        return self._num_tokens

    @property
    def num_blocks(self) -> int:
        """Logical blocks in the table (blocks): ``ceil(num_tokens / block_size)``."""
        return len(self._blocks)

    @property
    def last_block(self) -> int | None:
        """Physical id of the last logical block (the only one ever written), or None if empty."""
        return self._blocks[-1] if self._blocks else None

    def needs_copy_on_write(self) -> bool:
        """True if the next token lands in a shared, partly filled last block (§4.4): the one place a copy
        is decided. O(1).

        The next token goes into the last block only while that block is partly filled (a full block is
        never written again: the next token starts a fresh one); writing there needs a private copy when
        another logical block also points at it (reference count above 1).
        """
        return self._num_tokens % self._block_size != 0 and self._allocator.ref_count(self._blocks[-1]) > 1

    def num_new_blocks(self, num_tokens: int) -> int:
        """Free blocks that :meth:`append_tokens` of ``num_tokens`` takes (blocks): those past the last
        one, plus one for the copy-on-write of a shared, partly filled last block. O(1).

        Raises:
            ValueError: if ``num_tokens`` is negative.
        """
        if num_tokens < 0:
            raise ValueError(f"cannot append a negative number of tokens ({num_tokens})")
        if num_tokens == 0:
            return 0
        return -(-(self._num_tokens + num_tokens) // self._block_size) - len(self._blocks) + self.needs_copy_on_write()

    def blocks_past_end(self, num_tokens: int) -> int:
        """Blocks past the last one that room for ``num_tokens`` tokens in all would add (blocks, ≥ 0).
        O(1)."""
        return max(0, -(-num_tokens // self._block_size) - len(self._blocks))

    # -- mutation ---------------------------------------------------------------------
    def append_tokens(self, num_tokens: int) -> list[tuple[int, int]]:
        """Make room for ``num_tokens`` more tokens (§4.3), copying a shared last block first (§4.4).

        A new block is allocated only when a block boundary is crossed. If the first new token lands in
        a last block other tables share, a fresh block replaces it in this table, the shared block loses
        this table's reference, and ``(src, dst)`` is returned: the caller copies that block's KV data
        (``PagedKVCache.copy_blocks``). All or nothing: if the free blocks do not cover the append,
        nothing changes. O(1) plus the new blocks.

        Returns:
            ``[]`` or ``[(src_block, dst_block)]``: the copy-on-write copy to perform.

        Raises:
            ValueError: if ``num_tokens`` is negative.
            TypeError: if ``num_tokens`` is not an integer (a float would corrupt the table).
            OutOfBlocksError: if fewer blocks are free than the append takes.
        """
        if type(num_tokens) is not int:
            num_tokens = as_int(num_tokens, "a token count")
        if num_tokens <= 0:
            if num_tokens < 0:
                raise ValueError(f"cannot append a negative number of tokens ({num_tokens})")
            return []
        copy = self.needs_copy_on_write()  # decided once: the planning below and the copy agree
        new_blocks = -(-(self._num_tokens + num_tokens) // self._block_size) - len(self._blocks)
        allocator = self._allocator
        free = allocator.num_free_blocks
        if new_blocks + copy > free:  # all or nothing: checked before anything changes
            needed = new_blocks + copy
            raise OutOfBlocksError(f"appending {num_tokens} token{'s' * (num_tokens != 1)} needs {needed} free "
                                   f"block{'s' * (needed != 1)}, {free} {'is' if free == 1 else 'are'} free")
        copies = []
        if copy:
            copies.append(copy_on_write(allocator, self._blocks[-1]))
            self._blocks[-1] = copies[0][1]
        self._num_tokens += num_tokens
        for _ in range(new_blocks):
            self._blocks.append(allocator.allocate())
        return copies

    def fork(self) -> BlockTable:
        """A child table sharing every block of this one (each block gains a reference, §4.4); allocates
        nothing. O(blocks). Used for parallel sampling and beam search."""
        self._allocator.incref_all(self._blocks)
        return type(self)(self._allocator, self._blocks, self._num_tokens, validate=False)

    def free(self) -> None:
        """Drop this table's reference to each of its blocks, tail first, and empty the table. O(blocks).

        Tail first, as vLLM frees: with prefix caching the end of a sequence is the least likely to be
        shared again, so it is evicted first.

        Raises:
            ValueError: if a block is already free (the bookkeeping was corrupted elsewhere); nothing has
                changed then.
        """
        self._allocator.free_all(self._blocks)
        self._blocks = []
        self._num_tokens = 0

    # -- addressing -------------------------------------------------------------------
    def slot_mapping(self, start: int, end: int) -> list[int]:
        """KV cache slot of each token position ``start .. end-1``: ``physical block × block_size +
        offset``, the row in a cache flattened to ``[num_blocks * block_size, num_kv_heads, head_size]``.
        O(end - start).

        Raises:
            ValueError: unless ``0 <= start <= end <= num_tokens``.
            TypeError: if ``start`` or ``end`` is not an integer.
        """
        start, end = as_int(start, "slot_mapping's start"), as_int(end, "slot_mapping's end")
        if not 0 <= start <= end <= self._num_tokens:
            raise ValueError(f"slot_mapping({start}, {end}) outside the table's {self._num_tokens} tokens")
        block_size, blocks = self._block_size, self._blocks
        return [blocks[i // block_size] * block_size + i % block_size for i in range(start, end)]

    def check_invariants(self) -> None:
        """Raise AssertionError unless the table covers its tokens with the fewest blocks. O(1)."""
        needed = -(-self._num_tokens // self._block_size)
        assert len(self._blocks) == needed, f"{len(self._blocks)} blocks for {self._num_tokens} tokens"

    def __repr__(self) -> str:
        return f"BlockTable(num_tokens={self._num_tokens}, blocks={self._blocks})"
