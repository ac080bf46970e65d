"""The decode calendar serves exactly as the step-by-step loop with its fast-forward: every result
field and every request's times bit-identical, through arrivals, finishes, block crossings,
preemption by recomputation and by swapping, on the paged and the contiguous managers."""

import math

import pytest

import paged.sim.simulator as simulator
from paged.core.serving_loop import ServingLoop
from paged.experiments.serving import run_system
from paged.experiments.serving.run_length import long_trace
from paged.sim.decode_calendar import CalendarServingLoop, applies
from paged.systems import make_kv_manager
from paged.sim.executor import SimulatedExecutor

_FIELDS = ("num_iterations", "duration", "batched_requests_sum", "num_preemptions", "num_prefill_iterations",
           "prefill_batched_requests_sum", "prefill_tokens", "recomputed_tokens", "busy_seconds",
           "batched_requests_seconds")


def _served(trace, system, block_size, preemption, calendar, monkeypatch):
    with monkeypatch.context() as m:
        if not calendar:
            m.setattr(simulator, "applies", lambda *args, **kwargs: False)
        result = run_system(trace, system, "opt-13b", block_size=block_size, preemption=preemption)
    return ({k: getattr(result, k) for k in _FIELDS},
            [(g.request_id, g.first_scheduled_time, g.first_token_time, g.finished_time, g.num_preemptions,
              g.seqs[0].num_generated) for g in result.groups])


@pytest.mark.parametrize("system,block_size,preemption", [
    ("paged", 16, "recompute"), ("paged", 1, "recompute"), ("paged", 128, "recompute"), ("paged", 16, "swap"),
    ("orca-oracle", 16, "recompute"), ("orca-max", 16, "recompute")])
@pytest.mark.parametrize("trace,rate,duration", [("alpaca-bare", 80.0, 8.0), ("sharegpt", 8.0, 40.0),
                                                 ("alpaca-bare", math.inf, 600)])
def test_same_results_as_the_step_by_step_loop(trace, rate, duration, system, block_size, preemption, monkeypatch):
    requests = long_trace(trace, rate, duration, 0)
    calendar = _served(requests, system, block_size, preemption, True, monkeypatch)
    stepwise = _served(requests, system, block_size, preemption, False, monkeypatch)
    assert calendar == stepwise


def test_overloaded_runs_preempt_and_still_agree(monkeypatch):
    requests = long_trace("sharegpt", 20.0, 20.0, 1)
    calendar = _served(requests, "paged", 16, "recompute", True, monkeypatch)
    assert calendar[0]["num_preemptions"] > 0
    assert calendar == _served(requests, "paged", 16, "recompute", False, monkeypatch)


def test_used_only_where_it_applies():
    from paged.experiments.serving import cost_model_for
    from paged.sim.simulator import groups_from_trace

    requests = long_trace("alpaca-bare", 10.0, 2.0, 0)
    cost = cost_model_for("opt-13b", "paged")
    manager = make_kv_manager("paged", cost.num_kv_slots)
    executor = SimulatedExecutor(cost)
    single = groups_from_trace(requests)
    assert applies(single, manager, executor, record_memory=False, record_sharing=False)
    assert not applies(single, manager, executor, record_memory=True, record_sharing=False)
    assert not applies(single, manager, executor, record_memory=False, record_sharing=True)
    assert not applies(groups_from_trace(requests, n=2), manager, executor, record_memory=False, record_sharing=False)
    assert not applies(single, manager, SimulatedExecutor(cost, fast_forward=False), record_memory=False,
                       record_sharing=False)
    assert not applies(single, make_kv_manager("paged", cost.num_kv_slots, enable_prefix_caching=True), executor,
                       record_memory=False, record_sharing=False)
    assert issubclass(CalendarServingLoop, ServingLoop)


def test_an_escaping_exception_leaves_no_block_held():
    from paged.experiments.serving import cost_model_for
    from paged.core.scheduler import Scheduler
    from paged.sim.simulator import groups_from_trace

    requests = long_trace("alpaca-bare", 60.0, 5.0, 0)
    cost = cost_model_for("opt-13b", "paged")
    manager = make_kv_manager("paged", cost.num_kv_slots)
    calls = []

    def stop(finished):
        calls.append(len(finished))
        if len(calls) == 20:
            raise KeyboardInterrupt

    loop = CalendarServingLoop(Scheduler(manager), SimulatedExecutor(cost), groups_from_trace(requests), on_finish=stop)
    with pytest.raises(KeyboardInterrupt):
        loop.run()
    assert manager.num_used_slots == 0 and not loop.has_work
    manager.check_invariants()
