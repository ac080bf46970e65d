"""The KV cache manager contract (paged.core.KVCacheManager), run against every manager of the registry.

The scheduler, the engine's step and the simulator's fast-forward use only these methods, so each
manager must honour the same rules: tables cover the tokens, no two requests share a slot they
did not fork, the memory breakdown adds up, the closed-form run accounting equals stepping, and
everything returns to the pool.
"""

from __future__ import annotations

import pytest

from paged.core.kv_cache_manager import AllocStatus, MemoryUsage
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus
from paged.systems import make_kv_manager, system_names

MANAGED = system_names(manager=True)
NUM_SLOTS = 16384  # room for 16 Orca (Max) reservations of 1024 slots
BLOCK = 16


def manager_for(system):
    # Orca reserves single slots in the simulator, whole blocks in the engine: check both granularities.
    return make_kv_manager(system, NUM_SLOTS, block_size=BLOCK, max_seq_len=1024, contiguous_block_size=BLOCK)


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


def slots_of(manager, seq):
    table = manager.get_block_table(seq)
    return {b * manager.block_size + o for b in table for o in range(manager.block_size)}


@pytest.fixture(params=MANAGED)
def system(request):
    return request.param


def test_registry_lists_every_manager():
    assert set(MANAGED) == {"paged", "orca-oracle", "orca-pow2", "orca-max"}


def test_tables_cover_tokens_and_requests_do_not_overlap(system):
    manager = manager_for(system)
    groups = [group(i, p, o) for i, (p, o) in enumerate([(5, 20), (33, 7), (100, 60)])]
    for g in groups:
        admit(manager, g)
        grow(manager, g, 3)
    seen = set()
    for g in groups:
        seq = g.seqs[0]
        table = manager.get_block_table(seq)
        assert len(table) * manager.block_size >= seq.num_tokens
        slots = slots_of(manager, seq)
        assert not slots & seen, "two requests share KV slots they did not fork"
        seen |= slots
    assert manager.num_used_slots >= sum(g.seqs[0].num_tokens for g in groups)
    physical, logical = manager.blocks_held([g.seqs[0] for g in groups])
    assert physical == logical > 0  # nothing forked, nothing shared


def test_memory_usage_adds_up(system):
    manager = manager_for(system)
    groups = [group(i, 40 + 7 * i, 30) for i in range(6)]
    for g in groups:
        admit(manager, g)
        grow(manager, g, 5)
    usage = manager.memory_usage(groups)
    assert isinstance(usage, MemoryUsage) and usage.total == manager.num_total_slots
    parts = (usage.token_states, usage.reservation, usage.internal, usage.external)
    assert min(parts) >= 0 and sum(parts) == usage.total
    assert usage.token_states == sum(g.seqs[0].num_tokens for g in groups)
    assert abs(sum(usage.fractions().values()) - 1) < 1e-12


def test_decode_run_accounting_equals_stepping(system):
    """decode_run_usage (fast-forward's closed form) is exactly the sum of step-by-step memory_usage."""
    stepped, closed = manager_for(system), manager_for(system)
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
    manager = make_kv_manager(system, 256, block_size=BLOCK, max_seq_len=128, contiguous_block_size=BLOCK)
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


def test_request_slot_iterations_is_the_lone_request_footprint(system):
    manager = manager_for(system)
    g = group(0, 21, 37)
    admit(manager, g)
    held = 0
    for _ in range(g.output_len):
        held += manager.num_used_slots
        grow(manager, g)
    assert manager.request_slot_iterations(21, 37) == held


def test_everything_returns_to_the_pool(system):
    manager = manager_for(system)
    groups = [group(i, 10 + i, 20) for i in range(8)]
    for g in groups:
        admit(manager, g)
        grow(manager, g, 4)
    for g in groups:
        for s in g.seqs:
            manager.free(s)
    manager.free(groups[0].seqs[0])  # freeing twice (or an unknown sequence) does nothing
    assert manager.num_used_slots == 0
    assert manager.memory_usage([]).external == manager.num_total_slots


def test_a_request_larger_than_the_cache_is_never_and_explained(system):
    manager = make_kv_manager(system, 512, block_size=BLOCK, max_seq_len=1024, contiguous_block_size=BLOCK)
    g = group(0, 600, 200)
    assert manager.can_allocate(g) is AllocStatus.NEVER
    assert any(ch.isdigit() for ch in manager.never_reason(g))


def test_swapping_is_consistent(system):
    manager = make_kv_manager(system, NUM_SLOTS, block_size=BLOCK, max_seq_len=1024, contiguous_block_size=BLOCK,
                              num_cpu_blocks=64 if system == "paged" else 0)
    g = group(0, 40, 10)
    admit(manager, g)
    if not manager.can_swap_out(g):  # the contiguous baselines never swap
        assert manager.can_swap_in(g) is AllocStatus.NEVER
        with pytest.raises(NotImplementedError):
            manager.swap_out(g)
        return
    before = manager.get_block_table(g.seqs[0])
    pairs = manager.swap_out(g)
    assert sorted(gpu for gpu, _ in pairs) == sorted(before) and manager.num_used_slots == 0
    for s in g.seqs:
        s.status = SequenceStatus.SWAPPED
    assert manager.can_swap_in(g) is AllocStatus.OK
    back = manager.swap_in(g)
    assert len(back) == len(before)


@pytest.mark.parametrize("system,fork_first", [("paged", False), ("paged", True), ("orca-oracle", False),
                                               ("orca-pow2", False), ("orca-max", False)])
def test_append_slots_in_order_is_group_by_group_until_one_does_not_fit(system, fork_first):
    """The decode hot path equals can_append_slots then append_slots per group, stopping at the first
    group that does not fit (that group and the later ones untouched): paged blocks run out, and
    sequences outgrow their Orca reservations (they generate past the output length they reserved)."""
    def build():
        manager = make_kv_manager(system, (24 if system == "paged" else 40) * BLOCK, block_size=BLOCK, max_seq_len=128,
                                  contiguous_block_size=BLOCK)
        groups = []
        shapes = [(31, 40), (16, 40), (5, 60), (47, 40), (20, 30), (9, 50)] if system == "paged" else \
            [(31, 20), (16, 40), (5, 10), (20, 30)]
        for i, (prompt, output) in enumerate(shapes):
            g = group(i, prompt, output)
            admit(manager, g)
            if fork_first and i == 0:
                child = Sequence(100, prompt)
                manager.fork(g.seqs[0], child)
                child.status = SequenceStatus.RUNNING
                g.seqs.append(child)
            groups.append(g)
        return manager, groups

    fast, slow = build(), build()
    stops = 0
    for step in range(110):  # Orca (Max) reserves 128 slots: its sequences outgrow them too
        if not fast[1]:
            break
        for manager, groups in (fast, slow):
            for g in groups:
                for s in g.seqs:
                    s.append_token()
        done, copies = fast[0].append_slots_in_order(fast[1])
        expected, ref = 0, []
        for g in slow[1]:
            if not slow[0].can_append_slots(g):
                break
            for s in g.seqs:
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
                    for s in g.seqs:
                        s.num_generated -= 1
    assert stops >= 2  # the case that matters was met
