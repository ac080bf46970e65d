"""The length-CSV trace format (§6.1): ``#`` provenance lines, then one row per request.

``prompt_len,output_len`` (tokens) and optionally ``prefix_len`` (tokens of a shared prefix) and
``arrival_time`` (seconds). :meth:`paged.workloads.trace.Trace.save_csv` writes it,
:func:`load_trace` reads it; the committed traces under ``data/`` use it.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from paged.workloads.trace import Trace

__all__ = ["TraceFormatError", "load_trace"]


class TraceFormatError(ValueError):
    """A trace CSV file is malformed; the message names the file and the line."""


def _clip(line: str, limit: int = 80) -> str:
    """``repr(line)``, cut to about ``limit`` characters for an error message."""
    return repr(line) if len(line) <= limit else repr(line[:limit]) + f" ... ({len(line)} characters)"


def load_trace(path: str | Path, *, name: str | None = None) -> Trace:
    """Read a length-only trace CSV (e.g. ``data/sharegpt_lengths.csv``).

    Format: optional ``#`` comment lines (provenance, kept as ``Trace.source``) and blank lines,
    then a header with at least ``prompt_len`` and ``output_len``, then one row per request.
    Lengths must be integers >= 1 tokens. Optional columns: ``prefix_len`` (tokens of a shared
    prefix, 0 <= prefix_len <= prompt_len) and ``arrival_time`` (seconds): a timed trace keeps
    its times (``Trace.arrivals`` names the column and file); other columns are ignored.

    Raises:
        FileNotFoundError: no such file.
        TraceFormatError (a ValueError): missing column, wrong field count (e.g. a truncated
            last line), non-integer or non-positive length, bad prefix or arrival time, or no
            rows; the message names the file and the 1-based line number.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"trace file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8-sig")  # a leading byte-order mark (Excel) is dropped
    except UnicodeDecodeError as e:
        raise TraceFormatError(f"{path}: not UTF-8 text ({e})") from None
    comments: list[str] = []
    header: list[str] | None = None
    prompts: list[int] = []
    outputs: list[int] = []
    arrivals: list[float] = []
    prefixes: list[int] = []
    numbered = []  # (1-based line number, line) of the CSV part: no blank or comment lines
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("#"):
            comments.append(stripped[1:].strip())
        elif stripped:
            numbered.append((lineno, stripped))
    for lineno, stripped in numbered:
        fields = [f.strip() for f in next(csv.reader([stripped]))]  # one record per line, quotes allowed
        if header is None:
            header = fields
            missing = [c for c in ("prompt_len", "output_len") if c not in header]
            if missing:
                raise TraceFormatError(f"{path}, line {lineno}: header {_clip(stripped)} lacks column(s) {missing}")
            ip, io = header.index("prompt_len"), header.index("output_len")
            ia = header.index("arrival_time") if "arrival_time" in header else None
            ix = header.index("prefix_len") if "prefix_len" in header else None
            continue
        if len(fields) != len(header):
            raise TraceFormatError(f"{path}, line {lineno}: expected {len(header)} fields "
                                   f"({','.join(header)}), got {len(fields)}: {_clip(stripped)}")
        for col, idx, out in (("prompt_len", ip, prompts), ("output_len", io, outputs)):
            try:
                value = int(fields[idx])
            except ValueError:
                raise TraceFormatError(f"{path}, line {lineno}: {col} {fields[idx]!r} is not an integer") from None
            if value < 1:
                raise TraceFormatError(f"{path}, line {lineno}: {col} must be >= 1 token, got {value}")
            out.append(value)
        if ix is not None:
            try:
                x = int(fields[ix])
            except ValueError:
                raise TraceFormatError(f"{path}, line {lineno}: prefix_len {fields[ix]!r} is not an integer") from None
            if not 0 <= x <= prompts[-1]:
                raise TraceFormatError(f"{path}, line {lineno}: prefix_len must be in [0, prompt_len="
                                       f"{prompts[-1]}] tokens, got {x}")
            prefixes.append(x)
        if ia is not None:
            try:
                t = float(fields[ia])
            except ValueError:
                t = math.nan
            if not math.isfinite(t) or t < 0:
                raise TraceFormatError(f"{path}, line {lineno}: arrival_time {fields[ia]!r} "
                                       "is not a finite number >= 0")
            arrivals.append(t)
    if header is None:
        raise TraceFormatError(f"{path}: no header line (expected prompt_len,output_len)")
    if not prompts:
        raise TraceFormatError(f"{path}: header but no requests")
    return Trace.from_lengths(prompts, outputs, name=name or path.stem,
                              source="\n".join(comments) or f"file {path}",
                              arrival_times=arrivals if ia is not None else None,
                              prefix_lens=prefixes if ix is not None else None,
                              arrivals=f"from the arrival_time column of {path}" if ia is not None else None)
