"""Simulated serving: every request finishes once with its length; serving metrics behave."""

import pytest
from support import managed
from support import synthetic_trace as synthetic

from paged.block.manager import PagedKVCacheManager
from paged.contiguous import ContiguousKVCacheManager
from paged.experiments.serving import SYSTEMS, simulate_point
from paged.sim import fast
from paged.sim.config import ServingConfig
from paged.sim.cost_model import get_cost_model
from paged.sim.simulator import simulate
from paged.sim.static_batching import simulate_static_batching
from paged.workloads import Request as Req



def test_every_request_finishes_once_with_its_length():
    trace = synthetic(80, rate=50.0)
    for system in SYSTEMS:
        result = ServingConfig(model="opt-13b", system=system).serve(trace)
        assert sorted(g.request_id for g in result.groups) == list(range(80))
        for g, r in zip(sorted(result.groups, key=lambda g: g.request_id), trace):
            assert g.seqs[0].num_generated == r.output_len
            assert g.arrival_time <= g.first_token_time <= g.finished_time


def test_simulate_point_is_deterministic_and_has_keys():
    a = simulate_point("opt-13b", "sharegpt", "paged", 2.0, num_requests=50, seed=4)
    b = simulate_point("opt-13b", "sharegpt", "paged", 2.0, num_requests=50, seed=4)
    for key in ("normalized_latency", "throughput_rps", "throughput_tps", "avg_batched_requests",
                "num_preemptions", "sim_wall_seconds", "ttft", "tpot"):
        assert key in a
    a.pop("sim_wall_seconds"), b.pop("sim_wall_seconds")
    assert a == b


def test_latency_grows_with_rate_and_paged_batches_more():
    lo = simulate_point(system="paged", rate=0.5, num_requests=200)
    hi = simulate_point(system="orca-max", rate=3.0, num_requests=200)
    paged_hi = simulate_point(system="paged", rate=3.0, num_requests=200)
    assert lo["normalized_latency"] < paged_hi["normalized_latency"] < hi["normalized_latency"]
    assert paged_hi["avg_batched_requests"] > hi["avg_batched_requests"]


def test_unknown_system():
    with pytest.raises(ValueError, match="unknown system"):
        ServingConfig(system="tgi")


def test_static_batching_sums_decode_steps_like_the_step_by_step_loop():
    cost = get_cost_model("opt-13b", paged_kernel=False, cpu_scale=0.0, block_size=16)
    trace = [Req(0, 30, 40, 0.0), Req(1, 50, 7, 0.0), Req(2, 20, 1, 0.0)]
    result = simulate_static_batching(trace, cost, max_batch_size=7)
    expected = cost.prefill_time([50] * 3) + sum(cost.decode_time(3, 3 * (50 + step)) for step in range(1, 40))
    assert result.duration == pytest.approx(expected, rel=1e-12)
    assert all(g.finished_time == result.duration for g in result.groups)


# -- sequence groups and shared prefixes at paper scale ------------------------------------------------

from dataclasses import dataclass  # noqa: E402

from paged.sim.beam_replay import load_beam_traces  # noqa: E402
from paged.core.sequence import SequenceStatus  # noqa: E402
from paged.sim.simulator import groups_from_trace  # noqa: E402


@dataclass(frozen=True)
class PrefixedRequest:
    """A hand-made request with a shared-prefix length (the field the WMT16 traces carry)."""

    request_id: int
    prompt_len: int
    output_len: int
    arrival_time: float
    prefix_len: int


def _group_snapshot(result):
    return (result.num_iterations, result.duration, result.num_preemptions, result.memory,
            [(g.first_token_time, g.finished_time, sorted(s.num_generated for s in g.seqs)) for g in result.groups])


