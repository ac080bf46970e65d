"""Whole ShareGPT conversations: V3's parts joined by conversation id at their turn offsets, the
history kept up to 8K / 32K tokens, every request fitting its context."""

from __future__ import annotations

import pytest

from paged.workloads import get_trace
from paged.workloads.sharegpt_sessions import join_sessions


def _turns(*texts):
    return [{"from": "human" if i % 2 == 0 else "gpt", "value": t} for i, t in enumerate(texts)]


def test_parts_join_at_their_offsets_without_repeating_the_overlap():
    records = [
        {"id": "a_0", "conversations": _turns("q1", "r1", "q2")},
        {"id": "b_0", "conversations": _turns("x", "y")},
        # part at turn 2 repeats q2, then continues with an assistant turn
        {"id": "a_2", "conversations": [{"from": "human", "value": "q2"}, {"from": "gpt", "value": "r2"}]},
        {"id": "c_3", "conversations": _turns("no", "part", "zero")},
        {"id": "b_5", "conversations": _turns("after", "gap")},  # b has 2 turns: offset 5 follows unknown history
    ]
    texts, report = join_sessions(records)
    assert texts == [["q1", "r1", "q2", "r2"], ["x", "y"]]  # in the order of their part 0
    assert (report.conversations, report.joined, report.parts_joined, report.overlapping_turns) == (2, 2, 1, 1)
    assert (report.parts_after_gap, report.without_part_zero) == (2, 1)  # b_5 and c_3


@pytest.mark.parametrize("name, context", [("sharegpt-8k", 8192), ("sharegpt-32k", 32768)])
def test_the_committed_session_traces_keep_long_histories_that_fit(name, context):
    trace = get_trace(name)  # cl100k counts
    totals = [r.prompt_len + r.output_len for r in trace]
    assert max(totals) <= context
    long = sum(r.prompt_len > 2048 for r in trace) / len(trace)
    assert long > 0.3  # the §6.5 trace cuts every prompt to 1,024
    assert max(r.output_len for r in trace) <= 1024
    assert len(get_trace(name, tokenizer="gpt2")) > 10_000
