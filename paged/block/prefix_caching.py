"""Automatic prefix caching in the block allocator (paper §4.4 "shared prefix"; vLLM's APC).

A *full* block's KV depends only on its tokens and every token before it, so a full block can be
named by a hash chained through the blocks before it: ``hash(parent block's hash, its tokens, extra
keys)`` (:func:`hash_block_tokens`; extra keys separate caches that must not mix, e.g. adapters).
:class:`PrefixCachingBlockAllocator` keeps a map from that hash to the blocks holding that content:

* a request whose prompt starts with cached blocks takes them (:meth:`~PrefixCachingBlockAllocator.reuse`)
  instead of computing their KV again;
* a hit is **confirmed by comparing the tokens**, never by the hash alone: each cached block stores
  its key ``(parent content id, tokens, extra keys)``, where a content id is a number given once to
  each registered content and never reused, so equal keys mean the same tokens after the same
  verified parent. A hash collision (tested with a deliberately weak hash) only costs a comparison;
* a freed cached block keeps its KV and stays findable until its slot is needed: free blocks form a
  doubly linked queue (:class:`~paged.block.free_queue.FreeBlockQueue`) with uncached blocks at the
  head (handed out first) and cached ones at the tail in the order they were freed, so allocation
  evicts the least recently freed cached block (LRU), and a hit on a free block unlinks it in O(1);
* free (uncached) + evictable (cached, reference count 0) + in use (count ≥ 1) blocks are the
  ``num_blocks`` distinct blocks, always; ``num_free_blocks`` (what admission may take) is the first
  two together (:meth:`~PrefixCachingBlockAllocator.check_invariants` checks all of this);
* only KV that was computed may be found: a block registered while its KV is still being computed is
  *pending* until the iteration that writes it completes (:meth:`~PrefixCachingBlockAllocator.commit`);
  if that iteration is interrupted, :meth:`~PrefixCachingBlockAllocator.rollback` forgets the pending
  entries, so no later request hits a block that was never written;
* :meth:`~PrefixCachingBlockAllocator.reset` drops the whole cache (after the model's weights change)
  and, as vLLM's ``reset_prefix_cache``, refuses while any block is in use.

Compared with vLLM V1's ``BlockPool`` (read through its design notes, not its code): the same
doubly linked free queue and hash-to-blocks map; freed uncached blocks go to the head here
(vLLM appends every freed block at the tail), so an uncached block is always reused before any
cached KV is evicted; and content ids make a hit exact under any hash (vLLM relies on a strong
hash, sha256 optionally).
"""

