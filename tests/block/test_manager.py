"""PagedKVCacheManager: admission, growth, sharing, swapping, accounting."""

import pytest

from paged.block.manager import PagedKVCacheManager
from paged.core.kv_cache_manager import AllocStatus
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus


def group(prompt, output, seq_id=0, arrival=0.0):
    return SequenceGroup(seq_id, arrival, [Sequence(seq_id, prompt)], output)


def run(mgr, g):
    mgr.allocate(g)
    for s in g.seqs:
        s.status = SequenceStatus.RUNNING


def test_admission_ok_later_never():
    mgr = PagedKVCacheManager(10, 4, watermark=0.0)
    assert mgr.can_allocate(group(40, 2)) is AllocStatus.NEVER  # 40 + 2 - 1 slots > 40
    # The last generated token is never written to the cache: 40 + 1 tokens hold 40 slots, and fit.
    assert mgr.can_allocate(group(40, 1)) is AllocStatus.OK
    assert mgr.can_allocate(group(37, 4)) is AllocStatus.OK
    assert mgr.can_allocate(group(20, 10)) is AllocStatus.OK
    run(mgr, group(20, 10, seq_id=1))
    assert mgr.can_allocate(group(24, 1, seq_id=2)) is AllocStatus.LATER


def test_watermark_holds_blocks_back():
    mgr = PagedKVCacheManager(100, 4, watermark=0.1)
    assert mgr.can_allocate(group(4 * 91, 1)) is AllocStatus.NEVER
    assert mgr.can_allocate(group(4 * 89, 1)) is AllocStatus.OK


def test_decode_allocates_on_boundaries_only():
    mgr = PagedKVCacheManager(10, 4)
    g = group(4, 10)
    run(mgr, g)
    seq = g.seqs[0]
    assert mgr.get_num_free_gpu_blocks() == 9
    seq.num_generated = 1
    assert mgr.can_append_slots(g)
    mgr.append_slots(seq)
    assert mgr.get_num_free_gpu_blocks() == 8
    for k in range(2, 5):
        seq.num_generated = k
        mgr.append_slots(seq)
    assert mgr.get_num_free_gpu_blocks() == 8


def test_fork_shares_and_copy_on_write():
    mgr = PagedKVCacheManager(10, 4)
    g = group(6, 10)
    run(mgr, g)
    parent = g.seqs[0]
    child = Sequence(1, 6, status=SequenceStatus.RUNNING)
    mgr.fork(parent, child)
    g.seqs.append(child)
    assert mgr.get_block_table(child) == mgr.get_block_table(parent)
    usage = mgr.memory_usage([g])
    assert usage.token_states == 6  # shared blocks counted once
    child.num_generated = 1
    pairs = mgr.append_slots(child)
    assert len(pairs) == 1 and pairs[0][0] == mgr.get_block_table(parent)[-1]


def test_swap_out_and_in_keeps_sharing():
    mgr = PagedKVCacheManager(10, 4, num_cpu_blocks=10)
    g = group(8, 10)
    run(mgr, g)
    parent = g.seqs[0]
    child = Sequence(1, 8, status=SequenceStatus.RUNNING)
    mgr.fork(parent, child)
    g.seqs.append(child)
    assert mgr.can_swap_out(g)
    out = mgr.swap_out(g)
    assert len(out) == 2  # two shared blocks move once
    assert mgr.get_num_free_gpu_blocks() == 10
    for s in g.seqs:
        s.status = SequenceStatus.SWAPPED
    assert mgr.can_swap_in(g) is AllocStatus.OK
    back = mgr.swap_in(g)
    assert len(back) == 2
    assert mgr.get_block_table(parent) == mgr.get_block_table(child)
    assert mgr.cpu_allocator.num_free_blocks == 10
    assert all(mgr.gpu_allocator.ref_count(b) == 2 for b in mgr.get_block_table(parent))


def test_no_swap_space():
    mgr = PagedKVCacheManager(10, 4)
    g = group(8, 1)
    run(mgr, g)
    assert not mgr.can_swap_out(g)
    with pytest.raises(RuntimeError, match="swap space"):
        mgr.swap_out(g)


