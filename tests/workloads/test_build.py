"""Rebuilding the derived traces (:mod:`paged.workloads.build`) from tiny stand-ins of the shared data."""

from __future__ import annotations

import json

import pytest

from paged.workloads import load_trace
from paged.workloads.build import build_derived_traces

Q = "please explain how paged attention stores the key value cache in blocks"
A = "it splits the cache into fixed size blocks and maps them through a block table per sequence"


def shared_folder(tmp_path):
    root = tmp_path / "shared"
    (root / "alpaca").mkdir(parents=True)
    (root / "wmt16").mkdir()
    records = [{"instruction": f"Explain idea number {i} in one paragraph.", "input": "" if i % 2 else "context",
                "output": A} for i in range(6)]
    (root / "alpaca" / "alpaca_5000.json").write_text(json.dumps(records), encoding="utf-8")
    (root / "wmt16" / "newstest2016.en").write_text("".join(f"Sentence {i} is in English.\n" for i in range(9)))
    (root / "wmt16" / "newstest2016.de").write_text("".join(f"Satz {i} ist auf Deutsch.\n" for i in range(9)))
    chat = [{"id": "a", "conversations": [{"from": "human", "value": Q}, {"from": "gpt", "value": A},
                                          {"from": "human", "value": Q}, {"from": "gpt", "value": A}]}]
    (tmp_path / "sharegpt.json").write_text(json.dumps(chat), encoding="utf-8")
    return root


def test_build_writes_every_trace_per_tokenizer_and_rebuilds_byte_for_byte(tmp_path):
    shared = shared_folder(tmp_path)
    files = build_derived_traces(tmp_path / "out", str(tmp_path / "sharegpt.json"), shared, ("cl100k", "gpt2"))
    stems = ("sharegpt_lengths", "sharegpt_chat_lengths", "sharegpt_sessions_8k_lengths", "sharegpt_sessions_32k_lengths",
             "alpaca_lengths", "alpaca_bare_lengths",
             "wmt16_1shot_lengths", "wmt16_5shot_lengths")
    assert set(files) == {f"{s}{t}.csv" for s in stems for t in ("", "_gpt2")}
    written = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    assert set(written) == set(files) | {"wmt16_fewshot_examples.csv"}
    examples = written["wmt16_fewshot_examples.csv"].decode()
    assert examples.count("\n") == 5 + 1 + 5 and "Satz" in examples  # header, columns, the 5 pairs only
    wmt = load_trace(tmp_path / "out" / "wmt16_5shot_lengths_gpt2.csv")
    assert len(wmt) == 4 and len({r.prefix_len for r in wmt}) == 1 and wmt[0].prefix_len > 0
    build_derived_traces(tmp_path / "again", str(tmp_path / "sharegpt.json"), shared, ("cl100k", "gpt2"))
    assert {p.name: p.read_bytes() for p in (tmp_path / "again").iterdir()} == written


def test_missing_shared_files_are_named(tmp_path):
    shared = shared_folder(tmp_path)
    (shared / "wmt16" / "newstest2016.de").unlink()
    with pytest.raises(FileNotFoundError, match=r"lacks \[.*newstest2016\.de'\].*make data SHARED="):
        build_derived_traces(tmp_path / "out", str(tmp_path / "sharegpt.json"), shared)
    with pytest.raises(FileNotFoundError, match="no ShareGPT file at"):
        build_derived_traces(tmp_path / "out", str(tmp_path / "missing.json"))
    assert not (tmp_path / "out").exists()  # a refusal leaves no folder behind
