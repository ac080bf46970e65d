"""Requests, traces and the length CSV files (§6.1)."""

from __future__ import annotations

import numpy as np
import pytest

from paged.workloads import Request, Trace, TraceFormatError, load_trace, poisson_arrivals


def test_trace_sequence_sample_and_arrivals():
    trace = Trace.from_lengths(range(1, 11), range(11, 21), name="t", source="test")
    assert len(trace) == 10 and trace[0] == Request(0, 1, 11, 0.0) and isinstance(trace[2:4], Trace)
    assert [r.prompt_len for r in trace] == list(range(1, 11))
    s1, s2 = trace.sample(4, seed=3), trace.sample(4, seed=3)
    assert s1 == s2 and len(s1) == 4 and [r.request_id for r in s1] == [0, 1, 2, 3]
    assert len({r.prompt_len for r in s1}) == 4  # without replacement
    assert [r.prompt_len for r in s1] == sorted(r.prompt_len for r in s1)  # original order kept
    assert s1.name == "t" and s1.source == "test"
    with pytest.raises(ValueError, match="11.*10"):
        trace.sample(11, seed=0)
    timed = trace.with_poisson_arrivals(2.0, seed=1)
    np.testing.assert_array_equal(timed.to_frame()["arrival_time"], poisson_arrivals(10, 2.0, seed=1))
    assert trace.mean_prompt_len == 5.5 and trace.mean_output_len == 15.5
    assert list(trace.to_frame().columns) == ["request_id", "prompt_len", "output_len", "prefix_len", "arrival_time"]
    with pytest.raises(ValueError):
        Request(0, -1, 5)
    with pytest.raises(TypeError):
        Request(0, 1.5, 5)


def test_save_and_load_round_trip(tmp_path):
    trace = Trace.from_lengths([5, 6], [7, 8]).with_poisson_arrivals(1.0, seed=0)
    path = trace.save_csv(tmp_path / "t.csv", comments=["made by a test", "second line"])
    back = load_trace(path)
    assert [(r.prompt_len, r.output_len, r.arrival_time) for r in back] == \
        [(r.prompt_len, r.output_len, r.arrival_time) for r in trace]
    assert back.source == "made by a test\nsecond line" and back.name == "t"


@pytest.mark.parametrize("body, match", [
    ("prompt_len,output_len\n5,6\n7\n", r"line 3: expected 2 fields"),
    ("prompt_len,output_len\n5,6\n7,x\n", r"line 3: output_len 'x' is not an integer"),
    ("# comment\nprompt_len,output_len\n-5,6\n", r"line 3: prompt_len must be >= 1"),
    ("prompt,output_len\n5,6\n", r"line 1: header .* lacks column\(s\) \['prompt_len'\]"),
    ("prompt_len,output_len\n", r"header but no requests"),
    ("# only a comment\n", r"no header line"),
])
def test_load_trace_malformed_csv(tmp_path, body, match):
    path = tmp_path / "bad.csv"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(TraceFormatError, match=r"bad\.csv.*" + match):
        load_trace(path)


def test_load_trace_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="none.csv"):
        load_trace(tmp_path / "none.csv")


def test_csv_with_byte_order_mark_and_quotes(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes(b'\xef\xbb\xbf"prompt_len","output_len"\n10,20\n"11",21\n')
    trace = load_trace(path)
    assert [r.prompt_len for r in trace] == [10, 11]


def test_csv_error_clips_a_long_line(tmp_path):
    path = tmp_path / "wrong.csv"
    path.write_text("x" * 20_000 + "\n")
    with pytest.raises(TraceFormatError) as err:
        load_trace(path)
    assert "20000 characters" in str(err.value) and len(str(err.value)) < 400


def test_shared_prefix_is_checked_and_kept_through_csv_sampling_and_arrivals(tmp_path):
    with pytest.raises(ValueError, match=r"prefix_len \(9 tokens\) is longer than the prompt \(5 tokens\)"):
        Request(0, 5, 3, 0.0, 9)
    trace = Trace.from_lengths([10, 12, 14], [3, 4, 5], prefix_lens=[8, 8, 8]).with_poisson_arrivals(1.0, seed=0)
    assert trace.has_shared_prefix and all(r.prefix_len == 8 for r in trace.sample(2, seed=1))
    path = trace.save_csv(tmp_path / "p.csv")
    assert path.read_text().splitlines()[0] == "prompt_len,output_len,prefix_len,arrival_time"
    back = load_trace(path)
    assert [(r.prompt_len, r.prefix_len, r.arrival_time) for r in back] == \
        [(r.prompt_len, r.prefix_len, r.arrival_time) for r in trace]
    assert list(back.to_frame()["prefix_len"]) == [8, 8, 8]


def test_bad_prefix_column_names_the_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("prompt_len,output_len,prefix_len\n10,2,4\n10,2,11\n", encoding="utf-8")
    with pytest.raises(TraceFormatError, match=r"bad\.csv, line 3: prefix_len must be in \[0, prompt_len=10\]"):
        load_trace(path)
