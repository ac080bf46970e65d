"""The evictable-block queue of the prefix-caching allocator: a doubly linked list over block ids (§4.4).

With prefix caching a freed block keeps its KV (and its hash) until it is handed out again, so a later
request with the same prefix can take it back: a *cache hit on a free block* removes that block from
the middle of the queue. A Python list would make that removal O(free blocks); a doubly linked list
makes every operation O(1), the design vLLM V1 chose for the same reason (``FreeKVCacheBlockQueue``).
The links live in two flat lists indexed by block id (no node objects), with one sentinel id,
``num_blocks``, that is both the head's predecessor and the tail's successor.

Blocks are appended at the tail as they are freed, so the head is always the least recently freed
cached block: the next one evicted (LRU).
"""

from __future__ import annotations

__all__ = ["FreeBlockQueue"]


class FreeBlockQueue:
    """Doubly linked queue of block ids ``0 .. num_blocks - 1``, empty at first; every operation O(1).

    Args:
        num_blocks: blocks of the allocator (blocks, ≥ 1).

    The caller guarantees that a block is pushed only when absent and removed only when present (the
    allocator knows it from the block's reference count); these methods do not check it.
    """

    __slots__ = ("_prev", "_next", "_sentinel", "_len")

    def __init__(self, num_blocks: int) -> None:
        self._sentinel = num_blocks
        self._next = [num_blocks] * (num_blocks + 1)  # only the sentinel, linked to itself
        self._prev = [num_blocks] * (num_blocks + 1)
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def popleft(self) -> int:
        """Remove and return the head block (the least recently freed). O(1).

        Raises:
            IndexError: if the queue is empty.
        """
        block = self._next[self._sentinel]
        if block == self._sentinel:
            raise IndexError("pop from an empty free-block queue")
        self.remove(block)
        return block

    def remove(self, block: int) -> None:
        """Unlink ``block`` from wherever it is in the queue (a cache hit on a free block). O(1)."""
        before, after = self._prev[block], self._next[block]
        self._next[before] = after
        self._prev[after] = before
        self._len -= 1

    def push_back(self, block: int) -> None:
        """Append ``block`` at the tail (evicted last). O(1)."""
        last = self._prev[self._sentinel]
        self._next[last] = block
        self._prev[block] = last
        self._next[block] = self._sentinel
        self._prev[self._sentinel] = block
        self._len += 1

    def __iter__(self):
        """Block ids from head to tail. O(len)."""
        block = self._next[self._sentinel]
        while block != self._sentinel:
            yield block
            block = self._next[block]

    def __repr__(self) -> str:
        return f"FreeBlockQueue(len={self._len})"
