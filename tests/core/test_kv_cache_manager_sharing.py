"""The KV cache manager contract for sharing (paper §4.2–§4.5, §6.1): groups, forks and prefix caching, every manager.

The scheduler, the engine's step and the simulator only call the methods of
:class:`paged.core.KVCacheManager`; these tests hold the paged manager (with and without prefix
caching) and the contiguous Orca managers to the same promises.
"""

import pytest

from paged.block.manager import PagedKVCacheManager
from paged.contiguous import ContiguousKVCacheManager
from paged.core.kv_cache_manager import AllocStatus
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus

SLOTS = 512
MANAGERS = {
    "paged": lambda: PagedKVCacheManager(SLOTS // 8, 8, num_cpu_blocks=64, watermark=0.0),
    "paged-apc": lambda: PagedKVCacheManager(SLOTS // 8, 8, watermark=0.0, enable_prefix_caching=True),
    "orca-oracle": lambda: ContiguousKVCacheManager(SLOTS, "oracle", max_seq_len=128, block_size=8),
    "orca-max": lambda: ContiguousKVCacheManager(SLOTS, "max", max_seq_len=128, block_size=8),
}


@pytest.fixture(params=list(MANAGERS))
def manager(request):
    return MANAGERS[request.param]()


def make_group(rid, prompt, output, n=1, width=0, ids=True):
    seqs = [Sequence(10 * rid + k, prompt, token_ids=list(range(1, prompt + 1)) if ids else None) for k in range(n)]
    return SequenceGroup(rid, float(rid), seqs, output, max_num_seqs=width)


def admit(manager, group):
    assert manager.can_allocate(group) is AllocStatus.OK
    starts = manager.allocate(group)
    for seq in group.seqs:
        seq.status = SequenceStatus.RUNNING
    return starts


def decode(manager, group, tokens=1):
    for _ in range(tokens):
        for seq in group.get_seqs(SequenceStatus.RUNNING):
            seq.append_token(7 + seq.seq_id)
        assert manager.can_append_slots(group)
        for seq in group.get_seqs(SequenceStatus.RUNNING):
            manager.append_slots(seq)


def test_new_samples_compute_the_prompt_once(manager):
    g = make_group(0, 20, 10, n=3)
    assert manager.prefill_tokens(g) == 20
    assert admit(manager, g) == [0, 20, 20]
    decode(manager, g, 5)
    held, unshared = manager.blocks_held(g.seqs)
    assert held <= unshared


def test_everything_comes_back(manager):
    before = manager.num_used_slots
    groups = [make_group(i, 9 + i, 6, n=1 + i % 2) for i in range(3)]
    for g in groups:
        admit(manager, g)
        decode(manager, g, 3)
    assert manager.num_used_slots > before
    usage = manager.memory_usage(groups)
    assert usage.token_states + usage.reservation + usage.internal + usage.external == usage.total
    for g in groups:
        for seq in g.seqs:
            manager.free(seq)
    assert manager.num_used_slots == before


def test_recompute_comes_back_in_the_same_memory(manager):
    g = make_group(0, 16, 12, n=2)
    admit(manager, g)
    decode(manager, g, 4)
    used = manager.num_used_slots
    manager.free_for_recompute(g)
    for seq in g.seqs:
        seq.status = SequenceStatus.WAITING
    assert manager.num_used_slots == 0  # (cached blocks of the prefix cache are free: evictable)
    starts = manager.allocate(g)
    assert all(0 <= s < seq.num_tokens for s, seq in zip(starts, g.seqs))  # every sequence computes its last token
    if isinstance(manager, PagedKVCacheManager):
        # the shared prompt is computed once; with prefix caching not at all (its blocks are still cached)
        assert starts == ([16, 16] if manager.enable_prefix_caching else [0, 16])
    for seq in g.seqs:
        seq.status = SequenceStatus.RUNNING
    assert manager.num_used_slots == used


def test_beam_group_forks_within_its_reservation(manager):
    g = make_group(0, 12, 8, width=3)
    admit(manager, g)
    parent = g.seqs[0]
    for k in (1, 2):
        child = Sequence(100 + k, 12, token_ids=list(parent.token_ids), status=SequenceStatus.RUNNING)
        manager.fork(parent, child)
        g.seqs.append(child)
    decode(manager, g, 3)
    dropped = g.seqs.pop()
    manager.free(dropped)
    again = Sequence(200, 12, num_generated=3, token_ids=list(g.seqs[0].token_ids), status=SequenceStatus.RUNNING)
    manager.fork(g.seqs[0], again)  # a new candidate where the dropped one was
    for seq in g.seqs + [again]:
        manager.free(seq)
    assert manager.num_used_slots == 0


def test_sharing_counts(manager):
    g = make_group(0, 32, 4, n=4)
    admit(manager, g)
    in_use, without = manager.sharing_counts()
    assert 0 < in_use <= without
    if isinstance(manager, PagedKVCacheManager):
        assert (in_use, without) == (4, 16)  # four 8-token blocks shared by four samples
