"""The free-block queue of the prefix-caching allocator: a doubly linked list over block ids (§4.4).

With prefix caching, a freed block keeps its KV (and its hash) until it is handed out again, so a
later request with the same prefix can take it back: a *cache hit on a free block* removes that
block from the middle of the free queue. A Python list would make that removal O(free blocks); a
doubly linked list makes every operation O(1), the design vLLM V1 chose for the same reason
(``FreeKVCacheBlockQueue`` in ``vllm/v1/core/kv_cache_utils.py``). The links live in two flat lists
indexed by block id (no node objects), with one sentinel id ``num_blocks`` that is both the head's
predecessor and the tail's successor.

Order: :meth:`FreeBlockQueue.popleft` takes the head; :meth:`push_back` (and :meth:`extend`, many at
once) appends at the tail, :meth:`push_front` inserts at the head. The prefix-caching allocator keeps
its *evictable* blocks (free, still holding cached KV) here, appended as they are freed, so the head is
always the least recently freed cached block: the next one evicted (LRU). Its free blocks without
cached KV sit on a plain stack in front of this queue (handed out first, in O(1) without a call).
"""

from __future__ import annotations

__all__ = ["FreeBlockQueue"]


class FreeBlockQueue:
    """Doubly linked queue of free block ids ``0 .. num_blocks - 1``; every operation O(1).

    Args:
        num_blocks: blocks of the allocator (blocks, ≥ 1).
        filled: True (default): the queue starts holding every block in id order (block 0 at the
            head); False: it starts empty.

    The caller guarantees that a block is pushed only when absent and removed only when present (the
    allocator knows from the block's reference count); these methods do not check it.
    """

    __slots__ = ("_prev", "_next", "_sentinel", "_len")

    def __init__(self, num_blocks: int, *, filled: bool = True) -> None:
        s = num_blocks
        self._sentinel = s
        if filled:  # block i -> i + 1 (the last -> sentinel); sentinel -> block 0.
            self._next = list(range(1, num_blocks + 1)) + [0]
            self._prev = [s] + list(range(num_blocks))
            self._len = num_blocks
        else:  # only the sentinel, linked to itself
            self._next = [s] * (num_blocks + 1)
            self._prev = [s] * (num_blocks + 1)
            self._len = 0

    def __len__(self) -> int:
        return self._len

    def popleft(self) -> int:
        """Remove and return the head block. O(1).

        Raises:
            IndexError: if the queue is empty.
        """
        s = self._sentinel
        nxt = self._next
        block = nxt[s]
        if block == s:
            raise IndexError("pop from an empty free-block queue")
        after = nxt[block]
        nxt[s] = after
        self._prev[after] = s
        self._len -= 1
        return block

    def remove(self, block: int) -> None:
        """Unlink ``block`` from wherever it is in the queue (a cache hit on a free block). O(1)."""
        nxt, prev = self._next, self._prev
        before, after = prev[block], nxt[block]
        nxt[before] = after
        prev[after] = before
        self._len -= 1

    def push_back(self, block: int) -> None:
        """Append ``block`` at the tail (evicted last). O(1)."""
        s = self._sentinel
        nxt, prev = self._next, self._prev
        last = prev[s]
        nxt[last] = block
        prev[block] = last
        nxt[block] = s
        prev[s] = block
        self._len += 1

    def extend(self, blocks: list[int]) -> None:
        """Append ``blocks`` at the tail in order (:meth:`push_back` each, in one call). O(len(blocks))."""
        if not blocks:
            return
        nxt, prev = self._next, self._prev
        last = prev[self._sentinel]
        for block in blocks:
            nxt[last] = block
            prev[block] = last
            last = block
        nxt[last] = self._sentinel
        prev[self._sentinel] = last
        self._len += len(blocks)

    def push_front(self, block: int) -> None:
        """Insert ``block`` at the head (handed out next). O(1)."""
        s = self._sentinel
        nxt, prev = self._next, self._prev
        first = nxt[s]
        nxt[s] = block
        prev[block] = s
        nxt[block] = first
        prev[first] = block
        self._len += 1

    def __iter__(self):
        """Block ids from head to tail. O(len)."""
        s = self._sentinel
        nxt = self._next
        block = nxt[s]
        while block != s:
            yield block
            block = nxt[block]

    def __repr__(self) -> str:
        return f"FreeBlockQueue(len={self._len})"
