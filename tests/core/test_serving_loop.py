"""The serving loop shared by the simulator and the engine (paged.core.serving_loop); the counters of its
result: prefills, recomputation, busy time."""

from __future__ import annotations

import pytest

from paged.core.scheduler import Scheduler
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus
from paged.core.serving_loop import ServingLoop
from paged.sim import fast
from paged.sim.cost_model import get_cost_model
from paged.sim.simulator import simulate
from paged.systems import make_kv_manager
from paged.workloads import Request


class CountingExecutor:
    """A fixed 1 s per iteration; every running sequence gains a token; records what ran."""

    def __init__(self):
        self.now = 0.0
        self.waits = []
        self.iterations = []

    def wait_until(self, time):
        self.waits.append((self.now, time))
        self.now = time

    def execute(self, scheduler, outputs):
        self.iterations.append((self.now, outputs.is_prefill, [g.request_id for g in outputs.scheduled_seq_groups]))
        self.now += 1.0
        done = False
        for g in outputs.scheduled_seq_groups:
            for s in g.get_seqs(SequenceStatus.RUNNING):
                s.append_token()
                if g.first_token_time is None:
                    g.first_token_time = self.now
                if s.num_generated >= g.output_len:
                    scheduler.finish_seq(s)
                    done = True
        return done


def groups(*specs):
    return [SequenceGroup(i, t, [Sequence(i, p)], o) for i, (t, p, o) in enumerate(specs)]


def loop_for(gs, num_slots=1024, executor=None):
    return ServingLoop(Scheduler(make_kv_manager("paged", num_slots // 16, 16)), executor or CountingExecutor(), gs,
                       record_memory=True)


def test_requests_arrive_on_the_executors_clock_and_idle_time_is_skipped():
    gs = groups((0.0, 10, 2), (10.0, 10, 2))
    loop = loop_for(gs)
    result = loop.run()
    ex = loop.executor
    assert ex.waits == [(2.0, 10.0)]  # idle from the first finish to the next arrival
    assert [it[0] for it in ex.iterations] == [0.0, 1.0, 10.0, 11.0]
    assert [g.finished_time for g in gs] == [2.0, 12.0] and result.duration == 12.0
    assert [g.first_scheduled_time for g in gs] == [0.0, 10.0]
    assert result.num_iterations == 4 and result.avg_batched_requests == 1.0


def test_step_returns_the_groups_that_finished_and_calls_on_finish():
    gs = groups((0.0, 4, 1), (0.0, 4, 3))
    seen = []
    loop = loop_for(gs)
    loop.on_finish = seen.extend
    assert loop.step() == [gs[0]]  # the prefill gives request 0 its only token
    loop.run()
    assert seen == [gs[0], gs[1]] and not loop.has_work


def test_memory_is_recorded_only_while_requests_wait():
    gs = groups(*[(0.0, 60, 40)] * 40)  # more than 256 slots' worth waiting at once
    loop = loop_for(gs, num_slots=256)
    result = loop.run()
    assert 0 < result.memory.iterations < result.num_iterations
    assert abs(sum(result.memory.mean().values()) - 1) < 1e-12


def test_unsorted_arrivals_are_refused():
    with pytest.raises(ValueError, match="sorted by arrival"):
        loop_for(groups((5.0, 4, 1), (1.0, 4, 1)))


def test_a_scheduler_that_can_run_nothing_is_an_error_not_a_hang():
    from paged.core.scheduler import SchedulerOutputs

    class Stuck(Scheduler):  # holds a request it can never schedule (what a capacity bug would do)
        def schedule(self):
            return SchedulerOutputs([], is_prefill=False)

    loop = ServingLoop(Stuck(make_kv_manager("paged", 64, 16)), CountingExecutor(), groups((0.0, 10, 2)))
    with pytest.raises(RuntimeError, match="could run no request"):
        loop.run()


def _trace(n=40, prompt=60, output=80, gap=0.01):
    return [Request(i, prompt, output, i * gap) for i in range(n)]


def test_prefill_and_decode_batches_are_counted_apart():
    result = simulate(_trace(), make_kv_manager("paged", 6250, 16), get_cost_model("opt-13b", block_size=16),
                      record_memory=False)
    assert 0 < result.num_prefill_iterations < result.num_iterations
    assert result.prefill_tokens == 40 * 60 and result.recomputed_tokens == 0
    decode_sum = result.batched_requests_sum - result.prefill_batched_requests_sum
    assert result.avg_decode_batched_requests == decode_sum / (result.num_iterations - result.num_prefill_iterations)
    assert result.avg_decode_batched_requests > result.avg_batched_requests
    assert 0 < result.busy_seconds <= result.duration
    assert 1 <= result.time_avg_batched_requests <= 40


def test_recomputed_tokens_after_preemption():
    manager = make_kv_manager("paged", 40, 16)  # too small for the whole batch
    result = simulate(_trace(20, 100, 200, 0.0), manager, get_cost_model("opt-13b", block_size=16), record_memory=False)
    assert result.num_preemptions > 0
    assert 0 < result.recomputed_tokens < result.prefill_tokens
    assert result.prefill_tokens > 20 * 100


def test_counters_do_not_depend_on_the_fast_path():
    cost = get_cost_model("opt-13b", block_size=16)
    a = simulate(_trace(), fast.make_kv_manager("paged", 6250, 16), cost, record_memory=False)
    with fast.disabled():
        b = simulate(_trace(), fast.make_kv_manager("paged", 6250, 16), cost, record_memory=False)
    assert (a.num_prefill_iterations, a.prefill_batched_requests_sum, a.prefill_tokens) == \
        (b.num_prefill_iterations, b.prefill_batched_requests_sum, b.prefill_tokens)
    assert a.busy_seconds == pytest.approx(b.busy_seconds) and a.batched_requests_seconds == pytest.approx(b.batched_requests_seconds)
