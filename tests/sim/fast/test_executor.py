"""The fast path's batched beam step (one ``free_and_fork`` per group and step) with the fast scheduler and
managers gives exactly the results of the reference path: one ``Scheduler.finish_seq`` / ``fork_seq`` per
sequence and ``can_append_slots`` then ``append_slots`` per group (§4.4, Fig. 14). Every result field,
every request's times and tokens, and the copy-on-write block ids, preemptions and free blocks of every
iteration are compared."""

import dataclasses

import pytest

from paged.sim import fast as fast_path
from paged.sim.cost_model import get_cost_model
from paged.sim.simulator import simulate
from support import managed, synthetic_trace


class _Logged:
    """The cost model, recording what every iteration scheduled (its copy-on-write block ids too)."""

    def __init__(self, cost, manager):
        self.cost, self.manager, self.log = cost, manager, []

    def __getattr__(self, name):
        return getattr(self.cost, name)

    def __call__(self, outputs):
        free = self.manager.get_num_free_gpu_blocks() if hasattr(self.manager, "gpu_allocator") else \
            self.manager.buddy.num_free_slots
        self.log.append((outputs.is_prefill, [g.request_id for g in outputs.scheduled_seq_groups],
                         list(outputs.blocks_to_copy), list(outputs.blocks_to_swap_in),
                         list(outputs.blocks_to_swap_out), [g.request_id for g in outputs.preempted],
                         outputs.num_batched_tokens, free))
        return self.cost(outputs)


def _manager(system, block_size, slots):
    if system == "paged":
        return managed("paged", slots // block_size, block_size, num_cpu_blocks=slots // block_size // 2)
    return managed(system, slots // block_size, block_size, max_seq_len=2048)


def _run(monkeypatch, system, block_size, preemption, width, trace, slots, *, reference, **kw):
    with monkeypatch.context() as patch:
        if reference:
            patch.setattr(fast_path, "_ENABLED", False)
        manager = _manager(system, block_size, slots)
        assert fast_path.is_fast(manager) != reference
        cost = _Logged(get_cost_model("opt-13b", block_size=block_size, paged_kernel=system == "paged"), manager)
        result = simulate(trace, manager, cost, preemption_mode=preemption, beam_width=width,
                          max_num_batched_tokens=4096, **kw)
    manager.check_invariants()
    return result, cost.log, manager


def _summary(result):
    fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(result) if f.name != "groups"}
    groups = [(g.request_id, g.arrival_time, g.first_scheduled_time, g.first_token_time, g.finished_time,
               g.num_preemptions, g.num_cached_tokens,
               [(s.seq_id, s.num_generated, s.status, s.parent_seq_id, s.finish_reason) for s in g.seqs])
              for g in result.groups]
    return fields, groups


CASES = [("paged", 1, "recompute"), ("paged", 16, "recompute"), ("paged", 128, "recompute"),
         ("paged", 1, "swap"), ("paged", 16, "swap"), ("paged", 128, "swap"),
         ("orca-oracle", 16, "recompute"), ("orca-max", 16, "recompute")]


@pytest.mark.parametrize("width", [2, 4, 6])
@pytest.mark.parametrize("system, block_size, preemption", CASES, ids=[f"{s}-{b}-{p}" for s, b, p in CASES])
@pytest.mark.parametrize("load", ["light", "overloaded"])
def test_batched_beam_step_equals_reference(monkeypatch, system, block_size, preemption, width, load):
    trace = synthetic_trace(40 if load == "light" else 24, 20.0, seed=width, max_prompt=200, max_output=120)
    # light: room for everyone; overloaded: a cache a few requests fill, so groups are preempted
    slots = 1 << 17 if load == "light" else ((1536 if block_size == 1 else 2560) if system == "paged" else 32768)
    if system == "orca-max" and load == "light":
        slots = 1 << 19
    kw = dict(record_memory=True, record_sharing=load == "overloaded" and block_size > 1)
    fast, fast_log, fast_manager = _run(monkeypatch, system, block_size, preemption, width, trace, slots,
                                        reference=False, **kw)
    ref, ref_log, ref_manager = _run(monkeypatch, system, block_size, preemption, width, trace, slots,
                                     reference=True, **kw)
    assert _summary(fast) == _summary(ref)
    assert fast_log == ref_log
    assert (fast.cow_blocks, fast.cow_seconds, fast.kv_copy_tokens, fast.kv_copy_seconds) == \
        (ref.cow_blocks, ref.cow_seconds, ref.kv_copy_tokens, ref.kv_copy_seconds)
    if system == "paged":
        drain = [manager.gpu_allocator.allocate() for manager in (fast_manager, ref_manager)
                 for _ in range(manager.get_num_free_gpu_blocks())]
        assert drain[:len(drain) // 2] == drain[len(drain) // 2:]  # the same free blocks, in the same order
        assert fast.kv_copy_tokens == 0 and (fast.cow_blocks > 0) == (block_size > 1)
    else:
        assert fast.cow_blocks == 0 and fast.kv_copy_tokens > 0
    if load == "overloaded" and system == "paged":  # a contiguous reservation covers every decode
        assert fast.num_preemptions > 0
    for g, r in zip(sorted(fast.groups, key=lambda g: g.request_id), trace):
        assert len(g.seqs) == (width if r.output_len > 1 else 1) and all(s.num_generated == r.output_len for s in g.seqs)
