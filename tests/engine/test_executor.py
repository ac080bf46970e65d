"""The engine's executor (the engine's step) in the shared serving loop: stats, wall clock, arrivals."""

from __future__ import annotations

import pytest
from support import tiny_llama

from paged.engine import LLM, SamplingParams
from paged.engine.executor import ModelExecutor

GREEDY = SamplingParams(temperature=0, max_tokens=4)


@pytest.fixture(scope="module")
def llm():
    return LLM(tiny_llama(), block_size=16, num_gpu_blocks=64)


def test_each_step_records_what_it_ran(llm):
    loop, _ = llm.serving_loop([[5, 6, 7], [8, 9]], GREEDY)
    assert isinstance(loop.executor, ModelExecutor)
    loop.run()
    steps = loop.executor.stats.steps
    assert steps[0].is_prefill and steps[0].num_tokens == 5 and steps[0].num_seqs == 2
    assert all(not s.is_prefill and s.num_tokens == 2 for s in steps[1:])
    assert len(steps) == 4 and all(s.seconds > 0 for s in steps)  # 1 prefill + 3 decodes for 4 tokens
    assert loop.executor.stats.generated_tokens == 8
    assert steps[0].used_slots == 2 * 16 and steps[0].blocks_in_use == steps[0].blocks_without_sharing == 2


def test_requests_are_served_as_they_arrive(llm):
    outs = llm.generate([[5, 6, 7], [8, 9]], GREEDY, arrival_times=[0.0, 0.25])
    first, second = (o.metrics for o in outs)
    assert first["first_scheduled_time"] < 0.25 <= second["first_scheduled_time"]
    assert second["finished_time"] >= second["first_token_time"] >= second["first_scheduled_time"]
    assert llm.last_result.duration >= 0.25 and llm.last_stats.elapsed == llm.last_result.duration


def test_arrival_times_are_checked(llm):
    with pytest.raises(ValueError, match="non-decreasing"):
        llm.generate([[5], [6]], GREEDY, arrival_times=[1.0, 0.5])
    with pytest.raises(ValueError, match="2 arrival times for 1 prompts"):
        llm.generate([[5]], GREEDY, arrival_times=[0.0, 1.0])
