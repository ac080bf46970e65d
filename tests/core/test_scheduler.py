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


# -- sequence groups under memory pressure -----------------------------------------------------------

from paged.core.serving_loop import ServingLoop  # noqa: E402
from paged.sim.executor import SimulatedExecutor  # noqa: E402


def serve(manager, groups, mode, max_num_seqs=256, max_num_batched_tokens=2048):
    sched = Scheduler(manager, preemption_mode=mode, max_num_seqs=max_num_seqs,
                      max_num_batched_tokens=max_num_batched_tokens)
    return ServingLoop(sched, SimulatedExecutor(lambda out: 0.01), groups).run()


@pytest.mark.parametrize("mode", ["recompute", "swap"])
@pytest.mark.parametrize("prompt, output, n", [(5, 2, 2), (6, 3, 3), (7, 9, 2), (4, 12, 3)])
def test_group_whose_blocks_fit_exactly_completes(mode, prompt, output, n):
    bs = 4
    final, shared = -(-(prompt + output) // bs), prompt // bs
    num_blocks = shared + n * (final - shared)  # the group's blocks at its final length: exactly the cache
    manager = PagedKVCacheManager(num_blocks, bs, num_cpu_blocks=64, watermark=0.0)
    result = serve(manager, [group(0, prompt, output, n=n)], mode)
    assert all(s.num_generated == output for s in result.groups[0].seqs)
    assert manager.get_num_free_gpu_blocks() == num_blocks


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_preempted_groups_come_back_sharing(mode):
    """Groups of 3 samples preempt each other; every one finishes and all memory comes back."""
    manager = PagedKVCacheManager(14, 4, num_cpu_blocks=64, watermark=0.0)
    groups = [group(i, 8, 10, t=0.0, n=3) for i in range(4)]
    result = serve(manager, groups, mode)
    assert result.num_preemptions > 0
    for g in result.groups:
        assert all(s.num_generated == 10 for s in g.seqs)
    assert manager.get_num_free_gpu_blocks() == 14
    if mode == "swap":
        assert manager.cpu_allocator.num_free_blocks == 64


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_max_num_seqs_counts_sequences_of_a_group(mode):
    manager = PagedKVCacheManager(64, 4, num_cpu_blocks=64, watermark=0.0)
    beam = SequenceGroup(0, 0.0, [Sequence(0, 4)], 5, max_num_seqs=3)  # one sequence now, width 3 later
    sched = Scheduler(manager, preemption_mode=mode, max_num_seqs=4)
    sched.add_seq_group(beam)
    sched.add_seq_group(group(1, 4, 5, n=2))
    out = sched.schedule()
    assert [g.request_id for g in out.scheduled_seq_groups] == [0]  # 3 + 2 sequences > 4
    with pytest.raises(RequestTooLargeError, match="runs 5 sequences at once.*max_num_seqs=4"):
        sched.add_seq_group(SequenceGroup(2, 0.0, [Sequence(20, 4)], 5, max_num_seqs=5))


def test_prefill_budget_counts_a_shared_prompt_once():
    from paged.sim.cost_model import get_cost_model

    manager = PagedKVCacheManager(1024, 16, watermark=0.0)
    sched = Scheduler(manager, max_num_batched_tokens=600)
    sched.add_seq_group(group(0, 500, 5, n=4))  # 4 samples of a 500-token prompt: 500 tokens, not 2000
    sched.add_seq_group(group(1, 500, 5, n=4))
    out = sched.schedule()
    assert [g.request_id for g in out.scheduled_seq_groups] == [0]
    assert out.num_batched_tokens == 500 and out.prefill_token_counts() == [500]
    cost = get_cost_model("opt-13b", block_size=16)
    assert cost(out) == cost.prefill_time([500])  # the cost model counts the prompt once too
    out = sched.schedule()  # the next prefill admits the second group
    assert [g.request_id for g in out.scheduled_seq_groups] == [1]


def test_num_batched_tokens_is_counted_when_not_set():
    """A decode's count is its running sequences, counted on read; a prefill built by hand counts its
    sequences' tokens; a value the scheduler set wins."""
    from paged.core.scheduler import SchedulerOutputs

    manager = PagedKVCacheManager(1024, 16, watermark=0.0)
    sched = Scheduler(manager)
    sched.add_seq_group(group(0, 30, 5, n=3))
    sched.add_seq_group(group(1, 7, 5))
    out = sched.schedule()
    assert out.is_prefill and out.num_batched_tokens == 30 + 7  # the shared prompt once
    step(sched, out)
    out = sched.schedule()
    assert not out.is_prefill and out.num_batched_tokens == 3 + 1
    out.scheduled_seq_groups[0].seqs[0].status = SequenceStatus.FINISHED
    assert out.num_batched_tokens == 3  # counted when read
    by_hand = SchedulerOutputs([group(2, 9, 1)], is_prefill=True)
    by_hand.scheduled_seq_groups[0].seqs[0].status = SequenceStatus.RUNNING
    assert by_hand.num_batched_tokens == 9
    by_hand.num_batched_tokens = 4
    assert by_hand.num_batched_tokens == 4
    for bad in (-1, 2.5, "3"):
        with pytest.raises(ValueError, match="num_batched_tokens"):
            by_hand.num_batched_tokens = bad
    by_hand.num_batched_tokens = None  # back to counting
    assert by_hand.num_batched_tokens == 9


def test_swapped_group_comes_back_past_the_watermark():
    """Request 1 grows to 7 of 10 blocks (all it may hold above the 3-block watermark) and is swapped
    out when request 0 needs a block; once request 0 is done it must come back, watermark or not."""
    manager = PagedKVCacheManager(10, 4, num_cpu_blocks=16, watermark=0.3)
    result = serve(manager, [group(0, 4, 20, t=0.0), group(1, 17, 11, t=0.0)], "swap")
    assert result.num_preemptions == 1
    assert [g.seqs[0].num_generated for g in result.groups] == [20, 11]
    assert manager.get_num_free_gpu_blocks() == 10


# -- ids given twice, abort ------------------------------------------------------------------
def test_duplicate_request_or_sequence_id_is_refused_at_add():
    manager = PagedKVCacheManager(16, 4, watermark=0.0)
    sched = Scheduler(manager)
    sched.add_seq_group(group(1, 8, 4))
    with pytest.raises(ValueError, match="request id 1 is already"):
        sched.add_seq_group(group(1, 8, 4))
    clash = SequenceGroup(2, 2.0, [Sequence(10, 8)], 4)  # sequence 10 belongs to request 1
    with pytest.raises(ValueError, match="sequence id 10 is already in use"):
        sched.add_seq_group(clash)
    with pytest.raises(ValueError, match="sequence id 7"):
        sched.add_seq_group(SequenceGroup(3, 3.0, [Sequence(7, 8), Sequence(7, 8)], 4))
    assert [g.request_id for g in sched.waiting] == [1]  # the refusals queued nothing
    while sched.has_unfinished_seqs():
        step(sched, sched.schedule())
    sched.add_seq_group(group(1, 8, 4))  # a finished request's ids may be used again
    manager.check_invariants()


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_abort_frees_waiting_running_and_swapped_groups(mode):
    manager = PagedKVCacheManager(6, 4, num_cpu_blocks=16, watermark=0.0)
    sched = Scheduler(manager, preemption_mode=mode)
    for i in range(4):
        sched.add_seq_group(group(i, 8, 8))  # 2 blocks each, growing to 4
    out = sched.schedule()
    step(sched, out)
    for _ in range(6):  # decode until someone is preempted
        out = sched.schedule()
        step(sched, out)
        if out.preempted:
            break
    assert out.preempted
    states = {"waiting": sched.waiting, "running": sched.running, "swapped": sched.swapped}
    for name, queue in states.items():
        if queue:
            victim = queue[-1]
            assert sched.abort_seq_group(victim.request_id) is victim, name
            assert victim.aborted and all(s.finish_reason == "abort" for s in victim.seqs)
            assert victim not in queue
            manager.check_invariants()
    assert sched.abort_seq_group(99) is None  # unknown: a no-op, as in vLLM
    while sched.has_unfinished_seqs():
        step(sched, sched.schedule())
    assert manager.get_num_free_gpu_blocks() == 6 and manager.cpu_allocator.num_free_blocks == 16
    manager.check_invariants()


def test_fork_into_an_id_a_queued_request_uses_is_refused_and_nothing_is_lost():
    manager = PagedKVCacheManager(16, 4, watermark=0.0)
    sched = Scheduler(manager)
    first, queued = group(0, 8, 4), group(1, 8, 4)
    sched.add_seq_group(first)
    sched.schedule()  # request 0 runs
    sched.add_seq_group(queued)  # request 1 waits, holding sequence id 10
    with pytest.raises(ValueError, match="sequence id 10"):
        sched.fork_seq(first, first.seqs[0], Sequence(10, 8))
    assert len(first.seqs) == 1 and [g.request_id for g in sched.waiting] == [1]
    sched.fork_seq(first, first.seqs[0], Sequence(5, 8))
    with pytest.raises(ValueError, match="sequence id 5 is already in use"):
        sched.add_seq_group(SequenceGroup(2, 2.0, [Sequence(5, 8)], 4))  # the child's id is held too
    finished = []
    while sched.has_unfinished_seqs():
        finished += step(sched, sched.schedule())
    assert sorted(g.request_id for g in finished) == [0, 1]
    sched.add_seq_group(SequenceGroup(2, 2.0, [Sequence(5, 8)], 4))  # released with its group
    manager.check_invariants()


def test_a_refused_allocate_leaves_the_request_at_the_head_of_the_queue(monkeypatch):
    manager = PagedKVCacheManager(16, 4, watermark=0.0)
    sched = Scheduler(manager)
    sched.add_seq_group(group(0, 8, 4))

    def refuse(seq_group):
        raise KeyboardInterrupt  # e.g. Ctrl-C inside the manager's allocate

    monkeypatch.setattr(manager, "allocate", refuse)
    with pytest.raises(KeyboardInterrupt):
        sched.schedule()
    assert [g.request_id for g in sched.waiting] == [0] and not sched.running
    monkeypatch.undo()
    out = sched.schedule()
    assert [g.request_id for g in out.scheduled_seq_groups] == [0]


@pytest.mark.parametrize("kwargs,name", [(dict(max_num_seqs=1.5), "max_num_seqs"), (dict(max_num_seqs=0), "max_num_seqs"),
                                         (dict(max_num_batched_tokens="2048"), "max_num_batched_tokens")])
def test_a_budget_that_is_not_a_positive_integer_is_named(kwargs, name):
    with pytest.raises(ValueError, match=f"{name} must be a positive integer"):
        Scheduler(PagedKVCacheManager(8, 4), **kwargs)


def test_a_request_without_new_sequences_or_with_fractional_lengths_is_refused():
    sched = Scheduler(PagedKVCacheManager(16, 4, watermark=0.0))
    with pytest.raises(ValueError, match="request 1 must bring one or more new"):
        sched.add_seq_group(SequenceGroup(1, 0.0, [], 4))
    running = Sequence(5, 8)
    running.status = SequenceStatus.RUNNING
    with pytest.raises(ValueError, match="request 2 must bring one or more new"):
        sched.add_seq_group(SequenceGroup(2, 0.0, [running], 4))
    with pytest.raises(TypeError, match="request 3's output length must be an integer"):
        sched.add_seq_group(SequenceGroup(3, 0.0, [Sequence(6, 8)], 2.5))
    with pytest.raises(TypeError, match="request 4's prompt length must be an integer"):
        sched.add_seq_group(SequenceGroup(4, 0.0, [Sequence(7, 2.5)], 4))
    assert not sched.waiting and not sched.has_unfinished_seqs()


def test_a_request_whose_sequences_disagree_on_their_prompt_or_that_arrives_at_no_time_is_refused():
    sched = Scheduler(PagedKVCacheManager(16, 4, watermark=0.0))
    with pytest.raises(ValueError, match="prompts of 8 and 6 tokens"):
        sched.add_seq_group(SequenceGroup(1, 0.0, [Sequence(1, 8), Sequence(2, 6)], 4))
    with pytest.raises(ValueError, match="sequence 3 has 5 token ids for 8 tokens"):
        sched.add_seq_group(SequenceGroup(2, 0.0, [Sequence(3, 8, token_ids=list(range(5)))], 4))
    for bad in (float("nan"), float("inf"), "0", None):
        with pytest.raises(ValueError, match="a finite number of seconds"):
            sched.add_seq_group(SequenceGroup(3, bad, [Sequence(4, 8)], 4))
    with pytest.raises(ValueError, match="request 3 has a prompt of -3 tokens: at least one is needed"):
        sched.add_seq_group(SequenceGroup(3, 0.0, [Sequence(4, -3)], 4))
    assert not sched.waiting and not sched.has_unfinished_seqs()
    sched.add_seq_group(SequenceGroup(3, 1.5, [Sequence(4, 8, token_ids=list(range(8))), Sequence(5, 8)], 4))
    assert len(sched.waiting) == 1  # the ids of the refused requests were never taken
