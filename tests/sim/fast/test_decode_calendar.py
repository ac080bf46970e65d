"""The decode calendar serves exactly as the reference (the step-by-step loop over the reference scheduler and
managers, the fast path switched off): every result
field and every request's times bit-identical, through arrivals, finishes, block crossings,
preemption by recomputation and by swapping, on the paged and the contiguous managers; for single
sequences, parallel samples (the first decode's copy-on-write, lock-step crossings, preemption of whole
groups) and requests sharing a few-shot prefix (reserved, or found by prefix caching); recording the KV
blocks held with and without sharing at every iteration (Fig. 15), the same counts."""

import math

import pytest

from paged.core.serving_loop import ServingLoop
from paged.experiments.serving.run_length import long_trace
from paged.sim import fast as fast_path
from paged.sim.config import ServingConfig
from paged.sim.cost_model import get_cost_model
from paged.sim.fast.decode_calendar import CalendarServingLoop, applies
from paged.sim.fast.loop import FastServingLoop
from paged.workloads import get_trace
from support import managed, served_both, sharing_case, synthetic_trace

_FIELDS = ("num_iterations", "duration", "batched_requests_sum", "num_preemptions", "num_prefill_iterations",
           "prefill_batched_requests_sum", "prefill_tokens", "recomputed_tokens")
#: Sums of busy seconds: the fast path adds a run of iterations' seconds at once, the reference one at a time.
_SUMS = ("busy_seconds", "batched_requests_seconds")


def _served(trace, system, block_size, preemption, calendar, monkeypatch):
    config = ServingConfig(model="opt-13b", system=system, block_size=block_size, preemption=preemption)
    with monkeypatch.context() as m:
        if not calendar:
            m.setattr(fast_path, "_ENABLED", False)
        result = config.serve(trace)
    return ({k: getattr(result, k) for k in _FIELDS},
            [(g.request_id, g.first_scheduled_time, g.first_token_time, g.finished_time, g.num_preemptions,
              g.seqs[0].num_generated) for g in result.groups],
            [getattr(result, k) for k in _SUMS])


def _agree(fast, reference):
    """The same results: every field and request exactly, the busy-time sums to 1e-12."""
    assert fast[:2] == reference[:2]
    assert fast[2] == pytest.approx(reference[2], rel=1e-12)


@pytest.mark.parametrize("system,block_size,preemption", [
    ("paged", 16, "recompute"), ("paged", 1, "recompute"), ("paged", 128, "recompute"), ("paged", 16, "swap"),
    ("orca-oracle", 16, "recompute"), ("orca-max", 16, "recompute")])
@pytest.mark.parametrize("trace,rate,duration", [("alpaca-bare", 80.0, 8.0), ("sharegpt", 8.0, 40.0),
                                                 ("alpaca-bare", math.inf, 600)])
def test_same_results_as_the_reference(trace, rate, duration, system, block_size, preemption, monkeypatch):
    requests = long_trace(trace, rate, duration, 0)
    calendar = _served(requests, system, block_size, preemption, True, monkeypatch)
    _agree(calendar, _served(requests, system, block_size, preemption, False, monkeypatch))


def test_overloaded_runs_preempt_and_still_agree(monkeypatch):
    requests = long_trace("sharegpt", 20.0, 20.0, 1)
    calendar = _served(requests, "paged", 16, "recompute", True, monkeypatch)
    assert calendar[0]["num_preemptions"] > 0
    _agree(calendar, _served(requests, "paged", 16, "recompute", False, monkeypatch))


def test_used_only_where_it_applies():
    from paged.sim.simulator import groups_from_trace

    requests = long_trace("alpaca-bare", 10.0, 2.0, 0)
    single = groups_from_trace(requests)
    assert applies(single, record_memory=False)
    assert not applies(single, record_memory=True)
    assert applies(groups_from_trace(requests, n=2), record_memory=False)
    assert not applies(groups_from_trace(requests, beam_width=2), record_memory=False)
    assert issubclass(CalendarServingLoop, FastServingLoop) and issubclass(FastServingLoop, ServingLoop)


def test_an_escaping_exception_leaves_no_block_held():
    from paged.sim.simulator import groups_from_trace

    requests = long_trace("alpaca-bare", 60.0, 5.0, 0)
    config = ServingConfig(model="opt-13b", system="paged")
    cost, manager = config.cost_model(), config.kv_manager()
    calls = []

    def stop(finished):
        calls.append(len(finished))
        if len(calls) == 20:
            raise KeyboardInterrupt

    loop = CalendarServingLoop(fast_path.FastScheduler(manager), fast_path.FastSimulatedExecutor(cost), groups_from_trace(requests),
                               on_finish=stop)
    with pytest.raises(KeyboardInterrupt):
        loop.run()
    assert manager.num_used_slots == 0 and not loop.has_work
    manager.check_invariants()


