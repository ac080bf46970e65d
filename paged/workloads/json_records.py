"""Reading a JSON list of records one record at a time, so a file cut off mid-record still
gives every complete record before the cut (§6.1: the packaged ShareGPT file is cut).

Hugging Face ``datasets``' JSON builder cannot read such a file, so this reader stays in front of
the ``datasets`` pipeline (:mod:`paged.workloads.loader`). The dataset modules decide what a cut
means: ShareGPT keeps the complete records and warns; Alpaca refuses the file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["position", "read_json_list", "read_text", "sniff_first_record"]

_WS = re.compile(r"[ \t\n\r]*")


def position(text: str, pos: int) -> str:
    """``"line L column C (char pos)"`` of a character offset, for error messages (O(pos))."""
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line} column {col} (char {pos})"


def read_text(path: str | Path, what: str, error: type[Exception] = ValueError) -> str:
    """A whole UTF-8 file as text (O(size)).

    Raises:
        FileNotFoundError: ``"<what> file not found: <path>"``.
        error: ``"<path>: not UTF-8 text at byte N"``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} file not found: {path}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text at byte {e.start}") from None


def _is_cut(err: json.JSONDecodeError, end: int) -> bool:
    """True when a decode error comes from the text ending, not from bad text."""
    if err.msg.startswith("Unterminated string"):  # strict mode: no quote/newline until EOF
        return True
    return err.pos >= end or (err.msg.startswith("Invalid \\uXXXX") and err.pos + 6 > end)


def read_json_list(path: str | Path, *, check: Callable[[Any], str | None],
                   error: type[Exception] = ValueError) -> tuple[list[Any], int | None, str]:
    """Parse a JSON list record by record, keeping every complete record.

    Args:
        path: the file (UTF-8, an optional byte-order mark).
        check: ``check(record)`` returns None for a good record, else the problem in words
            (raised as ``error`` with the record's index and position).
        error: the exception type raised for a malformed file.

    Returns:
        ``(records, cut_at, text)``: the complete records in file order; ``cut_at`` is the
        character offset where the file stops inside (or right after) a record, None when the
        list is closed; ``text`` the file's text (for positions in later messages).

    Cost: O(file size) time and memory (the text is read whole: ~125 MB for the packaged ShareGPT file).

    Raises:
        FileNotFoundError: no such file (named).
        error: not UTF-8, the top level is not a list, malformed JSON anywhere but a cut at
            the end, data after the closing ``]``, or a record ``check`` refuses; the message
            names the file and the line/column.
    """
    path = Path(path)
    text = read_text(path, "JSON", error)
    end = len(text.rstrip())
    i = _WS.match(text, 1 if text.startswith("\ufeff") else 0).end()
    if i >= end:
        raise error(f"{path}: empty file, expected a JSON list")
    if text[i] != "[":
        raise error(f"{path}: top level is not a JSON list (found {text[i]!r} at {position(text, i)})")
    decoder = json.JSONDecoder()
    records: list[Any] = []
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
            raise error(f"{path}: malformed JSON in record {len(records)} at {position(text, e.pos)}: {e.msg}") from None
        problem = check(record)
        if problem is not None:  # the position costs O(pos): computed only for the error
            raise error(f"{path}: record {len(records)} at {position(text, i)}: {problem}")
        records.append(record)
        j = _WS.match(text, j).end()
        if j >= end:  # a complete record, then the file ends: cut between records
            cut_at = j
            break
        if text[j] == "]":
            if j + 1 < end:
                k = _WS.match(text, j + 1).end()
                raise error(f"{path}: extra data after the list at {position(text, k)}")
            break
        if text[j] != ",":
            raise error(f"{path}: expected ',' or ']' after record {len(records) - 1} "
                        f"at {position(text, j)}, found {text[j]!r}")
        i = _WS.match(text, j + 1).end()
        if i >= end:
            cut_at = i
    else:
        if i >= 0 and cut_at is None:  # '[' and nothing after it
            cut_at = i
    return records, cut_at, text


def sniff_first_record(path: str | Path, limit: int = 1 << 20) -> Any:
    """The first record of a JSON list file, read from at most ``limit`` bytes (1 MiB) of its
    head; None when the file does not start with ``[`` or its first record is not complete
    within the limit. Used to tell a ShareGPT file from an Alpaca one without parsing it all."""
    with open(path, "rb") as f:
        head = f.read(limit).decode("utf-8", errors="ignore")
    i = _WS.match(head, 1 if head.startswith("\ufeff") else 0).end()
    if i >= len(head) or head[i] != "[":
        return None
    try:
        return json.JSONDecoder().raw_decode(head, _WS.match(head, i + 1).end())[0]
    except json.JSONDecodeError:
        return None
