"""FreeBlockQueue: a doubly linked queue over block ids with O(1) removal from the middle."""

import pytest

from paged.block.free_queue import FreeBlockQueue


def test_starts_empty():
    q = FreeBlockQueue(5)
    assert list(q) == [] and len(q) == 0
    with pytest.raises(IndexError):
        q.popleft()


def test_pop_remove_push_in_lru_order():
    q = FreeBlockQueue(5)
    for block in (3, 1, 4, 0):
        q.push_back(block)
    assert list(q) == [3, 1, 4, 0] and len(q) == 4
    q.remove(4)  # from the middle: a cache hit on a free block
    assert list(q) == [3, 1, 0] and len(q) == 3
    assert q.popleft() == 3  # the least recently freed first
    q.push_back(3)
    assert [q.popleft() for _ in range(3)] == [1, 0, 3]
    with pytest.raises(IndexError):
        q.popleft()
    q.push_back(2)
    q.remove(2)  # the only block: head and tail at once
    assert list(q) == [] and len(q) == 0
