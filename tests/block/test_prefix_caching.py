"""PrefixCachingBlockAllocator: hits confirmed by tokens, LRU eviction, O(1) reuse of free cached blocks."""

import pytest

from paged.block.prefix_caching import NO_PARENT, PrefixCachingBlockAllocator, hash_block_tokens


def weak_hash(parent, tokens, extra):
    return 0  # every block collides


def register_chain(alloc, chunks, extra=None):
    """Allocate and register one block per token tuple, chained; returns the blocks."""
    blocks, parent_hash, parent_cid = [], NO_PARENT, NO_PARENT
    for tokens in chunks:
        b = alloc.allocate()
        h = alloc.hash_fn(parent_hash, tokens, extra)
        parent_cid, parent_hash = alloc.register(b, h, parent_cid, tokens, extra), h
        blocks.append(b)
    return blocks


def find_chain(alloc, chunks, extra=None):
    found, parent_hash, parent_cid = [], NO_PARENT, NO_PARENT
    for tokens in chunks:
        h = alloc.hash_fn(parent_hash, tokens, extra)
        hit = alloc.lookup(h, parent_cid, tokens, extra)
        if hit is None:
            break
        found.append(hit[0])
        parent_cid, parent_hash = hit[1], h
    return found


A = [(1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11, 12)]
B = [(1, 2, 3, 4), (5, 6, 7, 9)]  # same first block, different second


@pytest.mark.parametrize("hash_fn", [hash_block_tokens, weak_hash], ids=["strong", "weak"])
def test_hit_needs_the_same_tokens_after_the_same_parent(hash_fn):
    alloc = PrefixCachingBlockAllocator(8, 4, hash_fn=hash_fn)
    blocks = register_chain(alloc, A)
    assert find_chain(alloc, A) == blocks
    assert find_chain(alloc, B) == blocks[:1]  # a collision never hands out the wrong block
    assert find_chain(alloc, [(5, 6, 7, 8)]) == []  # the right tokens after another parent: no hit
    assert find_chain(alloc, A, extra="adapter-2") == []  # extra keys separate caches


def test_same_content_twice_keeps_one_cached_block():
    alloc = PrefixCachingBlockAllocator(8, 4)
    first = register_chain(alloc, A[:1])
    dup = alloc.allocate()
    cid = alloc.register(dup, hash_block_tokens(NO_PARENT, A[0], None), NO_PARENT, A[0])
    assert find_chain(alloc, A[:1]) == first and cid == alloc.lookup(
        hash_block_tokens(NO_PARENT, A[0], None), NO_PARENT, A[0])[1]
    assert alloc.num_cached_blocks == 1


def test_freed_cached_blocks_stay_findable_until_evicted_lru():
    alloc = PrefixCachingBlockAllocator(4, 4)
    blocks = register_chain(alloc, A)  # 3 cached, 1 never used
    for b in reversed(blocks):  # a request frees its blocks tail first
        alloc.free(b)
    assert alloc.num_free_blocks == 4 and alloc.num_evictable_blocks == 3
    assert alloc.free_queue() == [3, blocks[2], blocks[1], blocks[0]]  # uncached first, then LRU
    assert find_chain(alloc, A) == blocks  # still cached
    assert alloc.allocate() == 3  # the uncached block goes first: nothing evicted
    assert alloc.allocate() == blocks[2]  # then the least recently freed: the tail of the prompt
    assert find_chain(alloc, A) == blocks[:2] and alloc.num_evictable_blocks == 2


def test_hit_on_a_free_block_takes_it_out_of_the_queue():
    alloc = PrefixCachingBlockAllocator(4, 4)
    blocks = register_chain(alloc, A)
    for b in reversed(blocks):
        alloc.free(b)
    alloc.reuse(blocks[1])  # from the middle of the queue
    assert alloc.ref_count(blocks[1]) == 1 and blocks[1] not in alloc.free_queue()
    assert alloc.num_free_blocks == 3 and alloc.num_evictable_blocks == 2
    alloc.reuse(blocks[1])  # a second holder of an in-use block
    assert alloc.ref_count(blocks[1]) == 2 and alloc.num_free_blocks == 3


def test_counts_are_distinct_blocks():
    alloc = PrefixCachingBlockAllocator(6, 4)
    blocks = register_chain(alloc, A)
    alloc.allocate()
    alloc.free(blocks[2])
    in_use = sum(alloc.ref_count(b) > 0 for b in range(6))
    uncached_free = alloc.num_free_blocks - alloc.num_evictable_blocks
    assert (uncached_free, alloc.num_evictable_blocks, in_use) == (2, 1, 3)


def test_bad_use_is_refused():
    alloc = PrefixCachingBlockAllocator(4, 4)
    b = alloc.allocate()
    alloc.free(b)
    with pytest.raises(ValueError, match="double free"):
        alloc.free(b)
    with pytest.raises(ValueError, match="free"):
        alloc.register(b, 1, NO_PARENT, (1, 2, 3, 4))