from __future__ import annotations

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
    evicted hash)), one Python call each; :meth:`allocate_blocks` and :meth:`free_blocks` O(1) per
    block in one call; :meth:`lookup` and :meth:`register` O(block_size + blocks sharing the hash).
    """

    __slots__ = ("_queue", "_next", "_prev", "_hash", "_key", "_cid", "_cached", "_next_cid", "hash_fn",
                 "_num_evictable", "_pending")

    def __init__(self, num_blocks: int, block_size: int, *,
                 hash_fn: Callable[[int, tuple[int, ...], Hashable], int] = hash_block_tokens) -> None:
        super().__init__(num_blocks, block_size)
        self._free = []  # the base class's stack stays empty: free blocks live in the linked queue
        self._queue = FreeBlockQueue(num_blocks)
        self._next, self._prev = self._queue.next_block, self._queue.prev_block  # the queue's links (see allocate)
        self._hash: list[int | None] = [None] * num_blocks  # chained hash of a cached block, else None
        self._key: list[tuple | None] = [None] * num_blocks  # (parent content id, tokens, extra keys)
        self._cid: list[int] = [NO_PARENT] * num_blocks  # content id of a cached block
        self._cached: dict[int, list[int]] = {}  # hash -> cached blocks with that hash
        self._next_cid = 0
        self._num_evictable = 0
        self._pending: list[tuple[int, int]] = []  # (block, content id) registered, KV not yet written
        self.hash_fn = hash_fn

    # -- counts -----------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks with reference count 0, cached or not: what an allocation may take (blocks). O(1)."""
        return self._queue.num_free

    @property
    def num_evictable_blocks(self) -> int:
        """Free blocks that still hold cached KV (blocks). O(1)."""
        return self._num_evictable

    @property
    def num_cached_blocks(self) -> int:
        """Blocks registered in the cache, in use or evictable (blocks). O(distinct hashes)."""
        return sum(len(bucket) for bucket in self._cached.values())

    # -- the free pool ------------------------------------------------------------------
    # allocate, free and their bulk forms run the free queue's popleft / push_front / push_back inline on
    # its public lists (FreeBlockQueue's docstring): these are the allocator's hot paths.
    def allocate(self) -> int:
        """Take the head of the free queue (an uncached block, else the least recently freed cached
        one, whose cache entry is evicted) with reference count 1. O(1).

        Raises:
            OutOfBlocksError: if no block is free.
        """
        nxt = self._next
        s = self._num_blocks  # the queue's sentinel
        block_id = nxt[s]
        if block_id == s:
            raise OutOfBlocksError(f"no free KV block: all {self._num_blocks} blocks are in use")
        after = nxt[block_id]
        nxt[s] = after
        self._prev[after] = s
        self._queue.num_free -= 1
        if self._hash[block_id] is not None:
            self._evict(block_id)
        self._ref_counts[block_id] = 1
        return block_id

    def allocate_blocks(self, num_blocks: int) -> list[int]:
        """Take ``num_blocks`` blocks from the head of the free queue at once, evicting the cached ones
        (:meth:`allocate`, that many times, in one Python call). O(num_blocks).

        All or nothing: if fewer blocks are free, nothing is taken.

        Raises:
            OutOfBlocksError: if fewer than ``num_blocks`` blocks are free.
        """
        queue = self._queue
        if num_blocks > queue.num_free:
            raise OutOfBlocksError(f"need {num_blocks} free KV blocks, {queue.num_free} of {self._num_blocks} are free")
        if num_blocks <= 0:
            return []
        nxt, hashes, ref_counts = self._next, self._hash, self._ref_counts
        s = self._num_blocks
        taken = []
        block_id = nxt[s]
        for _ in range(num_blocks):
            taken.append(block_id)
            ref_counts[block_id] = 1
            if hashes[block_id] is not None:
                self._evict(block_id)
            block_id = nxt[block_id]
        nxt[s] = block_id  # the new head (the sentinel if the queue is now empty)
        self._prev[block_id] = s
        queue.num_free -= num_blocks
        return taken

    def free(self, block_id: int) -> None:
        """Drop one reference; at zero the block joins the free queue: at the tail if it holds cached
        KV (evictable, still findable), else at the head. O(1).

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
        if count != 1:
            if count == 0:
                raise ValueError(f"double free: physical block {block_id} is already free")
            ref_counts[block_id] = count - 1
            return
        ref_counts[block_id] = 0
        s = self._num_blocks
        nxt, prev = self._next, self._prev
        if self._hash[block_id] is None:  # push_front: handed out next
            first = nxt[s]
            nxt[s] = block_id
            prev[block_id] = s
            nxt[block_id] = first
            prev[first] = block_id
        else:  # push_back: evictable, evicted after every block freed before it
            last = prev[s]
            nxt[last] = block_id
            prev[block_id] = last
            nxt[block_id] = s
            prev[s] = block_id
            self._num_evictable += 1
        self._queue.num_free += 1

    def free_blocks(self, block_ids) -> None:
        """:meth:`free` each block of ``block_ids`` in order (a block table's blocks, tail first, so a
        sequence's last cached blocks are evicted first). O(1) per block, one Python call.

        Unchecked ids (the blocks come from a table, so they are in range); a block already free raises
        as :meth:`free` does, after the blocks before it were freed.

        Raises:
            ValueError: on a double free.
        """
        ref_counts, hashes = self._ref_counts, self._hash
        nxt, prev = self._next, self._prev
        queue = self._queue
        s = self._num_blocks
        for block_id in block_ids:
            count = ref_counts[block_id]
            if count != 1:
                if count == 0:
                    raise ValueError(f"double free: physical block {block_id} is already free")
                ref_counts[block_id] = count - 1
                continue
            ref_counts[block_id] = 0
            if hashes[block_id] is None:
                first = nxt[s]
                nxt[s] = block_id
                prev[block_id] = s
                nxt[block_id] = first
                prev[first] = block_id
            else:
                last = prev[s]
                nxt[last] = block_id
                prev[block_id] = last
                nxt[block_id] = s
                prev[s] = block_id
                self._num_evictable += 1
            queue.num_free += 1

    def reuse(self, block_id: int) -> None:
        """Take one reference to the cached block ``block_id`` (a hit): out of the free queue if it was
        free. O(1). The caller found it with :meth:`lookup`."""
        if self._ref_counts[block_id] == 0:
            self._queue.remove(block_id)
            self._num_evictable -= 1
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
        self._hash[block_id] = block_hash
        self._key[block_id] = (parent_cid, token_ids, extra_keys)
        self._cid[block_id] = cid
        self._cached.setdefault(block_hash, []).append(block_id)
        self._pending.append((block_id, cid))
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
            if self._hash[block_id] is not None and self._cid[block_id] == cid:
                self._uncache(block_id)
                dropped += 1
        return dropped

    def reset(self) -> bool:
        """Drop every cache entry (vLLM's ``reset_prefix_cache``): True if done; False, changing
        nothing, while any block is in use (its KV may be read; vLLM refuses likewise). Used when the
        model's weights change, which makes every cached KV stale. O(blocks)."""
        if len(self._queue) != self._num_blocks:
            return False
        for block_id in range(self._num_blocks):
            if self._hash[block_id] is not None:
                self._uncache(block_id)
        self._pending.clear()
        return True

    def _uncache(self, block_id: int) -> None:
        """Forget the cached content of ``block_id``; a free block moves to the head of the queue."""
        self._forget(block_id)
        if self._ref_counts[block_id] == 0:
            self._queue.remove(block_id)
            self._queue.push_front(block_id)
            self._num_evictable -= 1

    def check_invariants(self) -> None:
        """Raise AssertionError if the pool is inconsistent: the free queue holds exactly the blocks
        with reference count 0, once each; the evictable count is the free cached blocks; every cached
        block sits in its hash's bucket once, with a content id no other block has. O(blocks)."""
        counts = self._ref_counts
        queue = list(self._queue)
        assert len(queue) == len(self._queue), "free queue length differs from its links"
        assert len(set(queue)) == len(queue), f"a block is twice in the free queue: {queue}"
        free = {b for b in range(self._num_blocks) if counts[b] == 0}
        assert set(queue) == free, f"free queue {sorted(queue)} != blocks with count 0 {sorted(free)}"
        assert all(c >= 0 for c in counts), "negative reference count"
        assert not self._free, "the base class's free stack must stay empty"
        evictable = sum(1 for b in queue if self._hash[b] is not None)
        assert evictable == self._num_evictable, f"evictable count {self._num_evictable} != {evictable}"
        members = [b for bucket in self._cached.values() for b in bucket]
        assert len(set(members)) == len(members), "a block is cached twice"
        assert set(members) == {b for b in range(self._num_blocks) if self._hash[b] is not None}, \
            "cached blocks and hash buckets differ"
        for block_hash, bucket in self._cached.items():
            assert bucket and all(self._hash[b] == block_hash for b in bucket), f"bucket {block_hash} inconsistent"
        cids = [self._cid[b] for b in members]
        assert len(set(cids)) == len(cids), "two cached blocks share a content id"

    def _evict(self, block_id: int) -> None:
        """Forget the cached content of ``block_id`` (it is being handed out for new KV)."""
        self._forget(block_id)
        self._num_evictable -= 1

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
        """The free blocks from head (next handed out) to tail (a copy). O(free blocks)."""
        return list(self._queue)

    def __repr__(self) -> str:
        return (f"PrefixCachingBlockAllocator(num_blocks={self._num_blocks}, block_size={self._block_size}, "
                f"free={len(self._queue)}, evictable={self._num_evictable})")
