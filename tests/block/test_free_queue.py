"""FreeBlockQueue: a doubly linked queue over block ids with O(1) removal from the middle."""

import pytest

from paged.block.free_queue import FreeBlockQueue


def test_starts_with_every_block_in_order():
    q = FreeBlockQueue(5)
    assert list(q) == [0, 1, 2, 3, 4] and len(q) == 5


def test_pop_remove_push():
    q = FreeBlockQueue(5)
    assert q.popleft() == 0
    q.remove(3)  # from the middle
    assert list(q) == [1, 2, 4] and len(q) == 3
    q.push_back(3)
    q.push_front(0)
    assert list(q) == [0, 1, 2, 4, 3]
    for expected in (0, 1, 2, 4, 3):
        assert q.popleft() == expected
    with pytest.raises(IndexError):
        q.popleft()
    q.push_back(2)
    q.push_front(1)
    assert list(q) == [1, 2] and len(q) == 2


def test_an_empty_queue_and_extend():
    q = FreeBlockQueue(5, filled=False)
    assert list(q) == [] and len(q) == 0
    with pytest.raises(IndexError):
        q.popleft()
    q.extend([3, 1])
    q.extend([])
    q.push_back(4)
    assert list(q) == [3, 1, 4] and len(q) == 3
    q.remove(1)
    assert q.popleft() == 3 and list(q) == [4]
