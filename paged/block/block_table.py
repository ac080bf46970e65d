"""One sequence's block table: logical blocks → physical blocks (paper §4.2–§4.4).

Logical block ``i`` holds tokens ``i*block_size .. (i+1)*block_size-1`` in physical block ``physical_blocks[i]``.
A block is allocated only when a token crosses a block boundary, so a sequence wastes at most its last block's
tail (§4.3). ``fork`` shares every block (§4.4). Only the last block is written; a shared one is first copied
(copy-on-write), the ``(src, dst)`` pair returned for the caller to copy in one batched step (§5.1).
"""

from __future__ import annotations

from paged.block.allocator import BlockAllocator, OutOfBlocksError
from paged.block.copy_on_write import copy_on_write
from paged.core.checks import as_int

__all__ = ["BlockTable"]


class BlockTable:
    """Logical→physical block map of one sequence: ``allocator``'s ``blocks`` in logical order (copied; the caller
    hands over one reference to each), holding ``num_tokens`` tokens, which must need exactly that many blocks.
    ``validate=False`` skips the checks, for blocks held once each. O(blocks). Raises TypeError on a non-allocator
    or a count or id not an integer; ValueError if the tokens do not fit or a block is free, bad or repeated."""

    __slots__ = ("_allocator", "_block_size", "_ref_counts", "_blocks", "_num_tokens")

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
        self._block_size = allocator.block_size  # read on every append; the allocator's never changes
        self._ref_counts = allocator.ref_counts  # the allocator's read-only view, read on every append
        self._blocks: list[int] = blocks
        self._num_tokens = num_tokens

    @property
    def allocator(self) -> BlockAllocator:
        """The allocator the blocks come from."""
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
        """True if the next token lands in a shared (count > 1), partly filled last block, which needs a private copy
        (§4.4); a full block is never written again. The one place a copy is decided. O(1)."""
        return self._num_tokens % self._block_size != 0 and self._ref_counts[self._blocks[-1]] > 1

    def num_new_blocks(self, num_tokens: int) -> int:
        """Free blocks :meth:`append_tokens` of ``num_tokens`` takes (blocks): new ones past the end, plus one for a
        copy-on-write. O(1). Raises ValueError if ``num_tokens`` is negative, TypeError if it is not an integer."""
        if type(num_tokens) is not int:
            num_tokens = as_int(num_tokens, "a token count")
        if num_tokens <= 0:
            if num_tokens < 0:
                raise ValueError(f"cannot append a negative number of tokens ({num_tokens})")
            return 0
        return -(-(self._num_tokens + num_tokens) // self._block_size) - len(self._blocks) + self.needs_copy_on_write()

    def blocks_past_end(self, num_tokens: int) -> int:
        """Blocks past the end that room for ``num_tokens`` tokens in all would add (blocks, ≥ 0). O(1)."""
        return max(0, -(-num_tokens // self._block_size) - len(self._blocks))

    def append_tokens(self, num_tokens: int) -> list[tuple[int, int]]:
        """Make room for ``num_tokens`` more tokens (§4.3), all or nothing. O(1 + new blocks). If the first new token
        lands in a shared last block, a fresh block replaces it (§4.4) and ``[(src, dst)]`` is returned to copy, else
        ``[]``. Raises OutOfBlocksError if too few blocks are free, ValueError / TypeError on a bad count."""
        if type(num_tokens) is not int:
            num_tokens = as_int(num_tokens, "a token count")
        if num_tokens <= 0:
            if num_tokens < 0:
                raise ValueError(f"cannot append a negative number of tokens ({num_tokens})")
            return []
        copy = self.needs_copy_on_write()  # decided once: the planning below and the copy agree
        new_blocks = -(-(self._num_tokens + num_tokens) // self._block_size) - len(self._blocks)
        allocator = self._allocator
        needed = new_blocks + copy
        if needed and needed > (free := allocator.num_free_blocks):  # all or nothing: checked before any change
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
        """A child table sharing every block (parallel sampling, beam search; §4.4); allocates nothing. O(blocks)."""
        self._allocator.incref_all(self._blocks)
        return type(self)(self._allocator, self._blocks, self._num_tokens, validate=False)

    def free(self) -> None:
        """Drop a reference to each block, tail first (as vLLM: with prefix caching the tail, least likely shared,
        is evicted first), and empty the table. O(blocks). Raises ValueError, changing nothing, on a free block."""
        self._allocator.free_all(self._blocks)
        self._blocks = []
        self._num_tokens = 0

    def slot_mapping(self, start: int, end: int) -> list[int]:
        """Slot of each token ``start .. end-1``: ``block × block_size + offset``, its row in the cache flattened to
        ``[num_blocks * block_size, num_kv_heads, head_size]``. O(end - start). Raises ValueError unless
        ``0 <= start <= end <= num_tokens``, TypeError on a bound not an integer."""
        start, end = as_int(start, "slot_mapping's start"), as_int(end, "slot_mapping's end")
        if not 0 <= start <= end <= self._num_tokens:
            raise ValueError(f"slot_mapping({start}, {end}) outside the table's {self._num_tokens} tokens")
        block_size, blocks = self._block_size, self._blocks
        return [blocks[i // block_size] * block_size + i % block_size for i in range(start, end)]

    def check_invariants(self) -> None:
        """Assert that the table covers its tokens with the fewest blocks. O(1)."""
        needed = -(-self._num_tokens // self._block_size)
        assert len(self._blocks) == needed, f"{len(self._blocks)} blocks for {self._num_tokens} tokens"

    def __repr__(self) -> str:
        return f"BlockTable(num_tokens={self._num_tokens}, blocks={self._blocks})"
