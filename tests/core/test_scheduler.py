"""The FCFS scheduler (§4.5): arrival order, latest-first preemption, nothing lost or duplicated."""

import pytest

from paged.block.manager import PagedKVCacheManager
from paged.core.kv_cache_manager import RequestTooLargeError
from paged.core.scheduler import Scheduler
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus
from paged.sim.simulator import simulate


def group(i, prompt, output, t=None, n=1):
    return SequenceGroup(i, float(i if t is None else t), [Sequence(10 * i + k, prompt) for k in range(n)], output)


def step(scheduler, out):
    """Run one iteration: every running sequence gains a token; finished ones are freed."""
    for g in out.scheduled_seq_groups:
        for s in g.get_seqs(SequenceStatus.RUNNING):
            s.append_token()
            if s.num_generated >= g.output_len:
                scheduler.finish_seq(s)
    return scheduler.free_finished_seq_groups()


def test_fcfs_admission_order():
    sched = Scheduler(PagedKVCacheManager(8, 4, watermark=0.0))
    for i in range(4):
        sched.add_seq_group(group(i, 8, 4))  # 2 blocks each: the first four fill the cache
    out = sched.schedule()
    assert out.is_prefill and [g.request_id for g in out.scheduled_seq_groups] == [0, 1, 2, 3]
    sched2 = Scheduler(PagedKVCacheManager(4, 4, watermark=0.0))
    for i, prompt in enumerate([12, 8, 1]):  # 3 blocks, then 2 (does not fit), then 1 (would fit)
        sched2.add_seq_group(group(i, prompt, 4))
    out = sched2.schedule()
    assert [g.request_id for g in out.scheduled_seq_groups] == [0]  # nobody overtakes request 1


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_latest_arrival_is_preempted_first(mode):
    manager = PagedKVCacheManager(6, 4, num_cpu_blocks=8, watermark=0.0)
    sched = Scheduler(manager, preemption_mode=mode)
    for i in range(3):
        sched.add_seq_group(group(i, 8, 10))  # 2 full blocks each: the cache is full
    step(sched, sched.schedule())  # prefill of all three
    out = sched.schedule()  # each needs a third block; request 0 asks first, the latest goes
    assert [g.request_id for g in out.preempted] == [2]
    assert [g.request_id for g in out.scheduled_seq_groups] == [0, 1]
    if mode == "swap":
        assert [g.request_id for g in sched.swapped] == [2]
        assert len(out.blocks_to_swap_out) == 2
    else:
        assert [g.request_id for g in sched.waiting] == [2]


def test_swap_keeps_shared_blocks_shared():
    manager = PagedKVCacheManager(16, 4, num_cpu_blocks=16, watermark=0.0)
    sched = Scheduler(manager, preemption_mode="swap")
    g = group(0, 10, 8)
    sched.add_seq_group(g)
    out = sched.schedule()
    parent = g.seqs[0]
    child = Sequence(99, 10)
    sched.fork_seq(g, parent, child)  # parallel sampling: the child shares all 3 blocks
    assert manager.get_block_table(parent) == manager.get_block_table(child)
    used = 16 - manager.get_num_free_gpu_blocks()
    pairs = manager.swap_out(g)
    for s in g.seqs:
        s.status = SequenceStatus.SWAPPED
    assert len(pairs) == used == 3  # each shared block moved once
    cpu = [manager.get_block_table(s) for s in g.seqs]
    assert cpu[0] == cpu[1] and all(manager.cpu_allocator.ref_count(b) == 2 for b in cpu[0])
    manager.swap_in(g)
    gpu = [manager.get_block_table(s) for s in g.seqs]
    assert gpu[0] == gpu[1] and all(manager.gpu_allocator.ref_count(b) == 2 for b in gpu[0])
    assert manager.cpu_allocator.num_free_blocks == 16
    del out


def test_request_larger_than_cache_is_refused():
    sched = Scheduler(PagedKVCacheManager(4, 4, watermark=0.0))
    with pytest.raises(RequestTooLargeError, match="could never run"):
        sched.add_seq_group(group(0, 10, 10))  # 20 tokens > 16 slots


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_no_request_lost_or_duplicated_under_preemption(mode):
    import random

    from paged.workloads import Request as Req

    rng = random.Random(7)
    trace = [Req(i, rng.randint(1, 60), rng.randint(1, 80), 0.0) for i in range(60)]
    manager = PagedKVCacheManager(24, 8, num_cpu_blocks=40)
    result = simulate(trace, manager, lambda out: 0.01, preemption_mode=mode, record_memory=False)
    assert result.num_preemptions > 0
    assert sorted(g.request_id for g in result.groups) == list(range(60))
    for g, r in zip(result.groups, trace):
        assert g.seqs[0].num_generated == r.output_len  # recomputed tokens are not counted twice
        assert g.is_finished() and g.finished_time is not None
    # one token-step per generated token plus one per recomputation prefill of a recompute victim
    assert result.batched_requests_sum >= sum(r.output_len for r in trace)
    assert manager.get_num_free_gpu_blocks() == 24