GROUP_MANAGERS = {  # system, blocks, block size, settings
    "paged16": ("paged", 4096 // 16, 16, dict(num_cpu_blocks=128)),
    "paged8-apc": ("paged", 4096 // 8, 8, dict(num_cpu_blocks=128, enable_prefix_caching=True)),
    "oracle": ("orca-oracle", 4096 // 16, 16, dict(max_seq_len=1024)),
}


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
@pytest.mark.parametrize("name", list(GROUP_MANAGERS))
@pytest.mark.parametrize("n, beam", [(3, 1), (1, 4)], ids=["parallel3", "beam4"])
def test_groups_on_the_fast_path_equal_the_reference(name, preemption, n, beam, monkeypatch):
    """Sequence groups with the memory breakdown recorded (the fast path's step-by-step loop with
    fast-forward) against the reference, the fast path switched off."""
    trace = synthetic(60, rate=10.0, seed=2)
    system, blocks, block_size, kw = GROUP_MANAGERS[name]
    cost = get_cost_model("opt-13b", block_size=block_size, paged_kernel=system == "paged")
    results = []
    for on in (True, False):
        monkeypatch.setattr(fast, "_ENABLED", on)
        results.append(simulate(trace, managed(system, blocks, block_size, **kw), cost, preemption_mode=preemption,
                                max_num_batched_tokens=1024, n=n, beam_width=beam))
    assert _group_snapshot(results[0]) == _group_snapshot(results[1])
    for g, r in zip(sorted(results[0].groups, key=lambda g: g.request_id), trace):
        assert len(g.seqs) == max(n, beam) and all(s.num_generated == r.output_len for s in g.seqs)


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_beam_groups_under_preemption_finish_and_free_everything(preemption):
    import random

    rng = random.Random(5)
    trace = [Req(i, rng.randint(1, 100), rng.randint(1, 60), 0.01 * i) for i in range(40)]
    manager = PagedKVCacheManager(1024 // 16, 16, num_cpu_blocks=256, watermark=0.0)
    result = simulate(trace, manager, lambda out: 0.01, preemption_mode=preemption, beam_width=6,
                      record_memory=False, max_num_batched_tokens=4096)
    assert result.num_preemptions > 0
    assert all(s.num_generated == r.output_len for g, r in zip(sorted(result.groups, key=lambda g: g.request_id), trace)
               for s in g.seqs)
    assert manager.get_num_free_gpu_blocks() == 1024 // 16 and manager.cpu_allocator.num_free_blocks == 256


@pytest.mark.parametrize("kw", [{}, {"n": 3}, {"beam_width": 2}, {"shared_prefix": "tokens"}, {"shared_prefix": "none"}],
                         ids=["basic", "parallel3", "beam2", "tokens", "none"])
def test_groups_from_trace_fills_every_field_by_name(kw):
    # groups_from_trace builds its groups with positional arguments (speed): each field must get its value.
    trace = [PrefixedRequest(7, 40, 9, 0.5, 16), PrefixedRequest(8, 30, 5, 0.25, 0)]
    groups = groups_from_trace(trace, **kw)
    assert [g.request_id for g in groups] == [8, 7]  # arrival order
    g = groups[1]
    width = kw.get("n", 1)
    prefix = 16 if kw.get("shared_prefix", "reserved") == "reserved" else 0
    assert (g.arrival_time, g.output_len, g.prefix_len, g.max_num_seqs) == (0.5, 9, prefix, 2 if "beam_width" in kw else 0)
    assert (g.sampling_params, g.first_scheduled_time, g.first_token_time, g.finished_time) == (None,) * 4
    assert (g.num_preemptions, g.num_cached_tokens) == (0, 0)
    assert (g.beam is not None) == ("beam_width" in kw)
    assert [s.seq_id for s in g.seqs] == list(range(width))  # the first request of the trace: ids 0..width-1
    assert all((s.prompt_len, s.num_generated, s.status, s.parent_seq_id) == (40, 0, SequenceStatus.WAITING, None)
               for s in g.seqs)
    tokens = g.seqs[0].token_ids
    assert (tokens == list(range(16)) + [-1] * 24) if kw.get("shared_prefix") == "tokens" else tokens is None


def test_gc_paused_restores_the_collector_also_on_an_error():
    import gc

    from paged.sim.simulator import gc_paused

    assert gc.isenabled()
    with pytest.raises(KeyError):
        with gc_paused():
            assert not gc.isenabled()
            raise KeyError("x")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # left as it was found
    finally:
        gc.enable()


def test_beam_replay_follows_the_recording():
    traces = load_beam_traces()
    assert sorted(traces) == [2, 4, 6] and all(len(t) == 12 for t in traces.values())
    (group,) = groups_from_trace([Req(0, 10, 200, 0.0)], beam_width=4)
    recorded = traces[4][0]
    assert group.beam is recorded and group.max_num_seqs == 4
    assert recorded.parents(len(recorded.steps)) == recorded.steps[1]  # past its end it repeats from step 1
    with pytest.raises(ValueError, match="no recorded beam-search trace of width 3"):
        groups_from_trace([Req(0, 10, 20, 0.0)], beam_width=3)


def test_sharing_saves_blocks_only_where_blocks_can_be_shared():
    trace = synthetic(40, rate=5.0, seed=4)
    cost = get_cost_model("opt-13b", block_size=16)
    saved = {}
    for name in ("paged", "orca-oracle"):
        for mode, kw in (("n4", {"n": 4}), ("beam4", {"beam_width": 4}), ("n1", {})):
            manager = managed(name, cost.num_kv_blocks, 16, max_seq_len=2048)
            result = simulate(trace, manager, cost if name == "paged" else get_cost_model(
                "opt-13b", block_size=16, paged_kernel=False), record_memory=False, record_sharing=True, **kw)
            saved[name, mode] = result.sharing.saving
    assert saved["paged", "beam4"] > saved["paged", "n4"] > 0 == saved["paged", "n1"]
    assert saved["orca-oracle", "n4"] == saved["orca-oracle", "beam4"] == 0


def test_shared_prefix_is_shared_reserved_or_found_by_the_cache():
    reqs = [PrefixedRequest(i, 120 + i % 7, 20, 0.05 * i, prefix_len=80) for i in range(30)]
    cost = get_cost_model("llama-13b", block_size=16)
    runs = {}
    for mode, caching in (("reserved", False), ("tokens", True), ("none", False)):
        manager = managed("paged", cost.num_kv_blocks, 16, enable_prefix_caching=caching)
        runs[mode] = simulate(reqs, manager, cost, shared_prefix=mode, record_memory=False, record_sharing=True)
    # 80 tokens = 5 full blocks of 16 shared by every request (reserved) or by all after the first (cache)
    assert [g.num_cached_tokens for g in runs["reserved"].groups] == [80] * 30
    assert runs["tokens"].groups[0].num_cached_tokens == 0
    assert all(g.num_cached_tokens == 80 for g in runs["tokens"].groups[1:])
    assert runs["none"].sharing.saving == 0 < runs["tokens"].sharing.saving
    assert runs["reserved"].sharing.saving > 0
    # a shared prefix is computed once (cached tokens are not prefilled): less time than computing it always
    assert runs["reserved"].duration < runs["none"].duration
    oracle = simulate(reqs, managed("orca-oracle", cost.num_kv_blocks, 16, max_seq_len=2048), cost,
                      record_memory=False, record_sharing=True)
    assert oracle.sharing.saving == 0 and all(g.num_cached_tokens == 0 for g in oracle.groups)


def test_beam_copies_are_charged_contiguous_whole_kv_paged_cow_blocks():
    """§4.4: a contiguous fork copies the parent's whole KV, paged copies one block per copy-on-write;
    both are priced at the cost model's HBM bandwidth and counted in the result."""
    cost = get_cost_model("opt-13b", block_size=16)
    bytes_per_token = cost.model.kv_bytes_per_token
    assert cost.kv_copy_time(1000) == pytest.approx(2 * 1000 * bytes_per_token / (1555e9 * cost.memory_efficiency))
    assert cost.block_copy_time(3) == cost.kv_copy_time(48) and cost.kv_copy_time(0) == 0.0
    trace = [Req(i, 40, 30, 0.0) for i in range(4)]
    orca = ServingConfig(model="opt-13b", system="orca-oracle", beam_width=4).serve(trace)
    paged = ServingConfig(model="opt-13b", system="paged", beam_width=4).serve(trace)
    assert orca.kv_copy_tokens > 40 * 4 and orca.cow_blocks == 0  # every fork copies ≥ the prompt's KV
    assert orca.kv_copy_seconds == pytest.approx(cost.kv_copy_time(orca.kv_copy_tokens))
    assert paged.kv_copy_tokens == 0 and paged.cow_blocks > 0
    assert paged.cow_seconds == pytest.approx(cost.block_copy_time(paged.cow_blocks))
    assert paged.cow_blocks * 16 < orca.kv_copy_tokens  # paged copies far less than the contiguous system
    # the copies are time: with a constant iteration time the clock is iterations plus the copies
    manager = ContiguousKVCacheManager(1 << 14, "oracle")
    run = simulate(trace, manager, lambda out: 0.01, beam_width=4, record_memory=False)
    assert run.kv_copy_tokens == orca.kv_copy_tokens and run.kv_copy_seconds == 0.0  # the lambda prices no copy


@pytest.mark.parametrize("bad", [-0.01, float("nan"), float("inf")])
def test_a_time_model_giving_an_impossible_time_is_refused_naming_it(bad, monkeypatch):
    """A negative, NaN or infinite iteration time stops the run with an error naming the time model and the
    iteration, on the reference path and on the fast path (where a run of decode iterations adds its times
    at once), and the manager gets every block back."""
    from dataclasses import dataclass

    from paged.sim.cost_model import CostModel
    from paged.sim.executor import InvalidTimeError

    calls = [0]

    def constant(outputs):  # a bare callable: the reference loop
        calls[0] += 1
        return bad if calls[0] == 5 else 0.01

    trace = synthetic(30, rate=20.0, seed=3)
    manager = managed("paged", 512, 16)
    with pytest.raises(InvalidTimeError, match=r"gave .* s for iteration 5: an iteration's time must be a finite"):
        simulate(trace, manager, constant, record_memory=False)
    assert manager.num_used_slots == 0

    @dataclass(frozen=True, slots=True)
    class Broken(CostModel):  # a cost model whose decode steps go wrong after a while
        def decode_time(self, num_seqs, context_tokens):
            return bad if context_tokens > 2000 else CostModel.decode_time(self, num_seqs, context_tokens)

        def decode_time_of(self, num_seqs):
            return lambda context: self.decode_time(num_seqs, context)

    cost = get_cost_model("opt-13b", block_size=16)
    broken = Broken(cost.model, cost.server, 16)
    for on in (True, False):
        monkeypatch.setattr(fast, "_ENABLED", on)
        manager = managed("paged", cost.num_kv_blocks, 16)
        with pytest.raises(InvalidTimeError, match="the time model Broken of opt-13b gave"):
            simulate(trace, manager, broken, record_memory=on)  # on: the fast-forward; off: the reference
        assert manager.num_used_slots == 0
        manager = managed("paged", cost.num_kv_blocks, 16)
        with pytest.raises(InvalidTimeError, match="the time model Broken of opt-13b gave"):
            simulate(trace, manager, broken, record_memory=False)  # on: the decode calendar
        assert manager.num_used_slots == 0
