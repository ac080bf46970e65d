"""The prefix-caching allocator's queue of evictable blocks: a doubly linked list over block ids (§4.4).

A cache hit on a free block removes it from the middle: O(1) with links (as vLLM V1's ``FreeKVCacheBlockQueue``).
The links are two lists indexed by block id; id ``num_blocks`` is the sentinel before the head and after the tail.
Freed blocks join at the tail, so the head, least recently freed, is evicted next (LRU).
"""

from __future__ import annotations

__all__ = ["FreeBlockQueue"]


class FreeBlockQueue:
    """Doubly linked queue of block ids ``0 .. num_blocks - 1`` (``num_blocks`` ≥ 1), empty at first; all O(1).
    Unchecked: the caller pushes a block only when absent and removes one only when present."""

    __slots__ = ("_prev", "_next", "_sentinel", "_len")

    def __init__(self, num_blocks: int) -> None:
        self._sentinel = num_blocks
        self._next = [num_blocks] * (num_blocks + 1)  # only the sentinel, linked to itself
        self._prev = [num_blocks] * (num_blocks + 1)
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def popleft(self) -> int:
        """Remove and return the head (least recently freed) block. O(1). Raises IndexError if empty."""
        block = self._next[self._sentinel]
        if block == self._sentinel:
            raise IndexError("pop from an empty free-block queue")
        self.remove(block)
        return block

    def remove(self, block: int) -> None:
        """Unlink ``block`` from anywhere in the queue (a cache hit on a free block). O(1)."""
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
