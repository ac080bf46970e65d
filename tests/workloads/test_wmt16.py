"""WMT16 translation with a shared few-shot prefix (§6.4): reader checks, prefix lengths, committed examples."""

from __future__ import annotations

import pytest

from paged.workloads import WMT16FormatError, count_tokens, wmt16_examples, wmt16_prefix
from paged.workloads.wmt16 import INSTRUCTION, choose_example_lines, fewshot_prefix, read_parallel_text, wmt16_trace

EN = [f"Sentence number {i} talks about the weather in Berlin." for i in range(12)]
DE = [f"Satz Nummer {i} spricht über das Wetter in Berlin." for i in range(12)]


def write_sides(tmp_path, en=EN, de=DE):
    src, tgt = tmp_path / "test.en", tmp_path / "test.de"
    src.write_text("\n".join(en) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(de) + "\n", encoding="utf-8")
    return src, tgt


def test_mismatched_sides_name_both_files_and_counts(tmp_path):
    src, tgt = write_sides(tmp_path, EN, DE[:-1])
    with pytest.raises(WMT16FormatError, match=r"mismatched WMT16 sides: .*test\.en has 12 lines, .*test\.de has 11"):
        read_parallel_text(src, tgt)


def test_empty_line_missing_file_and_bad_encoding(tmp_path):
    src, tgt = write_sides(tmp_path, EN[:3] + [""] + EN[4:])
    with pytest.raises(WMT16FormatError, match=r"test\.en, line 4: empty line"):
        read_parallel_text(src, tgt)
    src.write_text("one\n", encoding="utf-8")
    with pytest.raises(FileNotFoundError, match="nothing.de"):
        read_parallel_text(src, tmp_path / "nothing.de")
    tgt.write_bytes(b"\xff\xfe\n")
    with pytest.raises(WMT16FormatError, match=r"test\.de: not UTF-8"):
        read_parallel_text(src, tgt)


@pytest.mark.parametrize("tokenizer", ["gpt2", "cl100k"])
def test_every_request_carries_the_shared_prefix(tmp_path, tokenizer):
    en, de = read_parallel_text(*write_sides(tmp_path))
    lines = choose_example_lines(len(en))
    assert len(set(lines)) == 5
    one, five = (wmt16_trace(en, de, lines, k, tokenizer) for k in (1, 5))
    prefix1 = fewshot_prefix([(en[lines[0]], de[lines[0]])])
    assert prefix1 == f"{INSTRUCTION}{en[lines[0]]} => {de[lines[0]]}\n"
    p1 = int(count_tokens([prefix1], tokenizer)[0])
    assert {r.prefix_len for r in one} == {p1} and {r.prefix_len for r in five} == {five.report.prefix_len}
    assert five.report.prefix_len > 4 * p1 // 2  # five pairs cost more than one
    rest = [i for i in range(12) if i not in lines]
    assert len(one) == len(five) == 7 == one.report.candidates
    own = count_tokens([f"{en[i]} =>" for i in rest], tokenizer)
    assert [r.prompt_len - r.prefix_len for r in one] == own.tolist() == [r.prompt_len - r.prefix_len for r in five]
    assert [r.output_len for r in one] == count_tokens([" " + de[i] for i in rest], tokenizer).tolist()


def test_a_prefix_longer_than_the_context_is_refused(tmp_path):
    en, de = read_parallel_text(*write_sides(tmp_path))
    with pytest.raises(ValueError, match=r"5-shot prefix is \d+ tokens .*not shorter than the model's context of "
                                         r"64 tokens"):
        wmt16_trace(en, de, choose_example_lines(len(en)), 5, "gpt2", max_model_len=64)
    with pytest.raises(ValueError, match="shots must be in 1..5"):
        wmt16_trace(en, de, choose_example_lines(len(en)), 6, "gpt2")
    with pytest.raises(ValueError, match="cannot give 5 example pairs"):
        choose_example_lines(5)


def test_committed_examples_give_the_committed_prefix_lengths():
    from paged.workloads import get_trace

    examples = wmt16_examples()
    assert [int(e["shot"]) for e in examples] == [1, 2, 3, 4, 5] and all(e["en"] and e["de"] for e in examples)
    for shots in (1, 5):
        prefix = wmt16_prefix(shots)
        assert prefix.startswith(INSTRUCTION) and prefix.count(" => ") == shots and prefix.endswith("\n")
        for tokenizer in ("gpt2", "cl100k"):
            trace = get_trace(f"wmt16-{shots}shot", tokenizer=tokenizer)
            assert {r.prefix_len for r in trace} == {int(count_tokens([prefix], tokenizer)[0])}
    with pytest.raises(ValueError, match="shots must be in 1..5"):
        wmt16_prefix(0)
