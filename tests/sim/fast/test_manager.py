"""The fast managers and scheduler: each batched operation does what the reference's operations do one by
one (the same blocks taken and freed, in the same order), and the closed forms equal stepping."""

from __future__ import annotations

import pytest

from paged.core.kv_cache_manager import AllocStatus
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus
from paged.sim.fast.manager import FastBlockTable, FastPagedKVCacheManager, ceil_sum
from paged.systems import make_kv_manager, system_names
from paged.block import BlockAllocator, BlockTable, PagedKVCacheManager
from paged.sim import fast as fast_path

MANAGED = system_names(manager=True)
NUM_SLOTS = 16384
BLOCK = 16


def fast_manager(system, num_blocks=NUM_SLOTS // BLOCK, block_size=BLOCK, **kwargs):
    return make_kv_manager(system, num_blocks, block_size, classes=(fast_path.FastPagedKVCacheManager,
                                                                   fast_path.FastContiguousKVCacheManager), **kwargs)


def reference_manager(system, num_blocks=NUM_SLOTS // BLOCK, block_size=BLOCK, **kwargs):
    return make_kv_manager(system, num_blocks, block_size, **kwargs)


def group(i, prompt, output):
    return SequenceGroup(i, 0.0, [Sequence(i, prompt)], output)


def admit(manager, g):
    assert manager.can_allocate(g) is AllocStatus.OK
    manager.allocate(g)
    for s in g.seqs:
        s.status = SequenceStatus.RUNNING


def grow(manager, g, n=1):
    for _ in range(n):
        assert manager.can_append_slots(g)
        for s in g.seqs:
            s.append_token()
            manager.append_slots(s)


@pytest.fixture(params=MANAGED)
def system(request):
    return request.param


def test_ceil_sum():
    for bs in (1, 3, 16):
        for x in range(0, 60):
            assert ceil_sum(x, bs) == sum(-(-m // bs) for m in range(1, x + 1))


def test_grow_to_grows_or_changes_nothing():
    alloc = BlockAllocator(3, 4)
    table = FastBlockTable(alloc)
    copies = []
    assert table.grow_to(3, copies) and table.num_blocks == 1  # took a block
    assert table.grow_to(4, copies) and table.num_tokens == 4  # inside the private last block
    assert not table.grow_to(13, copies) and table.num_tokens == 4  # needs a fourth block: refused
    assert table.grow_to(6, copies) and table.num_blocks == 2 and copies == []
    child = table.fork()  # the last block is now shared: the next token copies it
    assert isinstance(child, FastBlockTable)
    assert child.grow_to(7, copies) and copies == [(table.last_block, child.last_block)]
    table.check_invariants()
    child.check_invariants()


@pytest.mark.parametrize("caching", [False, True])
def test_a_new_requests_prefill_is_the_references(caching):
    """The shortcut for a prefill with nothing to share takes the blocks the reference's plan takes."""
    fast, ref = fast_manager("paged", 64, 4, enable_prefix_caching=caching), reference_manager(
        "paged", 64, 4, enable_prefix_caching=caching)
    for i, (prompt, n) in enumerate([(9, 1), (12, 3), (1, 2), (30, 1)]):
        groups = [SequenceGroup(i, 0.0, [Sequence(10 * i + k, prompt, token_ids=list(range(100 * i, 100 * i + prompt)))
                                         for k in range(n)], 5) for _ in range(2)]
        for manager, g in zip((fast, ref), groups):
            assert manager.prefill_tokens(g) == prompt
            assert manager.can_allocate(g) is AllocStatus.OK
        assert fast.allocate(groups[0]) == ref.allocate(groups[1])
        assert [fast.get_block_table(s) for s in groups[0].seqs] == [ref.get_block_table(s) for s in groups[1].seqs]
    assert fast.can_allocate(group(9, 300, 1)) is ref.can_allocate(group(9, 300, 1)) is AllocStatus.NEVER
    fast.check_invariants()


def test_hold_release_and_replace_tables():
    mgr = fast_manager("paged", 32, 4)
    g = group(0, 10, 4)
    admit(mgr, g)
    assert mgr.sharing_counts() == (3, 3)
    held = mgr.hold_blocks(3)  # blocks held outside the tables (the calendars) are in use
    assert mgr.blocks_in_use() == 6 and mgr.get_num_free_gpu_blocks() == 26
    table = mgr.get_block_table(g.seqs[0])
    mgr.replace_tables([(g.seqs[0], table + held[:1], 13)], held=held[:1])  # a held block joins the table
    assert mgr.get_block_table(g.seqs[0]) == table + held[:1] and mgr.blocks_in_use() == 6
    mgr.release_blocks(held[1:])
    assert mgr.blocks_in_use() == 4
    with pytest.raises(ValueError, match="13 tokens need 4 blocks"):
        mgr.replace_tables([(g.seqs[0], table, 13)])
    mgr.check_invariants()
    from paged.block import OutOfBlocksError
    with pytest.raises(OutOfBlocksError):
        mgr.hold_blocks(29)
    mgr.check_invariants()


def test_decode_run_accounting_equals_stepping(system):
    """decode_run_usage (fast-forward's closed form) is exactly the sum of step-by-step memory_usage."""
    stepped = reference_manager(system, max_seq_len=1024, contiguous_block_size=BLOCK)
    closed = fast_manager(system, max_seq_len=1024, contiguous_block_size=BLOCK)
    lens = [(17, 40), (3, 64), (64, 10), (30, 33)]
    g_step = [group(i, p, o) for i, (p, o) in enumerate(lens)]
    g_closed = [group(i, p, o) for i, (p, o) in enumerate(lens)]
    for a, b in zip(g_step, g_closed):
        admit(stepped, a)
        admit(closed, b)
    k = closed.decode_run_limit([g.seqs[0] for g in g_closed], 9)
    assert 1 <= k <= 9
    ns = [g.seqs[0].num_tokens for g in g_closed]
    summed = [0, 0, 0, 0]
    for _ in range(k):
        usage = stepped.memory_usage(g_step)
        summed = [x + y for x, y in zip(summed, (usage.token_states, usage.reservation, usage.internal, usage.total))]
        for g in g_step:
            grow(stepped, g)
    run = closed.decode_run_usage(g_closed, ns, k)
    assert [run.token_states, run.reservation, run.internal, run.total] == summed


def test_decode_run_limit_is_safe_on_a_full_cache(system):
    manager = fast_manager(system, 256 // BLOCK, max_seq_len=128, contiguous_block_size=BLOCK)
    groups = []
    i = 0
    while True:
        g = group(i, 30, 90)
        if manager.can_allocate(g) is not AllocStatus.OK:
            break
        admit(manager, g)
        groups.append(g)
        i += 1
    assert groups
    k = manager.decode_run_limit([g.seqs[0] for g in groups], 90)
    assert k >= 1
    for g in groups:  # room for the tokens of the k iterations (the first uses the room it has): it fits
        g.seqs[0].num_generated += k - 1
        manager.append_slots(g.seqs[0])
    if system == "paged":  # and the limit is tight: one more iteration would not fit
        for g in groups:
            g.seqs[0].num_generated += 1  # the k-th iteration's token: the next iteration needs room for it
        assert not all(manager.can_append_slots(g) for g in groups)


def test_decode_run_usage_of_one_iteration_is_memory_usage(system):
    manager = fast_manager(system, 512 // 8, 8, max_seq_len=128, contiguous_block_size=8)
    groups = [group(i, 5 + 3 * i, 20) for i in range(3)]
    for g in groups:
        admit(manager, g)
        grow(manager, g, 1)
    ns = [g.seqs[0].num_tokens for g in groups]
    assert manager.decode_run_usage(groups, ns, 1) == manager.memory_usage(groups)


@pytest.mark.parametrize("system,fork_first", [("paged", False), ("paged", True), ("orca-oracle", False),
                                               ("orca-pow2", False), ("orca-max", False)])
def test_append_slots_in_order_is_group_by_group_until_one_does_not_fit(system, fork_first):
    """The decode hot path equals can_append_slots then append_slots per group, stopping at the first
    group that does not fit (that group and the later ones untouched): paged blocks run out, and
    sequences outgrow their Orca reservations (they generate past the output length they reserved)."""
    def build(make):
        manager = make(system, 24 if system == "paged" else 40, max_seq_len=128, contiguous_block_size=BLOCK)
        groups = []
        shapes = [(31, 40), (16, 40), (5, 60), (47, 40), (20, 30), (9, 50)] if system == "paged" else \
            [(31, 20), (16, 40), (5, 10), (20, 30)]
        for i, (prompt, output) in enumerate(shapes):
            g = group(i, prompt, output)
            admit(manager, g)
            for k in range(fork_first * (2 if i == 0 else i == 3)):  # groups of 3 and 2 samples
                child = Sequence(100 + 10 * i + k, prompt)
                manager.fork(g.seqs[0], child)
                child.status = SequenceStatus.RUNNING
                g.seqs.append(child)
            groups.append(g)
        return manager, groups

    fast, slow = build(fast_manager), build(reference_manager)
    stops = 0
    for step in range(110):  # Orca (Max) reserves 128 slots: its sequences outgrow them too
        if not fast[1]:
            break
        if step == 20 and fork_first:  # a finished sample holds its blocks but no longer grows
            for _, groups in (fast, slow):
                groups[0].seqs[1].status = SequenceStatus.FINISHED
        for manager, groups in (fast, slow):
            for g in groups:
                for s in g.get_seqs(SequenceStatus.RUNNING):
                    s.append_token()
        done, copies = fast[0].append_slots_in_order(fast[1])
        expected, ref = 0, []
        for g in slow[1]:
            if not slow[0].can_append_slots(g):
                break
            for s in g.get_seqs(SequenceStatus.RUNNING):
                ref.extend(slow[0].append_slots(s))
            expected += 1
        assert (done, copies) == (expected, ref), step
        assert [fast[0].get_block_table(s) for g in fast[1] for s in g.seqs] == \
            [slow[0].get_block_table(s) for g in slow[1] for s in g.seqs]
        if done < len(fast[1]):  # the rest is left as it was: drop the latest group from both, as a preemption would
            stops += 1
            for manager, groups in (fast, slow):
                last = groups.pop()
                for s in last.seqs:
                    manager.free(s)
                for g in groups:
                    for s in g.get_seqs(SequenceStatus.RUNNING):
                        s.num_generated -= 1
    assert stops >= 2  # the case that matters was met




@pytest.mark.parametrize("prompt", [20, 32])  # the samples share a partly filled last block, or a full one
@pytest.mark.parametrize("spare", [-1, 0, 1])
def test_a_group_of_samples_fits_exactly_when_the_reference_says_it_does(prompt, spare):
    """Three samples of one prompt take their first token: with a shared, partly filled last block two of
    them copy it (the third then holds it alone and writes in place); with a full one each takes a new
    block. With one block fewer than that, the fast step stops at the group, as the reference does."""
    def build(cls):
        manager = cls(64, BLOCK, watermark=0.0)
        first = Sequence(0, prompt)
        g = SequenceGroup(0, 0.0, [first], 40)
        admit(manager, g)
        for k in (1, 2):
            child = Sequence(k, prompt)
            manager.fork(first, child)
            child.status = SequenceStatus.RUNNING
            g.seqs.append(child)
        needed = 2 if prompt % BLOCK else 3
        filler = Sequence(9, BLOCK * (manager.get_num_free_gpu_blocks() - needed - spare))
        admit(manager, SequenceGroup(9, 0.0, [filler], 1))  # leaves needed + spare blocks free
        for s in g.seqs:
            s.append_token()
        return manager, g

    (fast, g_fast), (slow, g_slow) = build(FastPagedKVCacheManager), build(PagedKVCacheManager)
    fits = slow.can_append_slots(g_slow)
    assert fits == (spare >= 0)
    ref = [pair for s in g_slow.seqs for pair in slow.append_slots(s)] if fits else []
    assert fast.append_slots_in_order([g_fast]) == (int(fits), ref)
    assert [fast.get_block_table(s) for s in g_fast.seqs] == [slow.get_block_table(s) for s in g_slow.seqs]
    assert fast.get_num_free_gpu_blocks() == slow.get_num_free_gpu_blocks()


@pytest.mark.parametrize("lag", [0, 3])
def test_the_decode_step_with_prefix_caching_registers_the_blocks_the_reference_registers(lag):
    """With prefix caching and token ids, the fast decode step asks the chain only when a block of known
    tokens filled, and the cache then holds what the reference's per-step registration gives: the same
    tables, the same free and cached blocks, the same hits for a new prompt. ``lag``: token ids arrive
    that many steps after the count (the chain may only register blocks whose ids it knows)."""
    from paged.block import PagedKVCacheManager

    def build(cls):
        manager = cls(40, 4, watermark=0.0, enable_prefix_caching=True)
        groups = []
        for i, prompt in enumerate([list(range(6)), list(range(6)) + [9], [7, 7, 7, 7, 7], list(range(11))]):
            g = SequenceGroup(i, 0.0, [Sequence(i, len(prompt), 0, list(prompt))], 30)
            admit(manager, g)
            groups.append(g)
        return manager, groups

    runs = [build(FastPagedKVCacheManager), build(PagedKVCacheManager)]
    pending = {}
    for step in range(20):
        for manager, groups in runs:
            for g in groups:
                s = g.seqs[0]
                s.num_generated += 1
                pending.setdefault((id(manager), s.seq_id), []).append(100 + 3 * s.seq_id + step % 2)
                if step % (lag + 1) == lag:  # ids arrive in bursts of lag + 1
                    s.token_ids.extend(pending.pop((id(manager), s.seq_id)))
        fast, slow = runs
        assert fast[0].append_slots_in_order(fast[1]) == (len(fast[1]), [])
        for g in slow[1]:
            assert slow[0].can_append_slots(g)
            slow[0].append_slots(g.seqs[0])
        states = []
        for manager, groups in runs:
            probe = [SequenceGroup(99, 0.0, [Sequence(99, len(s.token_ids), 0, list(s.token_ids))], 1)
                     for s in (g.seqs[0] for g in groups)]
            states.append(([manager.get_block_table(g.seqs[0]) for g in groups], manager.get_num_free_gpu_blocks(),
                           manager.gpu_allocator.num_cached_blocks, [manager.prefill_tokens(p) for p in probe]))
        assert states[0] == states[1], step
    assert states[0][2] > 4  # decode blocks were registered, not only the prompts'


@pytest.mark.parametrize("decoded", [False, True])
def test_swap_in_blocks_is_what_can_swap_in_asks(decoded):
    """A swapped-out group of samples fits back exactly when ``swap_in_blocks`` blocks are free: its blocks (the
    shared ones once), plus, when each sample has a token not yet in the cache, the copies of their shared
    partly filled last block."""
    mgr = fast_manager("paged", 8, 4, num_cpu_blocks=8)
    g = SequenceGroup(0, 0.0, [Sequence(k, 10) for k in range(3)], 5)
    admit(mgr, g)  # 10 tokens: 3 blocks shared by the 3 samples, the last one partly filled
    if decoded:
        for s in g.seqs:
            s.append_token()
    mgr.swap_out(g)
    for s in g.seqs:
        s.status = SequenceStatus.SWAPPED
    need = mgr.swap_in_blocks(g)
    assert need == (5 if decoded else 3)  # two of the three writers copy the shared last block
    for free in range(8, -1, -1):
        held = mgr.hold_blocks(8 - free)
        assert (mgr.can_swap_in(g) is AllocStatus.OK) == (need <= free)
        mgr.release_blocks(held)
    mgr.check_invariants()


@pytest.mark.parametrize("shape", ["single", "samples", "beam", "forked"])
def test_reserved_sequences_are_the_references(shape):
    """The fast scheduler counts the running groups' reserved sequences as the reference does, by its
    shortcuts for one sequence per request and for parallel samples, and without them for beams and forks."""
    from paged.core.scheduler import Scheduler

    def groups():
        out = []
        for i in range(6):
            width = 1 if shape == "single" else 1 + i % 3
            seqs = [Sequence(10 * i + k, 5 + i) for k in range(1 if shape in ("beam", "forked") else width)]
            out.append(SequenceGroup(i, float(i), seqs, 4, max_num_seqs=width if shape == "beam" else 0))
        return out

    counts = []
    for cls, manager in ((fast_path.FastScheduler, fast_manager("paged")), (Scheduler, reference_manager("paged"))):
        scheduler = cls(manager)
        for g in groups():
            scheduler.add_seq_group(g)
        out = scheduler.schedule()
        seen = [scheduler.num_reserved_seqs()]
        if shape == "forked":
            parent = out.scheduled_seq_groups[0].seqs[0]
            scheduler.fork_seq(out.scheduled_seq_groups[0], parent, Sequence(999, parent.prompt_len))
            seen.append(scheduler.num_reserved_seqs())
        counts.append(seen)
    assert counts[0] == counts[1] and counts[0][0] > 0


def test_a_kept_prefill_plan_answers_only_for_its_group_until_the_cache_changes():
    """Within ``keeping_plans`` (the fast scheduler's admission), a plan answers again only for the group it
    was made for and only until ``allocate`` changes the cache: the same answers and tables as the reference."""
    from contextlib import nullcontext

    from paged.block import PagedKVCacheManager

    seen = []
    for cls in (FastPagedKVCacheManager, PagedKVCacheManager):
        manager = cls(64, 4, watermark=0.0, enable_prefix_caching=True)
        x = SequenceGroup(0, 0.0, [Sequence(0, 13, 0, list(range(13)))], 4)
        y = SequenceGroup(1, 0.0, [Sequence(1, 9, 0, list(range(9)))], 4)
        answers = []
        with manager.keeping_plans() if cls is FastPagedKVCacheManager else nullcontext():
            answers.append(manager.prefill_tokens(x))  # nothing cached yet: all 13 tokens
            manager.allocate(y)  # another group: planned for itself
            manager.commit_computed()
            answers.append(manager.prefill_tokens(x))  # y's two full blocks are cached now: 5 tokens
            answers.append(manager.allocate(x))
            manager.commit_computed()
            answers.append(manager.prefill_tokens(x))  # asked again after the change: its own 3 blocks hit
        seen.append((answers, manager.get_block_table(x.seqs[0]), manager.get_block_table(y.seqs[0])))
    assert seen[0] == seen[1]
    assert [seen[0][0][i] for i in (0, 1, 3)] == [13, 5, 1]
