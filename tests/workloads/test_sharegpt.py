"""ShareGPT loading (§6.1, §6.5): the record reader of a cut-off file, roles, pairs, filters, chat rounds.

Every test uses a tiny JSON file written to tmp_path; the 120 MB packaged file is never tokenized
here (the committed CSV derived from it is read instead).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from paged.workloads import (ShareGPTFormatError, ShareGPTLoadReport, ShareGPTTruncatedWarning, count_tokens, load_sharegpt,
                             load_sharegpt_chat, read_sharegpt_records)

LONG_Q = "please explain how paged attention stores the key value cache in blocks"
LONG_A = "it splits the cache into fixed size blocks and maps them through a block table per sequence"


def conv(*turns: tuple[str, str], cid: str = "x") -> dict:
    return {"id": cid, "conversations": [{"from": r, "value": v} for r, v in turns]}


def write_json(tmp_path: Path, records, name: str = "sg.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(records, indent=2), encoding="utf-8")
    return path


GOOD = conv(("human", LONG_Q), ("gpt", LONG_A), cid="a")
GOOD2 = conv(("human", LONG_Q + " twice"), ("gpt", LONG_A), ("human", LONG_Q), ("gpt", LONG_A + " again"), cid="b")


# ---------------------------------------------------------------- reading the JSON file

def test_truncated_file_keeps_complete_records_and_reports_cut(tmp_path):
    full = json.dumps([GOOD, GOOD2, GOOD], indent=2)
    cut_at = full.index('"id": "a"', full.index('"id": "b"'))  # inside the third record
    path = tmp_path / "cut.json"
    path.write_text(full[:cut_at + 20], encoding="utf-8")
    with pytest.warns(ShareGPTTruncatedWarning, match="2 complete records"):
        trace = load_sharegpt(path)
    assert isinstance(trace.report, ShareGPTLoadReport)
    assert trace.report.records_read == 2 and trace.report.truncated
    assert trace.report.truncated_at is not None and trace.report.truncated_at < cut_at + 20
    assert len(trace) == 2  # first pairs of records a and b
    assert "cut off" in trace.report.summary()


@pytest.mark.parametrize("cut", ['{"id": "z", "conv', '{"id": "z", "conversations": [', '', '{"id": "z"'])
def test_cut_at_various_points_is_a_cut_not_an_error(tmp_path, cut):
    path = tmp_path / "cut.json"
    path.write_text(json.dumps([GOOD])[:-1] + ", " + cut, encoding="utf-8")
    with pytest.warns(ShareGPTTruncatedWarning):
        records, report = read_sharegpt_records(path)
    assert len(records) == 1 and report.truncated


def test_cut_right_after_a_complete_record(tmp_path):
    path = tmp_path / "cut.json"
    path.write_text("[" + json.dumps(GOOD), encoding="utf-8")
    with pytest.warns(ShareGPTTruncatedWarning):
        records, report = read_sharegpt_records(path)
    assert len(records) == 1 and report.truncated


def test_complete_file_is_not_reported_cut(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        records, report = read_sharegpt_records(write_json(tmp_path, [GOOD, GOOD2]))
    assert len(records) == 2 and not report.truncated and report.truncated_at is None


def test_malformed_json_in_the_middle_names_file_and_position(tmp_path):
    text = json.dumps([GOOD, GOOD2, GOOD], indent=2)
    bad = text.replace('"id": "b"', '"id": "b" garbage', 1)
    path = tmp_path / "bad.json"
    path.write_text(bad, encoding="utf-8")
    with pytest.raises(ShareGPTFormatError, match=r"bad\.json.*record 1.*line \d+ column \d+") as info:
        read_sharegpt_records(path)
    assert isinstance(info.value, ValueError)
    line = bad[:bad.index("garbage")].count("\n") + 1
    assert f"line {line} " in str(info.value)


def test_garbage_between_records_and_after_the_list(tmp_path):
    path = tmp_path / "between.json"
    path.write_text("[" + json.dumps(GOOD) + " ; " + json.dumps(GOOD) + "]", encoding="utf-8")
    with pytest.raises(ShareGPTFormatError, match=r"between\.json.*expected ',' or ']'.*char"):
        read_sharegpt_records(path)
    path.write_text(json.dumps([GOOD]) + "\n extra", encoding="utf-8")
    with pytest.raises(ShareGPTFormatError, match="extra data after the list at line 2 column 2"):
        read_sharegpt_records(path)


@pytest.mark.parametrize("content", ['{"id": 1}', '"text"', "42"])
def test_top_level_not_a_list(tmp_path, content):
    path = tmp_path / "obj.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ShareGPTFormatError, match=r"obj\.json: top level is not a JSON list.*line 1 column 1"):
        read_sharegpt_records(path)


def test_bad_record_schema_and_missing_file(tmp_path):
    with pytest.raises(ShareGPTFormatError, match=r"record 1 .*'conversations' list"):
        read_sharegpt_records(write_json(tmp_path, [GOOD, [1, 2]]))
    with pytest.raises(ShareGPTFormatError, match="turn 0 is not"):
        read_sharegpt_records(write_json(tmp_path, [{"conversations": [{"from": "human"}]}]))
    with pytest.raises(FileNotFoundError, match="nope.json"):
        load_sharegpt(tmp_path / "nope.json")


# ---------------------------------------------------------------- roles, pairs and filters

def test_conversations_that_do_not_fit_are_dropped_and_counted(tmp_path):
    records = [
        conv(cid="empty"),
        conv(("human", LONG_Q), cid="single"),
        conv(("gpt", LONG_A), ("human", LONG_Q), ("gpt", LONG_A), cid="starts_with_gpt"),
        conv(("system", "be nice"), ("human", LONG_Q), ("gpt", LONG_A), cid="system_first"),
        conv(("human", LONG_Q), ("human", LONG_Q), ("gpt", LONG_A), cid="two_humans"),
        conv(("user", LONG_Q), ("chatgpt", LONG_A), cid="synonyms"),
        conv(("human", LONG_Q), ("bard", LONG_A), ("gpt", LONG_A), ("human", LONG_Q), cid="broken_later"),
        GOOD,
    ]
    trace = load_sharegpt(write_json(tmp_path, records))
    rep = trace.report
    assert rep.conversations_dropped == {"empty": 1, "single_turn": 1, "starts_with_assistant": 1,
                                         "role_order_broken": 2}
    assert len(trace) == 3 and rep.conversations_used == 3
    assert rep.conversations_cut_at_role_break == 1
    want = count_tokens([LONG_Q, LONG_A])
    assert all((r.prompt_len, r.output_len) == tuple(want) for r in trace)
    assert [r.request_id for r in trace] == [0, 1, 2]


def test_zero_length_prompt_is_filtered(tmp_path):
    records = [conv(("human", ""), ("gpt", LONG_A)), conv(("human", "hi"), ("gpt", LONG_A)), GOOD]
    trace = load_sharegpt(write_json(tmp_path, records))
    assert len(trace) == 1
    assert trace.report.requests_dropped["prompt_too_short"] == 2
    assert count_tokens([""]).tolist() == [0]


def test_length_filters_are_configurable_and_counted(tmp_path):
    path = write_json(tmp_path, [GOOD, GOOD2])
    p, p2, o = count_tokens([LONG_Q, LONG_Q + " twice", LONG_A]).tolist()
    assert p2 > p
    trace = load_sharegpt(path, max_prompt_len=p)
    assert len(trace) == 1 and trace.report.requests_dropped["prompt_too_long"] == 1
    trace = load_sharegpt(path, max_prompt_len=None, max_total_len=p + o)
    assert len(trace) == 1 and trace.report.requests_dropped["total_too_long"] == 1
    # GOOD2's first pair fails output_too_short AND prompt_too_long: counted under the first only
    trace = load_sharegpt(path, pairs="all", min_output_len=o + 1, max_prompt_len=p)
    assert len(trace) == 1
    assert trace.report.requests_dropped == {"prompt_too_short": 0, "output_too_short": 2,
                                             "prompt_too_long": 0, "total_too_long": 0}
    assert len(load_sharegpt(path, max_prompt_len=None, max_total_len=None)) == 2
    both = load_sharegpt(path, pairs="all")
    assert len(both) == 3 and both.report.mode == "all" and both.report.candidates == 3


def test_filters_leaving_nothing_raise_with_counts(tmp_path):
    path = write_json(tmp_path, [GOOD, conv(cid="e")])
    with pytest.raises(ValueError, match=r"no ShareGPT requests left.*'empty': 1.*'output_too_short': 1"):
        load_sharegpt(path, min_output_len=10_000)
    with pytest.raises(ValueError, match="pairs must be"):
        load_sharegpt(path, pairs="last")


def test_chat_workload_history_and_truncation(tmp_path):
    records = [GOOD, GOOD2]  # GOOD has one round: not multi-turn
    q1, a1, q2, a2 = count_tokens([LONG_Q + " twice", LONG_A, LONG_Q, LONG_A + " again"]).tolist()
    trace = load_sharegpt_chat(write_json(tmp_path, records))
    assert [(r.prompt_len, r.output_len) for r in trace] == [(q1, a1), (q1 + a1 + q2, a2)]
    assert trace.report.conversations_dropped == {"too_few_rounds": 1}
    short = load_sharegpt_chat(write_json(tmp_path, records), max_prompt_len=q1 + 1, max_output_len=a1 - 1)
    assert [(r.prompt_len, r.output_len) for r in short] == [(q1, a1 - 1), (q1 + 1, a1 - 1)]
    assert short.report.prompts_truncated == 1 and short.report.outputs_truncated == 2
    assert len(load_sharegpt_chat(write_json(tmp_path, records), min_rounds=1)) == 3


def test_chat_workload_joins_v3_parts_by_id_with_history(tmp_path):
    """V3 parts ``<id>_<start>`` are one conversation: the later part's round carries the earlier
    parts' turns as history; a part that repeats the previous part's last turn adds it once."""
    part0 = conv(("human", LONG_Q), ("gpt", LONG_A), cid="c_0")
    part3 = conv(("gpt", LONG_A), ("human", LONG_Q), ("gpt", LONG_A + " again"), cid="c_3")  # repeats turn 3
    part2 = conv(("human", "short one"), ("gpt", LONG_A), cid="c_2")  # out of file order: sorted by start
    other = conv(("human", LONG_Q), ("gpt", LONG_A), cid="d_0")
    q, a, s, a2 = count_tokens([LONG_Q, LONG_A, "short one", LONG_A + " again"]).tolist()
    trace = load_sharegpt_chat(write_json(tmp_path, [part0, part3, other, part2]), cache=False)
    assert [(r.prompt_len, r.output_len) for r in trace] == [(q, a), (q + a + s, a), (q + a + s + a + q, a2)]
    assert (trace.report.conversations_joined, trace.report.parts_joined) == (1, 3)
    assert (trace.report.overlapping_turns, trace.report.parts_after_gap) == (1, 0)
    assert trace.report.conversations_dropped == {"too_few_rounds": 1}  # d_0 alone; no part dropped
    cut = load_sharegpt_chat(write_json(tmp_path, [part0, part3, part2]), max_prompt_len=q + 1, cache=False)
    assert cut.report.prompts_at_cut == 2
