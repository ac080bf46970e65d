"""Whole ShareGPT conversations (V3's parts joined: tests/workloads/test_conversation_parts.py), the
history kept up to 8K / 32K tokens, every request fitting its context."""

from __future__ import annotations

import pytest

from paged.workloads import get_trace


@pytest.mark.parametrize("name, context", [("sharegpt-8k", 8192), ("sharegpt-32k", 32768)])
def test_the_committed_session_traces_keep_long_histories_that_fit(name, context):
    trace = get_trace(name)  # cl100k counts
    totals = [r.prompt_len + r.output_len for r in trace]
    assert max(totals) <= context
    long = sum(r.prompt_len > 2048 for r in trace) / len(trace)
    assert long > 0.3  # the §6.5 trace cuts every prompt to 1,024
    assert max(r.output_len for r in trace) <= 1024
    assert len(get_trace(name, tokenizer="gpt2")) > 10_000