def test_memory_usage_sums_to_total():
    mgr = PagedKVCacheManager(10, 4)
    g = group(5, 10)
    run(mgr, g)
    u = mgr.memory_usage([g])
    assert (u.token_states, u.reservation, u.internal) == (5, 3, 0)
    assert sum((u.token_states, u.reservation, u.internal, u.external)) == 40
    g2 = group(5, 1, seq_id=1)
    run(mgr, g2)
    u = mgr.memory_usage([g, g2])
    assert u.internal == 2  # g2 will end at 6 tokens in an 8-slot table
    assert abs(sum(u.fractions().values()) - 1) < 1e-12


# -- sharing under memory pressure -----------------------------------------------------------------

def shared_group(mgr, prompt, n, output=20, rid=0):
    """A new group of ``n`` samples of one prompt, admitted (running)."""
    g = SequenceGroup(rid, 0.0, [Sequence(100 * rid + k, prompt) for k in range(n)], output)
    assert mgr.allocate(g) == [0] + [prompt] * (n - 1)  # the prompt is computed once
    for s in g.seqs:
        s.status = SequenceStatus.RUNNING
    return g


def grow(mgr, g, tokens):
    for _ in range(tokens):
        for s in g.seqs:
            s.num_generated += 1
        assert mgr.can_append_slots(g)
        for s in g.seqs:
            mgr.append_slots(s)


def test_shared_partial_block_needs_one_copy_per_writer_but_the_last():
    mgr = PagedKVCacheManager(4, 4, watermark=0.0)
    g = shared_group(mgr, 6, 3)  # 2 blocks, the second partly filled, shared by 3
    for s in g.seqs:
        s.num_generated = 1
    assert mgr.can_append_slots(g)  # 2 copies for 3 writers; 2 blocks are free
    copies = [mgr.append_slots(s) for s in g.seqs]
    assert [len(c) for c in copies] == [1, 1, 0]  # the last writer owns the block by then
    assert mgr.get_num_free_gpu_blocks() == 0
    lasts = {mgr.get_block_table(s)[-1] for s in g.seqs}
    assert len(lasts) == 3 and all(mgr.gpu_allocator.ref_count(b) == 1 for b in lasts)
    assert mgr.gpu_allocator.ref_count(mgr.get_block_table(g.seqs[0])[0]) == 3


def test_every_writer_copies_while_someone_else_holds_the_block():
    mgr = PagedKVCacheManager(5, 4, watermark=0.0)
    g = shared_group(mgr, 6, 3)
    mgr.fork(g.seqs[0], Sequence(99, 6))  # a holder outside the writers
    for s in g.seqs:
        s.num_generated = 1
    assert mgr.get_num_free_gpu_blocks() == 3 and mgr.can_append_slots(g)  # 3 copies fit
    mgr.fork(g.seqs[0], Sequence(98, 6))
    mgr.gpu_allocator.allocate()  # 2 free blocks left: not enough for 3 copies
    assert not mgr.can_append_slots(g)


def test_recompute_shares_what_the_group_shared():
    mgr = PagedKVCacheManager(16, 4, watermark=0.0)
    g = shared_group(mgr, 8, 3, output=4)  # 2 full prompt blocks, shared
    grow(mgr, g, 3)  # 11 tokens each: 2 shared + 1 private block each
    held = 16 - mgr.get_num_free_gpu_blocks()
    assert held == 5
    mgr.free_for_recompute(g)
    for s in g.seqs:
        s.status = SequenceStatus.WAITING
    assert mgr.get_num_free_gpu_blocks() == 16
    assert mgr.prefill_tokens(g) == 11 + 3 + 3  # the shared prompt blocks once
    assert mgr.can_allocate(g) is AllocStatus.OK
    assert mgr.allocate(g) == [0, 8, 8]
    assert 16 - mgr.get_num_free_gpu_blocks() == held  # the same memory as before preemption
    tables = [mgr.get_block_table(s) for s in g.seqs]
    assert tables[0][:2] == tables[1][:2] == tables[2][:2] and len({t[2] for t in tables}) == 3


