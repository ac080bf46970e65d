"""The beam calendar serves replayed beam searches exactly as the reference (the step-by-step loop over the
reference scheduler and managers, the fast path switched off) (§4.4, Fig. 14): every
result field (copy-on-write blocks and seconds, contiguous fork copies), every request's times, preemptions
and its candidates' tokens, on the paged manager (block sizes 1, 16, 128; recomputation and swapping, where
an overloaded run writes out its tables and continues step by step) and the contiguous ones; recording the
KV blocks held with and without sharing at every iteration (Fig. 15), the same counts. Its block profiles
match the paged manager's own steps, and it is used only where it applies."""

import random

import pytest
from support import managed, served_both, sharing_case, synthetic_trace

from paged.block.manager import PagedKVCacheManager
from paged.core.scheduler import Scheduler
from paged.sim import fast as fast_path
from paged.sim.cost_model import get_cost_model
from paged.sim.executor import SimulatedExecutor
from paged.sim.fast.beam_blocks import BeamBlockTree, fork_counts, paged_profile, step_moves
from paged.sim.fast.beam_calendar import BeamCalendarServingLoop, applies
from paged.sim.fast.decode_calendar import applies as sequence_applies
from paged.sim.simulator import groups_from_trace
from paged.workloads import Request


def _manager(system, block_size, slots):
    if system == "paged":
        return managed("paged", slots // block_size, block_size, num_cpu_blocks=slots // block_size // 2)
    return managed(system, slots // block_size, block_size, max_seq_len=2048)


CASES = [("paged", 16, "recompute"), ("paged", 1, "recompute"), ("paged", 128, "recompute"), ("paged", 16, "swap"),
         ("orca-oracle", 16, "recompute"), ("orca-pow2", 16, "recompute"), ("orca-max", 16, "recompute")]


@pytest.mark.parametrize("width", [2, 4, 6])
@pytest.mark.parametrize("system, block_size, preemption", CASES, ids=[f"{s}-{b}-{p}" for s, b, p in CASES])
@pytest.mark.parametrize("load", ["light", "overloaded"])
def test_same_results_as_the_reference(system, block_size, preemption, width, load):
    trace = synthetic_trace(30 if load == "light" else 20, 20.0 if load == "light" else 60.0, seed=width,
                            max_prompt=150, max_output=100)
    if system == "paged":  # overloaded: a cache a few groups fill, so groups are preempted
        slots = 1 << 16 if load == "light" else (1024 if block_size == 1 else 1792 if block_size == 16 else 4096)
    else:  # overloaded: requests queue for reservations (a contiguous decode never preempts)
        slots = (1 << 19 if system == "orca-max" else 1 << 16) if load == "light" else 1 << 14
    cost = get_cost_model("opt-13b", block_size=block_size, paged_kernel=system == "paged")
    fast, ref = served_both(trace, lambda: _manager(system, block_size, slots), cost,
                            preemption_mode=preemption, beam_width=width, max_num_batched_tokens=4096)
    assert fast[1] == ["BeamCalendarServingLoop"] and ref[1] == []
    assert fast[0] == ref[0]
    fields = fast[0][0]
    if system == "paged":
        assert fields["kv_copy_tokens"] == 0 and (fields["cow_blocks"] > 0) == (block_size > 1)
        assert (fields["num_preemptions"] > 0) == (load == "overloaded")
        assert fast[2].get_num_free_gpu_blocks() == ref[2].get_num_free_gpu_blocks() == slots // block_size
    else:
        assert fields["cow_blocks"] == 0 and fields["kv_copy_tokens"] > 0
        assert fast[2].buddy.num_free_slots == slots


@pytest.mark.parametrize("width", [2, 4, 6])
@pytest.mark.parametrize("block_size", [1, 5, 16, 128])
def test_paged_profile_is_the_managers_own_steps(width, block_size):
    """A group replayed step by step on the real manager takes, copies and frees what its profile says."""
    rng = random.Random(width * 1000 + block_size)
    for _ in range(6):
        prompt, length = rng.randint(1, 300), rng.randint(2, 200)
        (group,) = groups_from_trace([Request(rng.randrange(12), prompt, length, 0.0)], beam_width=width)
        manager = PagedKVCacheManager(1 << 14, block_size)
        scheduler = Scheduler(manager, max_num_batched_tokens=1 << 14)
        executor = SimulatedExecutor(lambda outputs: 0.01)
        scheduler.add_seq_group(group)
        executor.execute(scheduler, scheduler.schedule())
        profile = paged_profile(group.beam, prompt, block_size, length)
        full = prompt // block_size

        def used():
            return manager.gpu_allocator.num_blocks - manager.get_num_free_gpu_blocks()

        assert used() - full == profile.held[0]
        tree = BeamBlockTree(group.beam, prompt, block_size)
        for j in range(1, length):
            before = used()
            outputs = scheduler.schedule()
            taken = used() - before
            done = executor.execute(scheduler, outputs)
            freed = before + taken - used()
            assert (taken, len(outputs.blocks_to_copy)) == tuple(profile.counts[:2, j])
            if j < length - 1:
                assert freed == profile.counts[2, j] and used() - full == profile.held[j]
                tree.decode()
                tree.beam_step()
                assert _pattern(tree.tables()[0]) == _pattern(
                    [manager.get_block_table(s)[full:] for s in group.seqs])  # the same blocks shared alike
            else:
                assert done and used() == 0


def _pattern(tables):
    """Block tables with each block renamed by its first appearance: equal when blocks are shared alike."""
    names = {}
    return [[names.setdefault(b, len(names)) for b in table] for table in tables]


def test_contiguous_forks_are_the_recordings():
    trace = groups_from_trace([Request(3, 10, 50, 0.0)], beam_width=6)[0].beam
    counts = fork_counts(trace, 300)
    assert list(counts[:300]) == [sum(fork for _, fork in step_moves(trace, j)[2]) for j in range(300)]
    assert counts[0] == 5  # step 0: the prompt's sequence forks into the width


def test_used_only_where_it_applies():
    requests = synthetic_trace(20, 10.0, seed=1, max_prompt=100, max_output=50)
    paged, oracle = managed("paged", 4096, 16), managed("orca-oracle", 4096, 16)
    beams = groups_from_trace(requests, beam_width=4)
    assert applies(beams, paged, record_memory=False) and applies(beams, oracle, record_memory=False)
    assert not sequence_applies(beams, record_memory=False)
    assert not applies(beams, paged, record_memory=True)
    assert not applies(beams, managed("paged", 4096, 16, enable_prefix_caching=True), record_memory=False)
    assert not applies(groups_from_trace(requests, n=2), paged, record_memory=False)
    assert not applies(groups_from_trace(requests), paged, record_memory=False)


@pytest.mark.parametrize("system", ["paged", "orca-oracle"])
def test_an_escaping_exception_or_an_abort_leaves_no_block_held(system):
    requests = synthetic_trace(30, 20.0, seed=3, max_prompt=100, max_output=80)
    cost = get_cost_model("opt-13b", block_size=16)
    calls = []

    def stop(finished):
        calls.append(len(finished))
        if len(calls) == 5:
            raise KeyboardInterrupt

    manager = _manager(system, 16, 1 << 15)
    loop = BeamCalendarServingLoop(fast_path.FastScheduler(manager), fast_path.FastSimulatedExecutor(cost),
                                   groups_from_trace(requests, beam_width=4), on_finish=stop)
    with pytest.raises(KeyboardInterrupt):
        loop.run()
    assert manager.num_used_slots == 0 and not loop.has_work
    manager.check_invariants()

    manager = _manager(system, 16, 1 << 15)
    groups = groups_from_trace(requests, beam_width=4)
    loop = BeamCalendarServingLoop(fast_path.FastScheduler(manager), fast_path.FastSimulatedExecutor(cost), groups)
    while not any(g.first_token_time is not None and g.finished_time is None for g in groups):
        loop.step()
    victim = next(g for g in groups if g.first_token_time is not None and g.finished_time is None)
    assert loop.abort_request(victim.request_id)
    result = loop.run()
    assert victim.aborted and all(g.finished_time is not None for g in result.groups)
    assert all(s.num_generated == g.output_len for g in result.groups if not g.aborted for s in g.seqs)
    assert manager.num_used_slots == 0
    manager.check_invariants()


SHARING_CASES = [("paged", 16, "recompute"), ("paged", 1, "recompute"), ("paged", 128, "recompute"),
                 ("paged", 16, "swap"), ("orca-oracle", 16, "recompute")]


def _sharing_recorded(fields):
    """Every iteration recorded once, and the blocks without sharing never fewer than those held."""
    sharing = fields["sharing"]
    assert sharing.iterations == fields["num_iterations"] > 0
    assert 0 < sharing.blocks_in_use <= sharing.blocks_without_sharing
    return sharing


@pytest.mark.parametrize("width", [2, 4, 6])
@pytest.mark.parametrize("system, block_size, preemption", SHARING_CASES,
                         ids=[f"{s}-{b}-{p}" for s, b, p in SHARING_CASES])
@pytest.mark.parametrize("load", ["light", "overloaded"])
def test_records_sharing_as_the_reference(system, block_size, preemption, width, load):
    """Fig. 15's counts at every iteration (prefills, the timeline's decodes, beam steps freeing blocks,
    preemption, swapped groups) and every other result field, bit-identical with ``record_sharing``."""
    trace, slots, cost = sharing_case(system, block_size, load, requests=(30, 20), rates=(20.0, 60.0), seed=width,
                                      paged_slots_16=1792)
    fast, ref = served_both(trace, lambda: _manager(system, block_size, slots), cost,
                            preemption_mode=preemption, beam_width=width, max_num_batched_tokens=4096,
                            record_sharing=True)
    assert fast[1] == ["BeamCalendarServingLoop"] and ref[1] == []
    assert fast[0] == ref[0]
    sharing = _sharing_recorded(fast[0][0])
    if system == "paged":
        assert sharing.saving > 0
        assert (fast[0][0]["num_preemptions"] > 0) == (load == "overloaded")
    else:
        assert sharing.saving == 0  # reservations are never shared


@pytest.mark.parametrize("trace_name, rate, duration", [("alpaca-bare", 4.0, 40.0), ("sharegpt", 0.5, 120.0),
                                                        ("alpaca-bare", 60.0, 6.0), ("sharegpt", 3.0, 22.0)])
@pytest.mark.parametrize("width", [2, 6])
def test_paper_traces_record_sharing_as_the_reference(trace_name, rate, duration, width):
    """Fig. 15's runs (OPT-13B's server, Alpaca and ShareGPT) at its rates and above (ShareGPT at 3 req/s
    preempts beams of width 6): the same counts."""
    from paged.experiments.serving.run_length import long_trace

    requests = long_trace(trace_name, rate, duration, 0)
    cost = get_cost_model("opt-13b", block_size=16)
    fast, ref = served_both(requests, lambda: managed("paged", cost.num_kv_blocks, 16), cost,
                            beam_width=width, record_sharing=True)
    assert fast[1] == ["BeamCalendarServingLoop"] and fast[0] == ref[0]
    assert _sharing_recorded(fast[0][0]).saving > 0
