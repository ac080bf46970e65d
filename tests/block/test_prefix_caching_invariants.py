"""Hypothesis stateful test: the paged manager with prefix caching under random requests (§4.4, APC).

A shadow of the KV cache records, for every slot written, the tokens its KV depends on (the token
and all before it). Random requests share prefixes from a small pool; they decode, fork (beam-like),
finish, are preempted by recomputation or swapped out and back. After every step:

* every slot of every running sequence holds the KV of exactly its own tokens (a cache hit, a block
  shared with a sibling, a copy-on-write copy or a swap never hands a sequence someone else's KV);
* each block's reference count equals the number of block tables holding it;
* uncached free + evictable + in-use blocks are the cache's blocks, and the free queue holds the
  uncached free blocks before the cached ones (evicted least recently freed first).

It runs with the default hash and with a hash under which every block collides.
"""

from collections import Counter

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from paged.block.manager import PagedKVCacheManager
from paged.core.kv_cache_manager import AllocStatus
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus

NUM_BLOCKS, BLOCK_SIZE = 16, 4
PREFIXES = ([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8], [2, 7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5])


class PrefixCachedManager(RuleBasedStateMachine):
    hash_fn = None

    def __init__(self):
        super().__init__()
        kwargs = {} if self.hash_fn is None else {"hash_fn": type(self).hash_fn}
        self.mgr = PagedKVCacheManager(NUM_BLOCKS, BLOCK_SIZE, num_cpu_blocks=NUM_BLOCKS, watermark=0.0,
                                       enable_prefix_caching=True, **kwargs)
        self.kv = {}  # GPU slot -> the tokens its KV was computed from
        self.cpu_kv = {}
        self.groups: list[SequenceGroup] = []  # running
        self.swapped: list[SequenceGroup] = []
        self.next_id = 0

    def _id(self):
        self.next_id += 1
        return self.next_id

    def _slots(self, seq):
        return self.mgr.block_tables[seq.seq_id].slot_mapping(0, seq.num_tokens)

    def _prefill(self, group, starts):
        for seq, start in zip(group.seqs, starts):
            slots = self._slots(seq)
            for pos in range(min(start, seq.num_tokens)):  # reused KV must be this sequence's own
                assert self.kv[slots[pos]] == tuple(seq.token_ids[: pos + 1]), "reused the wrong KV"
            for pos in range(start, seq.num_tokens):
                self.kv[slots[pos]] = tuple(seq.token_ids[: pos + 1])

    def _copy(self, pairs, src_kv, dst_kv):
        for src, dst in pairs:
            for off in range(BLOCK_SIZE):
                key = src * BLOCK_SIZE + off
                if key in src_kv:
                    dst_kv[dst * BLOCK_SIZE + off] = src_kv[key]

    @rule(p=st.integers(0, 1), cut=st.integers(0, 12), tail=st.lists(st.integers(10, 12), max_size=6),
          n=st.integers(1, 2))
    def new_request(self, p, cut, tail, n):
        prompt = PREFIXES[p][:cut] + tail or [9]
        rid = self._id()
        group = SequenceGroup(rid, 0.0, [Sequence(self._id(), len(prompt), token_ids=list(prompt)) for _ in range(n)], 8)
        if self.mgr.can_allocate(group) is not AllocStatus.OK:
            return
        starts = self.mgr.allocate(group)
        assert starts[1:] == [len(prompt)] * (n - 1) and starts[0] <= len(prompt) - 1
        for seq in group.seqs:
            seq.status = SequenceStatus.RUNNING
        self._prefill(group, starts)
        self.groups.append(group)

    @precondition(lambda self: self.groups)
    @rule(i=st.integers(0, 100), token=st.integers(10, 11))
    def decode(self, i, token):
        group = self.groups[i % len(self.groups)]
        for k, seq in enumerate(group.seqs):
            seq.append_token(token + k)
        if not self.mgr.can_append_slots(group):
            for seq in group.seqs:
                seq.num_generated -= 1
                seq.token_ids.pop()
            return
        for seq in group.seqs:
            self._copy(self.mgr.append_slots(seq), self.kv, self.kv)
            self.kv[self._slots(seq)[-1]] = tuple(seq.token_ids)

    @precondition(lambda self: self.groups)
    @rule(i=st.integers(0, 100))
    def fork(self, i):
        group = self.groups[i % len(self.groups)]
        parent = group.seqs[0]
        child = Sequence(self._id(), parent.prompt_len, parent.num_generated, list(parent.token_ids),
                         status=SequenceStatus.RUNNING)
        self.mgr.fork(parent, child)
        group.seqs.append(child)

    @precondition(lambda self: self.groups)
    @rule(i=st.integers(0, 100))
    def finish(self, i):
        group = self.groups.pop(i % len(self.groups))
        for seq in group.seqs:
            self.mgr.free(seq)

    @precondition(lambda self: self.groups)
    @rule(i=st.integers(0, 100))
    def recompute(self, i):
        group = self.groups.pop(i % len(self.groups))
        self.mgr.free_for_recompute(group)
        for seq in group.seqs:
            seq.status = SequenceStatus.WAITING
        if self.mgr.can_allocate(group) is AllocStatus.OK:
            starts = self.mgr.allocate(group)
            fresh = all(seq.num_generated == 0 for seq in group.seqs)  # (as if preempted before any decode)
            assert all(s < seq.num_tokens for s, seq in zip(starts[:1] if fresh else starts, group.seqs))
            for seq in group.seqs:
                seq.status = SequenceStatus.RUNNING
            self._prefill(group, starts)
            self.groups.append(group)
        else:
            for seq in group.seqs:
                self.mgr.free(seq)

    @precondition(lambda self: self.groups)
    @rule(i=st.integers(0, 100))
    def swap_out(self, i):
        group = self.groups[i % len(self.groups)]
        if not self.mgr.can_swap_out(group):
            return
        self.groups.remove(group)
        self._copy(self.mgr.swap_out(group), self.kv, self.cpu_kv)
        for seq in group.seqs:
            seq.status = SequenceStatus.SWAPPED
        self.swapped.append(group)

    @precondition(lambda self: self.swapped)
    @rule()
    def swap_in(self):
        group = self.swapped[0]
        if self.mgr.can_swap_in(group) is not AllocStatus.OK:
            return
        self.swapped.pop(0)
        self._copy(self.mgr.swap_in(group), self.cpu_kv, self.kv)
        for seq in group.seqs:
            seq.status = SequenceStatus.RUNNING
        self.groups.append(group)

    @invariant()
    def every_sequence_reads_its_own_kv(self):
        for group in self.groups:
            for seq in group.seqs:
                slots = self.mgr.block_tables[seq.seq_id].slot_mapping(0, self.mgr.block_tables[seq.seq_id].num_tokens)
                for pos, slot in enumerate(slots):
                    assert self.kv[slot] == tuple(seq.token_ids[: pos + 1])

    @invariant()
    def counts(self):
        alloc = self.mgr.gpu_allocator
        held = Counter(b for t in self.mgr.block_tables.values() if t.allocator is alloc for b in t.physical_blocks)
        for block in range(NUM_BLOCKS):
            assert alloc.ref_count(block) == held.get(block, 0)
        in_use = len(held)
        evictable = alloc.num_evictable_blocks
        uncached = alloc.num_free_blocks - evictable
        assert uncached + evictable + in_use == NUM_BLOCKS
        queue = alloc.free_queue()
        assert len(queue) == alloc.num_free_blocks
        cached = [alloc.is_evictable(b) for b in queue]
        assert cached == sorted(cached)  # uncached blocks first, then the cached ones


class WeakHashPrefixCachedManager(PrefixCachedManager):
    @staticmethod
    def hash_fn(parent, tokens, extra):
        return len(tokens) % 2  # nearly every block collides


for machine in (PrefixCachedManager, WeakHashPrefixCachedManager):
    machine.TestCase.settings = settings(max_examples=120, stateful_step_count=40, deadline=None)
TestPrefixCachedManager = PrefixCachedManager.TestCase
TestWeakHashPrefixCachedManager = WeakHashPrefixCachedManager.TestCase