def test_recompute_rebuilds_a_beam_tree():
    mgr = PagedKVCacheManager(32, 4, watermark=0.0)
    g = shared_group(mgr, 8, 1, output=8)
    a = g.seqs[0]
    c = Sequence(1, 8, status=SequenceStatus.RUNNING)
    mgr.fork(a, c)  # c shares the two prompt blocks, then diverges
    g.seqs.append(c)
    grow(mgr, g, 4)  # 12 tokens each: 3 full blocks, the third private
    b = Sequence(2, 8, num_generated=4, status=SequenceStatus.RUNNING)
    mgr.fork(a, b)  # b shares all three of a's blocks
    g.seqs.append(b)
    grow(mgr, g, 1)  # 13 tokens each: a new private block each
    held = 32 - mgr.get_num_free_gpu_blocks()
    assert held == 2 + 1 + 1 + 3  # prompt, a/b's shared third block, c's third, three fourth blocks
    for s in g.seqs:
        s.num_generated += 1  # the token each got in the iteration before the preemption
    mgr.free_for_recompute(g)
    for s in g.seqs:
        s.status = SequenceStatus.WAITING
    assert mgr.prefill_tokens(g) == 14 + 6 + 2
    assert mgr.allocate(g) == [0, 8, 12]  # a computes everything, c after the prompt, b its tail
    assert 32 - mgr.get_num_free_gpu_blocks() == held
    ta, tc, tb = (mgr.get_block_table(s) for s in g.seqs)
    assert ta[:3] == tb[:3] and tc[:2] == ta[:2] and tc[2] != ta[2] and len({ta[3], tb[3], tc[3]}) == 3


def test_swapped_group_that_used_every_block_comes_back():
    mgr = PagedKVCacheManager(5, 4, num_cpu_blocks=8, watermark=0.2)  # a 1-block watermark
    g = shared_group(mgr, 4, 2)
    grow(mgr, g, 7)  # 11 tokens each: 1 shared + 2 private blocks each = all 5 blocks
    assert mgr.get_num_free_gpu_blocks() == 0
    for s in g.seqs:
        s.num_generated += 1  # the next token lands in a private, partly filled block
    assert len(mgr.swap_out(g)) == 5
    for s in g.seqs:
        s.status = SequenceStatus.SWAPPED
    assert mgr.can_swap_in(g) is AllocStatus.OK  # no watermark, no block beyond what it needs
    mgr.swap_in(g)
    for s in g.seqs:
        s.status = SequenceStatus.RUNNING
        assert mgr.append_slots(s) == []
    assert mgr.get_num_free_gpu_blocks() == 0 and mgr.cpu_allocator.num_free_blocks == 8


def test_swap_in_counts_the_copies_its_next_tokens_need():
    mgr = PagedKVCacheManager(6, 4, num_cpu_blocks=8, watermark=0.0)
    g = shared_group(mgr, 6, 3)  # 2 blocks, the last partly filled and shared by all three
    for s in g.seqs:
        s.num_generated = 1
    mgr.swap_out(g)
    for s in g.seqs:
        s.status = SequenceStatus.SWAPPED
    assert mgr.can_swap_in(g) is AllocStatus.OK  # 2 blocks + 2 copies = 4 ≤ 6
    mgr.gpu_allocator.allocate(), mgr.gpu_allocator.allocate(), mgr.gpu_allocator.allocate()
    assert mgr.can_swap_in(g) is AllocStatus.LATER  # 3 free < 4


# -- prefix sharing: automatic prefix caching and reserved prefixes ----------------------------------

def prompt_group(rid, tokens, output=4, n=1, prefix_len=0):
    seqs = [Sequence(100 * rid + k, len(tokens), token_ids=list(tokens)) for k in range(n)]
    return SequenceGroup(rid, 0.0, seqs, output, prefix_len=prefix_len)


def admit(mgr, g):
    assert mgr.can_allocate(g) is AllocStatus.OK
    starts = mgr.allocate(g)
    for s in g.seqs:
        s.status = SequenceStatus.RUNNING
    return starts


