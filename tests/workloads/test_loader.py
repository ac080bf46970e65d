"""The datasets pipeline and its trace cache (:mod:`paged.workloads.loader`, :mod:`paged.workloads.cache`)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from paged.workloads import get_trace, load_sharegpt, load_sharegpt_chat
from paged.workloads import loader
from paged.workloads.cache import cache_fingerprint, read_entry

Q = "please explain how paged attention stores the key value cache in blocks"
A = "it splits the cache into fixed size blocks and maps them through a block table per sequence"


def sharegpt_file(tmp_path, n=3, name="chat.json"):
    records = [{"id": str(i), "conversations": [{"from": "human", "value": f"{Q} {i}"}, {"from": "gpt", "value": A},
                                                {"from": "human", "value": Q}, {"from": "gpt", "value": A * 2}]}
               for i in range(n)]
    path = tmp_path / name
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def test_fingerprint_changes_with_tokenizer_filters_and_content(tmp_path):
    path = sharegpt_file(tmp_path)
    what = {"dataset": "sharegpt", "mode": "first", "limits": {"max_prompt_len": 1024}}
    fp, inputs = cache_fingerprint(path, what, "cl100k")
    assert fp == cache_fingerprint(path, what, "cl100k")[0]
    assert fp != cache_fingerprint(path, what, "gpt2")[0]  # the tokenizer changed
    assert cache_fingerprint(path, what, "opt")[0] == cache_fingerprint(path, what, "gpt2")[0]
    assert fp != cache_fingerprint(path, {**what, "limits": {"max_prompt_len": 512}}, "cl100k")[0]
    assert inputs["paged"] and len(inputs["source_sha256"]) == 64 and inputs["tokenizer"]["name"] == "cl100k"
    path.write_text(path.read_text() + " ", encoding="utf-8")  # new content, same name
    assert fp != cache_fingerprint(path, what, "cl100k")[0]


def test_second_load_comes_from_the_cache_and_a_stale_one_is_never_used(tmp_path, monkeypatch,
                                                                         private_trace_cache):
    path = sharegpt_file(tmp_path)
    first = load_sharegpt(path)
    assert list((private_trace_cache / "traces").glob("*.json"))  # one entry written
    assert not list(private_trace_cache.glob("datasets-*"))  # datasets' Arrow files are cleaned up

    def no_tokenizing(*args, **kwargs):
        raise AssertionError("tokenized again")

    monkeypatch.setattr(loader, "tokenize_file", no_tokenizing)
    again = load_sharegpt(path)
    assert again == first and again.report == first.report and again.source == first.source
    with pytest.raises(AssertionError, match="tokenized again"):  # another tokenizer: another entry
        load_sharegpt(path, tokenizer="gpt2")
    with pytest.raises(AssertionError, match="tokenized again"):  # other filters: another entry
        load_sharegpt(path, max_prompt_len=8)
    path.write_text(path.read_text().replace("blocks", "pages"), encoding="utf-8")
    with pytest.raises(AssertionError, match="tokenized again"):  # the file changed: the entry is stale
        load_sharegpt(path)


def test_a_corrupt_entry_is_ignored_and_rebuilt(tmp_path, private_trace_cache):
    path = sharegpt_file(tmp_path)
    trace = load_sharegpt_chat(path, tokenizer="gpt2")
    (entry,) = (private_trace_cache / "traces").glob("*.json")
    entry.write_text('{"fingerprint": "', encoding="utf-8")
    assert read_entry(entry.stem, private_trace_cache) is None
    assert load_sharegpt_chat(path, tokenizer="gpt2") == trace
    assert read_entry(entry.stem, private_trace_cache)["fingerprint"] == entry.stem


def test_parallel_tokenizing_gives_the_same_counts(tmp_path):
    path = sharegpt_file(tmp_path, n=40)
    one = load_sharegpt(path, pairs="all", cache=False, num_proc=1)
    two = load_sharegpt(path, pairs="all", cache=False, num_proc=2)
    assert one == two and len(one) == 80


def test_reader_errors_come_through_the_pipeline_unwrapped(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('[{"conversations": 3}]', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.json: record 0 .*'conversations' list"):
        get_trace(path)
    other = tmp_path / "other.json"
    other.write_text('[{"text": "hello"}]', encoding="utf-8")
    with pytest.raises(ValueError, match=r"other\.json: the first record is neither ShareGPT .*\['text'\]"):
        get_trace(other)


def test_the_simulate_command_path_imports_no_heavy_library():
    code = ("import sys, paged.cli; paged.cli.build_parser(); import paged.experiments.serving; "
            "heavy = {'datasets', 'torch', 'transformers', 'tokenizers'} & set(sys.modules); "
            "print(sorted(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("text, problem", [
    ("[]", "the JSON list is empty"),
    ('[{"conversations": [{"from": "human", "va', "cut off at char 1, before its first complete record"),
    ('[{"conversations": [{"from": "gpt", "value": "x"}]}]', "none of its 1 complete records is a usable conversation"),
])
@pytest.mark.parametrize("load", [load_sharegpt, load_sharegpt_chat])
def test_a_file_with_no_conversation_names_the_file_and_the_problem(tmp_path, text, problem, load):
    from paged.workloads import ShareGPTFormatError
    path = tmp_path / "empty.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ShareGPTFormatError, match=problem) as err:
        load(path, cache=False)
    assert str(path) in str(err.value) and "corresponds to no data" not in str(err.value)