def _manager(system, block_size, slots, caching=False):
    if system == "paged":
        return managed("paged", slots // block_size, block_size, num_cpu_blocks=slots // block_size // 2,
                       enable_prefix_caching=caching)
    return managed(system, slots // block_size, block_size, max_seq_len=2048)


CASES = [("paged", 16, "recompute"), ("paged", 1, "recompute"), ("paged", 128, "recompute"), ("paged", 16, "swap"),
         ("orca-oracle", 16, "recompute"), ("orca-pow2", 16, "recompute"), ("orca-max", 16, "recompute")]


@pytest.mark.parametrize("width", [2, 4, 6])
@pytest.mark.parametrize("system, block_size, preemption", CASES, ids=[f"{s}-{b}-{p}" for s, b, p in CASES])
@pytest.mark.parametrize("load", ["light", "overloaded"])
def test_parallel_samples_same_results_as_the_reference(monkeypatch, system, block_size, preemption, width,
                                                                load):
    trace = synthetic_trace(40 if load == "light" else 30, 20.0 if load == "light" else 80.0, seed=width,
                            max_prompt=150, max_output=100)
    if system == "paged":  # overloaded: a cache a few groups fill, so groups are preempted
        slots = 1 << 16 if load == "light" else (1024 if block_size == 1 else 1536 if block_size == 16 else 4096)
    else:
        slots = (1 << 19 if system == "orca-max" else 1 << 16) if load == "light" else 1 << 14
    cost = get_cost_model("opt-13b", block_size=block_size, paged_kernel=system == "paged")
    fast, ref = served_both(trace, lambda: _manager(system, block_size, slots), cost,
                            preemption_mode=preemption, n=width, max_num_batched_tokens=4096)
    assert fast[1] == ["CalendarServingLoop"] and ref[1] == []
    assert fast[0] == ref[0]
    fields = fast[0][0]
    if system == "paged":
        assert (fields["cow_blocks"] > 0) == (block_size > 1)  # a prompt ending inside a block is copied on write
        assert (fields["num_preemptions"] > 0) == (load == "overloaded")
    assert fast[2].num_used_slots == ref[2].num_used_slots == 0


@pytest.mark.parametrize("trace_name", ["wmt16-1shot", "wmt16-5shot"])
@pytest.mark.parametrize("system, block_size, mode", [("paged", 16, "reserved"), ("paged", 16, "tokens"),
                                                      ("paged", 1, "tokens"), ("paged", 128, "reserved"),
                                                      ("orca-oracle", 16, "reserved")])
@pytest.mark.parametrize("load", ["light", "overloaded"])
def test_shared_prefix_same_results_as_the_reference(monkeypatch, trace_name, system, block_size, mode, load):
    trace = get_trace(trace_name, 60 if load == "light" else 80, seed=2, rate=10.0 if load == "light" else 200.0)
    slots = 1 << 15 if load == "light" else 1 << 11
    cost = get_cost_model("llama-13b", block_size=block_size, paged_kernel=system == "paged")
    fast, ref = served_both(trace, lambda: _manager(system, block_size, slots, mode == "tokens"), cost,
                            shared_prefix=mode, max_num_batched_tokens=4096)
    assert fast[1] == ["CalendarServingLoop"] and ref[1] == []
    assert fast[0] == ref[0]
    groups = fast[0][1]
    if system == "paged":
        if trace[0].prefix_len >= block_size:  # a full block of the prefix is shared
            assert sum(g[6] for g in groups) > 0
        if block_size <= 16:
            assert (fast[0][0]["num_preemptions"] > 0) == (load == "overloaded")
    assert fast[2].num_used_slots == ref[2].num_used_slots


def test_prefix_cached_decodes_register_nothing(monkeypatch):
    """Simulated sequences have token ids only for their prompts: only prefills add prefix-cache entries."""
    from paged.block.prefix_caching import PrefixCachingBlockAllocator
    from paged.sim.simulator import simulate

    registered = [0]
    register = PrefixCachingBlockAllocator.register

    def counting(self, *args, **kwargs):
        registered[0] += 1
        return register(self, *args, **kwargs)

    monkeypatch.setattr(PrefixCachingBlockAllocator, "register", counting)
    cost = get_cost_model("llama-13b", block_size=16)
    log = []

    def timed(outputs):  # registrations since the last iteration came from scheduling this one
        log.append((outputs.is_prefill, registered[0]))
        registered[0] = 0
        return cost(outputs)

    trace = get_trace("wmt16-5shot", 60, seed=1, rate=100.0)
    simulate(trace, managed("paged", 1 << 9, 16, enable_prefix_caching=True), timed, shared_prefix="tokens",
             record_memory=False)
    assert any(count for prefill, count in log if prefill)
    assert not any(count for prefill, count in log if not prefill)


def test_parallel_samples_an_exception_or_an_abort_leaves_no_block_held():
    """Blocks held for groups of samples outside their tables go back on an abort and on an escaping exception."""
    from paged.sim.simulator import groups_from_trace

    requests = synthetic_trace(40, 40.0, seed=5, max_prompt=120, max_output=80)
    cost = get_cost_model("opt-13b", block_size=16)

    def stop(finished):
        raise KeyboardInterrupt

    manager = _manager("paged", 16, 1 << 14)
    loop = CalendarServingLoop(fast_path.FastScheduler(manager), fast_path.FastSimulatedExecutor(cost), groups_from_trace(requests, n=4),
                               on_finish=stop)
    with pytest.raises(KeyboardInterrupt):
        loop.run()
    assert manager.num_used_slots == 0 and not loop.has_work
    manager.check_invariants()

    manager = _manager("paged", 16, 1 << 14)
    groups = groups_from_trace(requests, n=4)
    loop = CalendarServingLoop(fast_path.FastScheduler(manager), fast_path.FastSimulatedExecutor(cost), groups)
    for _ in range(30):
        loop.step()
    assert loop.scheduler.running, "the cost model's iteration times let every group finish within 30 steps"
    victim = loop.scheduler.running[0]  # the earliest arrival still running: it has crossed into new blocks
    held = manager.num_used_slots
    assert loop.abort_request(victim.request_id)
    assert manager.num_used_slots < held
    manager.check_invariants()  # the other groups' held blocks are in their tables again
    result = loop.run()
    assert victim.aborted and all(g.finished_time is not None for g in result.groups)
    assert all(s.num_generated == g.output_len for g in result.groups if not g.aborted for s in g.seqs)
    assert manager.num_used_slots == 0
    manager.check_invariants()


def _sharing_recorded(fields):
    """Every iteration recorded once, and the blocks without sharing never fewer than those held."""
    sharing = fields["sharing"]
    assert sharing.iterations == fields["num_iterations"] > 0
    assert 0 < sharing.blocks_in_use <= sharing.blocks_without_sharing
    return sharing


SHARING_CASES = [("paged", 16, "recompute"), ("paged", 1, "recompute"), ("paged", 128, "recompute"),
                 ("paged", 16, "swap"), ("orca-oracle", 16, "recompute")]


@pytest.mark.parametrize("width", [2, 4, 6])
@pytest.mark.parametrize("system, block_size, preemption", SHARING_CASES,
                         ids=[f"{s}-{b}-{p}" for s, b, p in SHARING_CASES])
@pytest.mark.parametrize("load", ["light", "overloaded"])
def test_parallel_samples_record_sharing_as_the_reference(monkeypatch, system, block_size, preemption, width,
                                                                  load):
    """Fig. 15's counts at every iteration (prefills, runs of decodes, the first copies on write, preempting
    decodes, swapped groups) and every other result field, bit-identical with ``record_sharing``."""
    trace, slots, cost = sharing_case(system, block_size, load, requests=(40, 30), rates=(20.0, 80.0), seed=width,
                                      paged_slots_16=1536)
    fast, ref = served_both(trace, lambda: _manager(system, block_size, slots), cost,
                            preemption_mode=preemption, n=width, max_num_batched_tokens=4096, record_sharing=True)
    assert fast[1] == ["CalendarServingLoop"] and ref[1] == []
    assert fast[0] == ref[0]
    sharing = _sharing_recorded(fast[0][0])
    if system == "paged":
        assert sharing.saving > 0  # the samples share their prompt's full blocks
        assert (fast[0][0]["num_preemptions"] > 0) == (load == "overloaded")
    else:
        assert sharing.saving == 0  # reservations are never shared


@pytest.mark.parametrize("trace_name, rate, duration", [("alpaca-bare", 4.0, 40.0), ("sharegpt", 0.5, 120.0),
                                                        ("alpaca-bare", 30.0, 12.0), ("sharegpt", 3.0, 30.0)])
@pytest.mark.parametrize("width", [1, 2, 6])
def test_paper_traces_record_sharing_as_the_reference(monkeypatch, trace_name, rate, duration, width):
    """Fig. 15's runs (OPT-13B's server, Alpaca and ShareGPT) at its rates and above (where 6 samples are
    preempted): the same counts."""
    requests = long_trace(trace_name, rate, duration, 0)
    cost = get_cost_model("opt-13b", block_size=16)
    fast, ref = served_both(requests, lambda: managed("paged", cost.num_kv_blocks, 16), cost,
                            n=width, record_sharing=True)
    assert fast[1] == ["CalendarServingLoop"] and fast[0] == ref[0]
    sharing = _sharing_recorded(fast[0][0])
    assert (sharing.saving > 0) == (width > 1)


@pytest.mark.parametrize("trace_name", ["wmt16-1shot", "wmt16-5shot"])
@pytest.mark.parametrize("block_size, mode", [(16, "reserved"), (1, "reserved"), (128, "reserved"), (16, "tokens")])
@pytest.mark.parametrize("load, preemption", [("light", "recompute"), ("overloaded", "recompute"),
                                              ("overloaded", "swap")])
def test_shared_prefix_records_sharing_as_the_reference(monkeypatch, trace_name, block_size, mode, load,
                                                                preemption):
    """A reserved prefix (its blocks counted while a sequence uses them) or one found by prefix caching: the
    same counts at every iteration."""
    trace = get_trace(trace_name, 60 if load == "light" else 80, seed=2, rate=10.0 if load == "light" else 200.0)
    slots = 1 << 15 if load == "light" else 1 << 11
    cost = get_cost_model("llama-13b", block_size=block_size)
    fast, ref = served_both(trace, lambda: _manager("paged", block_size, slots, mode == "tokens"), cost,
                            shared_prefix=mode, preemption_mode=preemption, max_num_batched_tokens=4096,
                            record_sharing=True)
    assert fast[1] == ["CalendarServingLoop"] and fast[0] == ref[0]
    sharing = _sharing_recorded(fast[0][0])
    assert (sharing.saving > 0) == (trace[0].prefix_len >= block_size)  # a full block of the prefix is shared


@pytest.mark.parametrize("width, max_num_seqs, preemption", [(2, 256, "recompute"), (4, 256, "recompute"),
                                                             (6, 256, "recompute"), (4, 24, "recompute"),
                                                             (4, 256, "swap")])
def test_swapped_groups_come_back_by_the_calendar(monkeypatch, width, max_num_seqs, preemption):
    """Groups of samples swapped out (vLLM 0.1 swaps a group of several sequences in either mode) wait and
    come back while the calendar serves the decode steps (:meth:`CalendarServingLoop._swap_in_decode`: the
    running groups' appends, the scheduler's swap-in on the exact free pool, one iteration priced with its
    swaps and copies): every result field and request bit-identical to the reference, also where
    ``max_num_seqs`` holds a group back. In recompute mode the step-by-step loop serves no step while a group
    is swapped out (in swap mode a decode that must preempt still goes to it)."""
    trace = synthetic_trace(60, 80.0, seed=width, max_prompt=150, max_output=100)
    cost = get_cost_model("opt-13b", block_size=16)
    slow, back = [], []
    sync, swap_in = CalendarServingLoop._sync, CalendarServingLoop._swap_in_decode

    def counted_sync(self):
        slow.append(len(self.scheduler.swapped))
        sync(self)

    def counted_swap_in(self, *args):
        before = len(self.scheduler.swapped)
        finished = swap_in(self, *args)
        back.append(before - len(self.scheduler.swapped))
        return finished

    monkeypatch.setattr(CalendarServingLoop, "_sync", counted_sync)
    monkeypatch.setattr(CalendarServingLoop, "_swap_in_decode", counted_swap_in)
    fast, ref = served_both(trace, lambda: _manager("paged", 16, 1536), cost, preemption_mode=preemption, n=width,
                            max_num_seqs=max_num_seqs, max_num_batched_tokens=4096)
    assert fast[1] == ["CalendarServingLoop"] and fast[0] == ref[0]
    assert fast[0][0]["num_preemptions"] > 0 and back and all(back)  # each swap-in step brought a group back
    if preemption == "recompute":
        assert not any(slow)
    assert fast[2].num_used_slots == ref[2].num_used_slots == 0