def test_prefix_cache_full_hit_leaves_the_last_token_to_compute():
    mgr = PagedKVCacheManager(16, 4, watermark=0.0, enable_prefix_caching=True)
    a = prompt_group(0, range(1, 15))  # 14 tokens: 3 full blocks
    assert admit(mgr, a) == [0]
    b = prompt_group(1, range(1, 15))
    assert mgr.prefill_tokens(b) == 2
    assert admit(mgr, b) == [12]  # 3 blocks hit, the last 2 tokens computed
    assert mgr.get_block_table(b.seqs[0])[:3] == mgr.get_block_table(a.seqs[0])[:3]
    c = prompt_group(2, range(1, 13))  # exactly 3 full blocks: the third is computed for the logits
    assert admit(mgr, c) == [8]
    assert mgr.get_num_free_gpu_blocks() == 16 - 4 - 1 - 1


def test_freed_prompt_is_found_until_evicted_tail_first():
    mgr = PagedKVCacheManager(6, 4, watermark=0.0, enable_prefix_caching=True)
    a = prompt_group(0, range(1, 18))  # 5 blocks, 4 full
    admit(mgr, a)
    mgr.free(a.seqs[0])  # freed tail first: block 3 is the first cached block to go
    assert mgr.get_num_free_gpu_blocks() == 6
    hog = prompt_group(1, [99] * 12, output=1)  # 3 blocks: the two uncached ones, then the prompt's tail block
    admit(mgr, hog)
    again = prompt_group(2, range(1, 18), output=1)
    assert mgr.prefill_tokens(again) == 5  # blocks 0-2 still cached, block 3 was evicted
    mgr.free(hog.seqs[0])
    assert mgr.allocate(again) == [12]


def test_prefix_cache_never_mixes_prompts_under_a_colliding_hash():
    mgr = PagedKVCacheManager(16, 4, watermark=0.0, enable_prefix_caching=True, hash_fn=lambda p, t, e: 7)
    admit(mgr, prompt_group(0, [1, 2, 3, 4, 5, 6, 7, 8, 9]))
    assert admit(mgr, prompt_group(1, [1, 2, 3, 4, 5, 6, 7, 0, 9])) == [4]  # only the first block matches
    assert admit(mgr, prompt_group(2, [2, 2, 3, 4, 5, 6, 7, 8, 9])) == [0]


def test_prefix_cache_counts_hits_on_free_blocks_as_taken():
    mgr = PagedKVCacheManager(4, 4, watermark=0.0, enable_prefix_caching=True)
    a = prompt_group(0, range(1, 14), output=1)  # 4 blocks: 3 full
    admit(mgr, a)
    mgr.free(a.seqs[0])
    b = prompt_group(1, range(1, 14), output=1)
    assert mgr.can_allocate(b) is AllocStatus.OK and admit(mgr, b) == [12]
    assert mgr.get_num_free_gpu_blocks() == 0


def test_reserved_prefix_is_shared_by_every_request():
    mgr = PagedKVCacheManager(32, 4, watermark=0.0)
    groups = [SequenceGroup(i, 0.0, [Sequence(i, 20)], 4, prefix_len=10) for i in range(3)]  # 2 full prefix blocks
    for g in groups:
        assert mgr.prefill_tokens(g) == 12
        assert admit(mgr, g) == [8]
    tables = [mgr.get_block_table(g.seqs[0]) for g in groups]
    assert tables[0][:2] == tables[1][:2] == tables[2][:2]
    assert mgr.get_num_free_gpu_blocks() == 32 - 2 - 3 * 3
    assert mgr.sharing_counts() == (2 + 9, 15) and mgr.blocks_in_use() == 2 + 9
    for g in groups:
        mgr.free(g.seqs[0])
    assert mgr.get_num_free_gpu_blocks() == 30  # the reserved prefix stays pinned
    assert mgr.sharing_counts() == (0, 0) and mgr.blocks_in_use() == 0


