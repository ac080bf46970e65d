"""The KV cache manager contract (paged.core.KVCacheManager), run against every manager of the registry.

The scheduler, the engine's step and the simulator use only these methods, so each manager must honour
the same rules: tables cover the tokens, no two requests share a slot they did not fork, the memory
breakdown adds up, and everything returns to the pool.
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
    return make_kv_manager(system, NUM_SLOTS // BLOCK, BLOCK, max_seq_len=1024, contiguous_block_size=BLOCK)


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
    manager = make_kv_manager(system, 512 // BLOCK, BLOCK, max_seq_len=1024, contiguous_block_size=BLOCK)
    g = group(0, 600, 200)
    assert manager.can_allocate(g) is AllocStatus.NEVER
    assert any(ch.isdigit() for ch in manager.never_reason(g))


def test_swapping_is_consistent(system):
    manager = make_kv_manager(system, NUM_SLOTS // BLOCK, BLOCK, max_seq_len=1024, contiguous_block_size=BLOCK,
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
