"""The free-block queue of the prefix-caching allocator: a doubly linked list over block ids (§4.4).

With prefix caching, a freed block keeps its KV (and its hash) until it is handed out again, so a
later request with the same prefix can take it back: a *cache hit on a free block* removes that
block from the middle of the free queue. A Python list would make that removal O(free blocks); a
doubly linked list makes every operation O(1), the design vLLM V1 chose for the same reason
(``FreeKVCacheBlockQueue`` in ``vllm/v1/core/kv_cache_utils.py``). The links live in two flat lists
indexed by block id (no node objects), with one sentinel id ``num_blocks`` that is both the head's
predecessor and the tail's successor. The lists and the count are public: the prefix-caching allocator
runs :meth:`~FreeBlockQueue.popleft`, :meth:`~FreeBlockQueue.push_front` and
:meth:`~FreeBlockQueue.push_back` inline on them in its allocate and free, which are the hot paths
(one Python call per block operation instead of three).

Order: :meth:`FreeBlockQueue.popleft` takes the head. Blocks that hold no cached KV are pushed at the
head (:meth:`push_front`: reused first), blocks that do are appended at the tail (:meth:`push_back`),
so the head of the cached part is always the least recently freed cached block: the next one evicted
(LRU).
"""

from __future__ import annotations

__all__ = ["FreeBlockQueue"]


class FreeBlockQueue:
    """Doubly linked queue of free block ids ``0 .. num_blocks - 1``; every operation O(1).

    Args:
        num_blocks: blocks of the allocator (blocks, ≥ 1). The queue starts holding every block in
            id order (block 0 at the head).

    Attributes:
        next_block: ``next_block[b]``, the block after ``b`` (the sentinel after the tail); length
            ``num_blocks + 1``, the last entry the sentinel's (the head).
        prev_block: ``prev_block[b]``, the block before ``b`` (the sentinel before the head); the
            sentinel's entry is the tail.
        sentinel: ``num_blocks``, the id that closes the ring.
        num_free: blocks in the queue (blocks). Whoever links or unlinks a block updates it.

    The caller guarantees that a block is pushed only when absent and removed only when present (the
    allocator knows from the block's reference count); these methods do not check it.
    """

    __slots__ = ("prev_block", "next_block", "sentinel", "num_free")

    def __init__(self, num_blocks: int) -> None:
        s = num_blocks
        self.sentinel = s
        # block i -> i + 1 (the last -> sentinel); sentinel -> block 0.
        self.next_block = list(range(1, num_blocks + 1)) + [0]
        self.prev_block = [s] + list(range(num_blocks))
        self.num_free = num_blocks

    def __len__(self) -> int:
        return self.num_free

    def popleft(self) -> int:
        """Remove and return the head block. O(1).

        Raises:
            IndexError: if the queue is empty.
        """
        s = self.sentinel
        nxt = self.next_block
        block = nxt[s]
        if block == s:
            raise IndexError("pop from an empty free-block queue")
        after = nxt[block]
        nxt[s] = after
        self.prev_block[after] = s
        self.num_free -= 1
        return block

    def remove(self, block: int) -> None:
        """Unlink ``block`` from wherever it is in the queue (a cache hit on a free block). O(1)."""
        nxt, prev = self.next_block, self.prev_block
        before, after = prev[block], nxt[block]
        nxt[before] = after
        prev[after] = before
        self.num_free -= 1

    def push_back(self, block: int) -> None:
        """Append ``block`` at the tail (evicted last). O(1)."""
        s = self.sentinel
        nxt, prev = self.next_block, self.prev_block
        last = prev[s]
        nxt[last] = block
        prev[block] = last
        nxt[block] = s
        prev[s] = block
        self.num_free += 1

    def push_front(self, block: int) -> None:
        """Insert ``block`` at the head (handed out next). O(1)."""
        s = self.sentinel
        nxt, prev = self.next_block, self.prev_block
        first = nxt[s]
        nxt[s] = block
        prev[block] = s
        nxt[block] = first
        prev[first] = block
        self.num_free += 1

    def __iter__(self):
        """Block ids from head to tail. O(len)."""
        s = self.sentinel
        nxt = self.next_block
        block = nxt[s]
        while block != s:
            yield block
            block = nxt[block]

    def __repr__(self) -> str:
        return f"FreeBlockQueue(len={self.num_free})"
