"""Automatic prefix caching in the block allocator (paper §4.4 "shared prefix"; vLLM's APC).

A full block's KV depends only on its tokens and those before it, so it is named by a hash chained through the
blocks before it (:func:`hash_block_tokens`). A prompt starting with cached blocks takes them (``reuse``) instead
of computing their KV. A hit is confirmed by the key ``(parent content id, tokens, extra keys)``, never by the
hash alone (a content id is given once to each content), so a collision only costs a comparison. A freed cached
block stays findable until needed: uncached free blocks go first, cached ones wait in a
:class:`~paged.block.free_queue.FreeBlockQueue` (LRU). A block registered while its KV is being computed stays
*pending* until that iteration completes (``commit``); ``rollback`` forgets it if interrupted.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable

from paged.block.allocator import BlockAllocator, OutOfBlocksError
from paged.block.free_queue import FreeBlockQueue

__all__ = ["PrefixCachingBlockAllocator", "hash_block_tokens", "NO_PARENT"]

#: Parent hash and parent content id of a sequence's first block.
NO_PARENT = -1


def hash_block_tokens(parent_hash: int, token_ids: tuple[int, ...], extra_keys: Hashable = None) -> int:
    """Chained hash of one full block: Python's tuple hash of ``(parent_hash, token_ids, extra_keys)``, an int,
    deterministic for integer tokens whatever ``PYTHONHASHSEED``. ``parent_hash``: :data:`NO_PARENT` for a first
    block; ``token_ids``: its ``block_size`` tokens; ``extra_keys``: anything else the KV depends on. O(tokens)."""
    return hash((parent_hash, token_ids, extra_keys))


class PrefixCachingBlockAllocator(BlockAllocator):
    """A :class:`~paged.block.BlockAllocator` whose freed full blocks stay reusable by content (module docstring).
    Any ``hash_fn(parent_hash, token_ids, extra_keys) -> int`` is correct (hits are confirmed by the tokens); a
    weak one is only slower. :meth:`allocate` and :meth:`free` stay O(1), an eviction adding O(its hash's bucket)."""

    __slots__ = ("_queue", "_hash", "_key", "_cid", "_cached", "_next_cid", "hash_fn", "_pending")

    def __init__(self, num_blocks: int, block_size: int, *,
                 hash_fn: Callable[[int, tuple[int, ...], Hashable], int] = hash_block_tokens) -> None:
        super().__init__(num_blocks, block_size)  # self._free: the stack of uncached free blocks
        self._queue = FreeBlockQueue(num_blocks)  # evictable blocks, least recently freed first
        self._hash: list[int | None] = [None] * num_blocks  # chained hash of a cached block, else None
        self._key: list[tuple | None] = [None] * num_blocks  # (parent content id, tokens, extra keys)
        self._cid: list[int] = [NO_PARENT] * num_blocks  # content id of a cached block
        self._cached: dict[int, list[int]] = {}  # hash -> cached blocks with that hash
        self._next_cid = 0
        self._pending: list[tuple[int, int]] = []  # (block, content id) registered, KV not yet written
        self.hash_fn = hash_fn

    @property
    def num_free_blocks(self) -> int:
        """Blocks with reference count 0, cached or not: what an allocation may take (blocks). O(1)."""
        return len(self._free) + len(self._queue)

    @property
    def num_evictable_blocks(self) -> int:
        """Free blocks that still hold cached KV (blocks). O(1)."""
        return len(self._queue)

    @property
    def num_cached_blocks(self) -> int:
        """Blocks registered in the cache, in use or evictable (blocks). O(distinct hashes)."""
        return sum(len(bucket) for bucket in self._cached.values())

    # -- the free pool: the base stack of uncached blocks (handed out first), then the evictable queue --
    def _take_free_block(self) -> int:
        """The top uncached free block, else the LRU evictable one (its entry evicted). O(1), an eviction O(bucket)."""
        if self._free:
            return self._free.pop()
        return self._evict_lru()

    def _return_free_block(self, block_id: int) -> None:
        """An uncached block onto the stack (handed out next), a cached one to the queue's tail. O(1)."""
        if self._hash[block_id] is None:
            self._free.append(block_id)
        else:
            self._queue.push_back(block_id)

    def recount(self, counts: list[int]) -> None:
        """:meth:`BlockAllocator.recount`, also rebuilding the hash buckets from the blocks' hashes. O(blocks)."""
        cached: dict[int, list[int]] = {}
        for block_id, block_hash in enumerate(self._hash):
            if block_hash is None:
                self._key[block_id], self._cid[block_id] = None, NO_PARENT
            else:
                cached.setdefault(block_hash, []).append(block_id)
        self._cached = cached
        super().recount(counts)

    def _rebuild_free_pool(self) -> None:
        """Stack from the free uncached blocks, queue from the free cached ones, each in its old order. O(blocks)."""
        counts, hashes, n = self._ref_counts, self._hash, self._num_blocks
        queued = list(itertools.islice(self._queue, n))  # n links at most: an interrupted push may dangle
        self._free[:] = self._rebuilt_stack(lambda b: counts[b] == 0 and hashes[b] is None)
        self._queue = FreeBlockQueue(n)
        for block_id in dict.fromkeys([*queued, *range(n)]):
            if 0 <= block_id < n and counts[block_id] == 0 and hashes[block_id] is not None:
                self._queue.push_back(block_id)

    def reuse(self, block_id: int) -> None:
        """Take a reference to the cached block ``block_id`` found by :meth:`lookup`, unqueuing it if free. O(1)."""
        if self._ref_counts[block_id] == 0:
            self._queue.remove(block_id)
        self._ref_counts[block_id] += 1

    def is_evictable(self, block_id: int) -> bool:
        """True if ``block_id`` is free and still holds cached KV. O(1)."""
        return self._ref_counts[block_id] == 0 and self._hash[block_id] is not None

    def lookup(self, block_hash: int, parent_cid: int, token_ids: tuple[int, ...],
               extra_keys: Hashable = None) -> tuple[int, int] | None:
        """``(block, content id)`` of the cached block holding ``token_ids`` and ``extra_keys`` (compared exactly)
        after content ``parent_cid`` (:data:`NO_PARENT` first), found by its chained ``block_hash``; else None.
        O(block_size × candidates)."""
        bucket = self._cached.get(block_hash)
        if bucket:
            key = (parent_cid, token_ids, extra_keys)
            for block in bucket:
                if self._key[block] == key:
                    return block, self._cid[block]
        return None

    def register(self, block_id: int, block_hash: int, parent_cid: int, token_ids: tuple[int, ...],
                 extra_keys: Hashable = None) -> int:
        """Cache the in-use full block ``block_id`` as ``token_ids`` after ``parent_cid``, pending until :meth:`commit`;
        return the content id the next block chains to, another block's if it already caches this content (then
        ``block_id`` stays uncached). O(block_size × candidates). Raises ValueError if free or cached otherwise."""
        if self._ref_counts[block_id] == 0:
            raise ValueError(f"block {block_id} is free: only a block in use can be registered")
        if self._hash[block_id] is not None:  # already cached (a block shared with a sibling)
            if self._key[block_id] != (parent_cid, token_ids, extra_keys):
                raise ValueError(f"block {block_id} is cached with other content")
            return self._cid[block_id]
        hit = self.lookup(block_hash, parent_cid, token_ids, extra_keys)
        if hit is not None:
            return hit[1]
        cid = self._next_cid
        self._next_cid += 1
        self._pending.append((block_id, cid))  # first: an interrupt below still finds the entry to undo
        self._hash[block_id] = block_hash
        self._key[block_id] = (parent_cid, token_ids, extra_keys)
        self._cid[block_id] = cid
        self._cached.setdefault(block_hash, []).append(block_id)
        return cid

    def commit(self) -> None:
        """The pending blocks' KV is written (their iteration completed): their entries stay. O(1) amortized."""
        if self._pending:
            self._pending.clear()

    def rollback(self) -> int:
        """Forget the pending entries (their iteration did not complete), so nothing hits unwritten KV; a dropped
        free block becomes a plain free one. Returns how many were dropped. O(pending × bucket)."""
        pending, self._pending = self._pending, []
        dropped = 0
        for block_id, cid in reversed(pending):
            # NO_PARENT: an interrupted register set the hash but not yet the content id.
            if self._hash[block_id] is not None and self._cid[block_id] in (cid, NO_PARENT):
                self._uncache(block_id)
                dropped += 1
        return dropped

    def reset(self) -> bool:
        """Drop every entry, for new weights (vLLM's ``reset_prefix_cache``): True if done; False, changing
        nothing, while any block is in use. O(blocks)."""
        if self.num_free_blocks != self._num_blocks:
            return False
        for block_id in range(self._num_blocks):
            if self._hash[block_id] is not None:
                self._uncache(block_id)
        self._pending.clear()
        return True

    def _uncache(self, block_id: int) -> None:
        """Forget ``block_id``'s content; a free one moves to the top of the uncached stack."""
        self._forget(block_id)
        if self._ref_counts[block_id] == 0:
            self._queue.remove(block_id)
            self._free.append(block_id)

    def check_invariants(self) -> None:
        """Assert that the stack holds the free uncached blocks and the queue the free cached ones, once each, and
        each cached block is once in its hash's bucket, with a unique content id. O(blocks)."""
        counts = self._ref_counts
        stack, queue = list(self._free), list(self._queue)
        assert len(queue) == len(self._queue), "evictable queue length differs from its links"
        free = stack + queue
        assert len(set(free)) == len(free), f"a block is twice in the free pool: {free}"
        assert set(free) == {b for b in range(self._num_blocks) if counts[b] == 0}, \
            f"free blocks {sorted(free)} != blocks with count 0"
        assert all(c >= 0 for c in counts), "negative reference count"
        assert all(self._hash[b] is None for b in stack), "a cached block is on the uncached stack"
        assert all(self._hash[b] is not None for b in queue), "an uncached block is in the evictable queue"
        members = [b for bucket in self._cached.values() for b in bucket]
        assert len(set(members)) == len(members), "a block is cached twice"
        assert set(members) == {b for b in range(self._num_blocks) if self._hash[b] is not None}, \
            "cached blocks and hash buckets differ"
        for block_hash, bucket in self._cached.items():
            assert bucket and all(self._hash[b] == block_hash for b in bucket), f"bucket {block_hash} inconsistent"
        cids = [self._cid[b] for b in members]
        assert len(set(cids)) == len(cids), "two cached blocks share a content id"

    def _evict_lru(self) -> int:
        """Pop the LRU evictable block and forget its content (OutOfBlocksError if none). O(bucket)."""
        try:
            block_id = self._queue.popleft()
        except IndexError:
            raise OutOfBlocksError(f"no free KV block: all {self._num_blocks} blocks are in use") from None
        self._forget(block_id)
        return block_id

    def _forget(self, block_id: int) -> None:
        """Drop ``block_id`` from its bucket and clear its hash, key and content id."""
        block_hash = self._hash[block_id]
        bucket = self._cached[block_hash]
        bucket.remove(block_id)
        if not bucket:
            del self._cached[block_hash]
        self._hash[block_id] = None
        self._key[block_id] = None
        self._cid[block_id] = NO_PARENT

    def free_queue(self) -> list[int]:
        """Free blocks, next handed out first: uncached newest first, then evictable oldest first. O(free blocks)."""
        return self._free[::-1] + list(self._queue)

    def __repr__(self) -> str:
        return (f"PrefixCachingBlockAllocator(num_blocks={self._num_blocks}, block_size={self._block_size}, "
                f"free={self.num_free_blocks}, evictable={len(self._queue)})")