@pytest.mark.parametrize("caching", [False, True])
def test_a_new_group_never_gets_a_discarded_groups_plan(caching):
    """Each group gets its own answer, whatever became of the groups asked before it (a dropped group's
    address is reused at once by CPython: nothing may be keyed on id())."""
    mgr = PagedKVCacheManager(8, 4, watermark=0.0, enable_prefix_caching=caching)
    for i in range(40):
        big = i % 2 == 0  # 40 tokens: 10 blocks, more than the 8 there are; 4 tokens: 1 block
        n = 40 if big else 4
        group = SequenceGroup(i, 0.0, [Sequence(i, n, token_ids=list(range(n)))], 4)
        expected = AllocStatus.NEVER if big else AllocStatus.OK
        assert mgr.can_allocate(group) is expected
        del group  # dropped unscheduled, as the test state machine and a caller may do


def test_decode_registers_each_block_once_it_fills():
    mgr = PagedKVCacheManager(16, 4, watermark=0.0, enable_prefix_caching=True)
    a = prompt_group(0, range(1, 7), output=8)  # 6 tokens: 1 full block
    admit(mgr, a)
    seq = a.seqs[0]
    for token in (7, 8, 9):  # the second block fills at the 8th token, the 9th starts a third
        seq.append_token(token)
        assert mgr.can_append_slots(a) and mgr.append_slots(seq) == []
        full = seq.num_tokens // 4
        probe = prompt_group(1, list(seq.token_ids) + [0])
        assert mgr.prefill_tokens(probe) == probe.seqs[0].num_tokens - 4 * full  # every full block is found
    mgr.check_invariants()


@pytest.mark.parametrize("cls", ["reference", "fast"])
def test_misuse_is_refused_by_name_and_changes_nothing(cls):
    """Allocating twice for a sequence that holds blocks, forking into one, or touching a sequence that
    holds none: each is refused with an error naming the sequence, and the free blocks stay as they were."""
    from paged.sim.fast import FastPagedKVCacheManager

    mgr = (PagedKVCacheManager if cls == "reference" else FastPagedKVCacheManager)(20, 4, watermark=0.0)
    g = group(9, 4)
    mgr.allocate(g)
    free = mgr.get_num_free_gpu_blocks()
    with pytest.raises(ValueError, match=r"sequence\(s\) \[0\] of request 0 already hold blocks"):
        mgr.allocate(g)  # still WAITING: a caller that forgot to mark it running
    samples = SequenceGroup(3, 0.0, [Sequence(3, 9), Sequence(4, 9)], 4, max_num_seqs=2)
    mgr.allocate(samples)
    free = mgr.get_num_free_gpu_blocks()
    with pytest.raises(ValueError, match=r"sequence\(s\) \[3, 4\] of request 3 already hold blocks"):
        mgr.allocate(samples)
    for seq in samples.seqs:
        seq.status = SequenceStatus.RUNNING
    with pytest.raises(ValueError, match="request 3 has no waiting sequence"):
        mgr.allocate(samples)  # running: nothing to allocate for
    assert mgr.get_num_free_gpu_blocks() == free
    other = Sequence(1, 9)
    mgr.fork(g.seqs[0], other)
    with pytest.raises(ValueError, match="sequence 1 already holds blocks"):
        mgr.fork(g.seqs[0], other)
    stranger = Sequence(7, 5)
    with pytest.raises(KeyError, match="sequence 7 holds no blocks"):
        mgr.append_slots(stranger)
    with pytest.raises(KeyError, match="sequence 7 holds no blocks"):
        mgr.fork(stranger, Sequence(8, 5))
    with pytest.raises(KeyError, match="sequence 7 holds no blocks"):
        mgr.get_block_table(stranger)
    assert mgr.get_num_free_gpu_blocks() == free
    assert 8 not in mgr.block_tables


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(num_cpu_blocks=-1), ValueError, r"num_cpu_blocks \(0 for no swap space\) must be a positive integer"),
    (dict(num_cpu_blocks=2.5), ValueError, "num_cpu_blocks"),
])
def test_a_bad_swap_space_is_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        PagedKVCacheManager(10, 4, **kwargs)
    with pytest.raises(ValueError, match="num_gpu_blocks"):
        PagedKVCacheManager(0, 4)
