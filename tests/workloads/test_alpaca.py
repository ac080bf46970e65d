"""The Alpaca workload (§6.1): the strict reader, the prompt formats, the loader's filters."""

from __future__ import annotations

import json

import pytest

from paged.workloads import AlpacaFormatError, count_tokens, get_trace, load_alpaca, read_alpaca_records
from paged.workloads.alpaca import PROMPT_FORMATS, alpaca_texts

RECORDS = [
    {"instruction": "Give three tips for staying healthy.", "input": "",
     "output": "Eat a balanced diet, exercise regularly and sleep well."},
    {"instruction": "Translate the sentence into French.", "input": "The cat sleeps on the mat.",
     "output": "Le chat dort sur le tapis."},
    {"instruction": "Answer yes or no.", "input": "Is water wet?", "output": "Yes"},  # output < 4 tokens
]


def write(tmp_path, records, name="alpaca.json"):
    path = tmp_path / name
    path.write_text(json.dumps(records, indent=1), encoding="utf-8")
    return path


def test_prompt_formats_use_the_input_variant_only_with_an_input():
    texts = alpaca_texts(RECORDS, "alpaca")
    assert texts[0][0] == PROMPT_FORMATS["alpaca"][1].format(instruction=RECORDS[0]["instruction"])
    assert texts[0][0].endswith("### Instruction:\nGive three tips for staying healthy.\n\n### Response:")
    assert "### Input:\nThe cat sleeps on the mat.\n\n### Response:" in texts[1][0]
    assert alpaca_texts(RECORDS, "bare")[1][0] == "Translate the sentence into French.\nThe cat sleeps on the mat."
    assert texts[2][1] == "Yes"
    with pytest.raises(ValueError, match="unknown Alpaca prompt format 'chatml'"):
        alpaca_texts(RECORDS, "chatml")


@pytest.mark.parametrize("tokenizer", ["cl100k", "gpt2"])
def test_load_alpaca_counts_filters_and_reports(tmp_path, tokenizer):
    trace = load_alpaca(write(tmp_path, RECORDS), tokenizer=tokenizer)
    want = count_tokens([t for pair in alpaca_texts(RECORDS[:2]) for t in pair], tokenizer).tolist()
    assert [(r.prompt_len, r.output_len) for r in trace] == [tuple(want[:2]), tuple(want[2:])]
    rep = trace.report
    assert (rep.records_read, rep.records_with_input, rep.candidates, rep.num_requests) == (3, 2, 3, 2)
    assert rep.requests_dropped["output_too_short"] == 1 and rep.prompt_format == "alpaca"
    assert all(r.prefix_len == 0 for r in trace)
    bare = load_alpaca(write(tmp_path, RECORDS), tokenizer=tokenizer, prompt_format="bare")
    assert all(b.prompt_len < a.prompt_len for a, b in zip(trace, bare))  # the template costs tokens


def test_get_trace_reads_an_alpaca_json_by_path(tmp_path):
    path = write(tmp_path, RECORDS)
    trace = get_trace(path, tokenizer="gpt2")
    assert trace == load_alpaca(path, tokenizer="gpt2") and len(trace) == 2


def test_truncated_alpaca_file_is_refused_naming_file_and_place(tmp_path):
    text = json.dumps(RECORDS, indent=1)
    path = tmp_path / "cut.json"
    path.write_text(text[: text.index('"Answer yes')], encoding="utf-8")
    with pytest.raises(AlpacaFormatError, match=r"cut\.json: the file is cut off \(truncated\) at line \d+ .*"
                                                r"after 2 complete records"):
        read_alpaca_records(path)
    with pytest.raises(AlpacaFormatError, match="truncated"):
        load_alpaca(path)


@pytest.mark.parametrize("records, match", [
    ([{"instruction": "x", "input": ""}], r"record 0 .*field 'output' is missing"),
    ([RECORDS[0], {"instruction": "x", "input": 3, "output": "y"}], r"record 1 .*field 'input' is int"),
    ([["not", "an", "object"]], r"record 0 .*not an object"),
    ([], r"holds no records"),
])
def test_malformed_alpaca_records_name_the_record(tmp_path, records, match):
    with pytest.raises(AlpacaFormatError, match=r"bad\.json: .*" + match):
        read_alpaca_records(write(tmp_path, records, "bad.json"))


def test_malformed_json_and_missing_file(tmp_path):
    path = tmp_path / "garbage.json"
    path.write_text('[{"instruction": "a", "input": "", "output": "b"} oops]', encoding="utf-8")
    with pytest.raises(AlpacaFormatError, match=r"garbage\.json: expected ',' or ']' after record 0"):
        read_alpaca_records(path)
    with pytest.raises(FileNotFoundError, match="missing.json"):
        load_alpaca(tmp_path / "missing.json")


def test_nothing_left_after_the_filters_names_the_file(tmp_path):
    path = write(tmp_path, RECORDS, "short.json")
    with pytest.raises(ValueError, match=r"no Alpaca requests left .*short\.json.*'output_too_short': 3"):
        load_alpaca(path, min_output_len=10_000)
