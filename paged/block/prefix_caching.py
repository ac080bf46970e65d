"""Automatic prefix caching in the block allocator (paper §4.4 "shared prefix"; vLLM's APC).

A *full* block's KV depends only on its tokens and every token before it, so a full block is named by a
hash chained through the blocks before it: ``hash(parent hash, its tokens, extra keys)``
(:func:`hash_block_tokens`). :class:`PrefixCachingBlockAllocator` maps that hash to the blocks holding
the content:

* a request whose prompt starts with cached blocks takes them (``reuse``) instead of computing their
  KV again;
* a hit is **confirmed by comparing the tokens**, never by the hash alone: each cached block stores its
  key ``(parent content id, tokens, extra keys)``, a content id being a number given once to each
  registered content and never reused; a hash collision only costs a comparison;
* a freed cached block keeps its KV and stays findable until its slot is needed. Free blocks without
  cached KV sit on the plain allocator's stack and are handed out first; cached ones wait behind them in
  a doubly linked queue (:class:`~paged.block.free_queue.FreeBlockQueue`) in the order they were freed,
  so an allocation evicts the least recently freed cached block (LRU) and a hit on a free block unlinks
  it in O(1). vLLM V1's ``BlockPool`` uses the same queue for every free block;
* only computed KV may be found: a block registered while its KV is being computed stays *pending*
  until the iteration that writes it completes (``commit``); if that iteration is interrupted,
  ``rollback`` forgets the pending entries;
* ``reset`` drops the whole cache (the model's weights changed) and, as vLLM's ``reset_prefix_cache``,
  refuses while any block is in use.
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
    """The chained hash of one full block: Python's tuple hash of ``(parent_hash, token_ids,
    extra_keys)`` (an int; deterministic for integer tokens whatever ``PYTHONHASHSEED`` is). O(tokens).

    Args:
        parent_hash: the previous block's hash, :data:`NO_PARENT` for a sequence's first block.
        token_ids: the block's ``block_size`` token ids.
        extra_keys: anything else the KV depends on (None: nothing).
    """
    return hash((parent_hash, token_ids, extra_keys))


class PrefixCachingBlockAllocator(BlockAllocator):
    """A :class:`~paged.block.BlockAllocator` whose freed full blocks stay reusable by content (module docstring).

    Args:
        num_blocks, block_size: as :class:`~paged.block.BlockAllocator`.
        hash_fn: ``hash_fn(parent_hash, token_ids, extra_keys) -> int``, default
            :func:`hash_block_tokens`; any function is correct (hits are confirmed by the tokens),
            a weak one is only slower.

    Costs: :meth:`allocate`, :meth:`free`, :meth:`reuse` O(1) (an eviction adds O(blocks sharing the
    evicted hash)); :meth:`lookup` and :meth:`register` O(block_size + blocks sharing the hash).
    """

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

    # -- counts -----------------------------------------------------------------------
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

    # -- the free pool ------------------------------------------------------------------
    # Head of the free queue first: the base class's stack of uncached free blocks (top first), then the
    # evictable queue (least recently freed first). Uncached blocks come and go as in the plain allocator.
    def _take_free_block(self) -> int:
        """The most recently freed uncached block, else the least recently freed cached one, whose cache
        entry is evicted (LRU). O(1) (an eviction: O(blocks sharing its hash))."""
        if self._free:
            return self._free.pop()
        return self._evict_lru()

    def _return_free_block(self, block_id: int) -> None:
        """A block without cached KV goes on the stack (handed out next); a cached one to the tail of the
        evictable queue (still findable, evicted after every block freed before it). O(1)."""
        if self._hash[block_id] is None:
            self._free.append(block_id)
        else:
            self._queue.push_back(block_id)

    def recount(self, counts: list[int]) -> None:
        """:meth:`BlockAllocator.recount`, and the hash buckets rebuilt from each block's hash (an
        interrupted register or eviction may have changed one and not the other). O(blocks)."""
        cached: dict[int, list[int]] = {}
        for block_id, block_hash in enumerate(self._hash):
            if block_hash is None:
                self._key[block_id], self._cid[block_id] = None, NO_PARENT
            else:
                cached.setdefault(block_hash, []).append(block_id)
        self._cached = cached
        super().recount(counts)

    def _rebuild_free_pool(self) -> None:
        """The stack from the free uncached blocks and the evictable queue from the free cached ones, each
        keeping the order its blocks had (the queue read at most ``num_blocks`` links, in case an
        interrupted push left one dangling). O(blocks)."""
        counts, hashes, n = self._ref_counts, self._hash, self._num_blocks
        queued = list(itertools.islice(self._queue, n))
        self._free[:] = [b for b in self._free if 0 <= b < n and hashes[b] is None]
        super()._rebuild_free_pool()  # the stack, from the uncached blocks alone
        self._free[:] = [b for b in self._free if hashes[b] is None]
        self._queue = FreeBlockQueue(n)
        for block_id in dict.fromkeys([*queued, *range(n)]):
            if 0 <= block_id < n and counts[block_id] == 0 and hashes[block_id] is not None:
                self._queue.push_back(block_id)

    def reuse(self, block_id: int) -> None:
        """Take one reference to the cached block ``block_id`` (a hit): out of the evictable queue if it
        was free. O(1). The caller found it with :meth:`lookup`."""
        if self._ref_counts[block_id] == 0:
            self._queue.remove(block_id)
        self._ref_counts[block_id] += 1

    def is_evictable(self, block_id: int) -> bool:
        """True if ``block_id`` is free and still holds cached KV. O(1)."""
        return self._ref_counts[block_id] == 0 and self._hash[block_id] is not None

    # -- the cache ----------------------------------------------------------------------
    def lookup(self, block_hash: int, parent_cid: int, token_ids: tuple[int, ...],
               extra_keys: Hashable = None) -> tuple[int, int] | None:
        """The cached block holding ``token_ids`` after the content ``parent_cid``, or None.

        Args:
            block_hash: the block's chained hash (from :attr:`hash_fn`), used to find candidates.
            parent_cid: the content id of the verified previous block (:data:`NO_PARENT` for the first).
            token_ids, extra_keys: what the block must hold; compared exactly.

        Returns:
            ``(block, content id)`` of a hit, or None. O(block_size × candidates).
        """
        bucket = self._cached.get(block_hash)
        if bucket:
            key = (parent_cid, token_ids, extra_keys)
            for block in bucket:
                if self._key[block] == key:
                    return block, self._cid[block]
        return None

    def register(self, block_id: int, block_hash: int, parent_cid: int, token_ids: tuple[int, ...],
                 extra_keys: Hashable = None) -> int:
        """Record that the in-use block ``block_id`` now holds ``token_ids`` after ``parent_cid`` (it is
        full and its KV is being computed: the entry is pending until :meth:`commit`). Returns the content id the next block chains to: the
        block's own, or, when another block already holds the same content, that block's (``block_id``
        then stays uncached: one cached block per content). O(block_size × candidates).

        Raises:
            ValueError: if the block is free, or already cached with other content.
        """
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
        """The KV of every pending block has been written (the iteration that computes it completed):
        the entries stay. O(1) amortized."""
        if self._pending:
            self._pending.clear()

    def rollback(self) -> int:
        """Forget every pending entry (the iteration that was to write their KV did not complete), so
        no request can hit a block that was never written; returns how many were dropped. A dropped
        block that is free becomes a plain free block (head of the queue). O(pending × bucket)."""
        pending, self._pending = self._pending, []
        dropped = 0
        for block_id, cid in reversed(pending):
            # NO_PARENT: an interrupted register set the hash but not yet the content id.
            if self._hash[block_id] is not None and self._cid[block_id] in (cid, NO_PARENT):
                self._uncache(block_id)
                dropped += 1
        return dropped

    def reset(self) -> bool:
        """Drop every cache entry (vLLM's ``reset_prefix_cache``): True if done; False, changing
        nothing, while any block is in use (its KV may be read; vLLM refuses likewise). Used when the
        model's weights change, which makes every cached KV stale. O(blocks)."""
        if self.num_free_blocks != self._num_blocks:
            return False
        for block_id in range(self._num_blocks):
            if self._hash[block_id] is not None:
                self._uncache(block_id)
        self._pending.clear()
        return True

    def _uncache(self, block_id: int) -> None:
        """Forget the cached content of ``block_id``; a free block moves to the head of the free queue
        (the top of the stack)."""
        self._forget(block_id)
        if self._ref_counts[block_id] == 0:
            self._queue.remove(block_id)
            self._free.append(block_id)

    def check_invariants(self) -> None:
        """Raise AssertionError if the pool is inconsistent: the stack holds exactly the free blocks
        without cached KV and the evictable queue exactly the free cached ones, once each; every cached
        block sits in its hash's bucket once, with a content id no other block has. O(blocks)."""
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
        """Take the least recently freed evictable block out of the queue and forget its cached content
        (it is being handed out for new KV; the caller sets its count). O(blocks sharing its hash).

        Raises:
            OutOfBlocksError: if no block is evictable either.
        """
        try:
            block_id = self._queue.popleft()
        except IndexError:
            raise OutOfBlocksError(f"no free KV block: all {self._num_blocks} blocks are in use") from None
        self._forget(block_id)
        return block_id

    def _forget(self, block_id: int) -> None:
        """Drop ``block_id`` from its hash's bucket and clear its hash, key and content id."""
        block_hash = self._hash[block_id]
        bucket = self._cached[block_hash]
        bucket.remove(block_id)
        if not bucket:
            del self._cached[block_hash]
        self._hash[block_id] = None
        self._key[block_id] = None
        self._cid[block_id] = NO_PARENT

    def free_queue(self) -> list[int]:
        """The free blocks from head (next handed out) to tail (a copy): the uncached ones, most recently
        freed first, then the evictable ones, least recently freed first. O(free blocks)."""
        return self._free[::-1] + list(self._queue)

    def __repr__(self) -> str:
        return (f"PrefixCachingBlockAllocator(num_blocks={self._num_blocks}, block_size={self._block_size}, "
                f"free={self.num_free_blocks}, evictable={len(self._queue)})")
