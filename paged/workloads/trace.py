"""Requests, traces and Poisson arrivals (paper §6.1): the workload every experiment serves.

A trace is only lengths and arrival times: ``prompt_len`` and ``output_len`` in tokens and
``arrival_time`` in seconds, exactly what the paper uses from its datasets ("only lengths are
used"). Traces are built by :mod:`paged.workloads.sharegpt` (real ShareGPT conversations),
:func:`paged.workloads.alpaca_like` (synthetic) or :func:`load_trace` (the committed CSV files
under ``data/``). Import everything from :mod:`paged.workloads`.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from numbers import Integral, Real
from pathlib import Path
from typing import Any, overload

import numpy as np
import pandas as pd

from paged.workloads.arrivals import poisson_arrivals

__all__ = ["Request", "Trace", "TraceFormatError", "load_trace"]


class TraceFormatError(ValueError):
    """A trace CSV file is malformed; the message names the file and the line."""


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a trace (§6.1).

    Attributes:
        request_id: position-based id, unique within its trace (0, 1, ...).
        prompt_len: prompt length in tokens (>= 0).
        output_len: number of tokens the request generates (>= 0).
        arrival_time: arrival time in seconds from the start of the trace (finite, >= 0).

    Raises:
        TypeError: a length or id that is not an integer (bool rejected).
        ValueError: a negative length or a negative / non-finite arrival time.
    """

    request_id: int
    prompt_len: int
    output_len: int
    arrival_time: float = 0.0

    def __post_init__(self) -> None:
        for name in ("request_id", "prompt_len", "output_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Integral):
                raise TypeError(f"Request.{name} must be an integer, got {value!r}")
            if value < 0:
                raise ValueError(f"Request.{name} must be >= 0, got {value}")
            object.__setattr__(self, name, int(value))
        t = self.arrival_time
        if isinstance(t, bool) or not isinstance(t, Real) or not math.isfinite(t) or t < 0:
            raise ValueError(f"Request.arrival_time must be a finite number >= 0 s, got {t!r}")
        object.__setattr__(self, "arrival_time", float(t))

@dataclass(frozen=True, slots=True)
class Trace(Sequence[Request]):
    """An ordered, immutable sequence of :class:`Request` plus provenance (§6.1).

    Supports ``len``, iteration and indexing (an int gives a Request, a slice a Trace).

    Attributes:
        requests: the requests, in order (a tuple).
        name: short name, e.g. ``"sharegpt"``.
        source: where the lengths came from (file, tokenizer, filters), free text.
        report: for ShareGPT traces, the :class:`paged.workloads.sharegpt.ShareGPTLoadReport` (records
            read, whether the file was cut, what was dropped and why); otherwise None.
    """

    requests: tuple[Request, ...]
    name: str = ""
    source: str = ""
    report: Any = field(default=None, compare=False)

    def __post_init__(self) -> None:
        reqs = tuple(self.requests)
        for r in reqs:
            if not isinstance(r, Request):
                raise TypeError(f"Trace holds Request objects, got {type(r).__name__}")
        object.__setattr__(self, "requests", reqs)

    @classmethod
    def from_lengths(cls, prompt_lens: Iterable[int], output_lens: Iterable[int], *,
                     name: str = "", source: str = "", report: Any = None,
                     arrival_times: Iterable[float] | None = None) -> Trace:
        """Build a trace from parallel length lists (tokens); ids are 0..n-1, arrivals 0.0 s
        unless ``arrival_times`` (seconds) is given. Raises ValueError if the lengths differ."""
        p, o = list(prompt_lens), list(output_lens)
        a = [0.0] * len(p) if arrival_times is None else list(arrival_times)
        if not len(p) == len(o) == len(a):
            raise ValueError(f"length lists differ: {len(p)} prompts, {len(o)} outputs, {len(a)} arrivals")
        reqs = tuple(Request(i, int(x), int(y), float(t)) for i, (x, y, t) in enumerate(zip(p, o, a)))
        return cls(reqs, name=name, source=source, report=report)

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[Request]:
        return iter(self.requests)

    @overload
    def __getitem__(self, index: int) -> Request: ...
    @overload
    def __getitem__(self, index: slice) -> Trace: ...
    def __getitem__(self, index):
        if isinstance(index, slice):
            return Trace(self.requests[index], name=self.name, source=self.source, report=self.report)
        return self.requests[index]

    def _replace(self, requests: Iterable[Request]) -> Trace:
        return Trace(tuple(requests), name=self.name, source=self.source, report=self.report)

    def sample(self, num_requests: int, seed: int | None) -> Trace:
        """A random subset of ``num_requests`` requests, drawn WITHOUT replacement.

        The chosen requests keep their original relative order (so arrival times stay sorted)
        and are renumbered 0..n-1. O(len) time. Deterministic for a given ``seed``.

        Raises:
            ValueError: ``num_requests`` < 0, or more than the trace holds (names both numbers).
        """
        if isinstance(num_requests, bool) or not isinstance(num_requests, Integral):
            raise TypeError(f"num_requests must be an integer, got {num_requests!r}")
        if num_requests < 0:
            raise ValueError(f"num_requests must be >= 0, got {num_requests}")
        if num_requests > len(self):
            raise ValueError(f"cannot sample {num_requests} requests without replacement "
                             f"from trace {self.name!r} of {len(self)} requests")
        idx = np.sort(np.random.default_rng(seed).choice(len(self), size=int(num_requests), replace=False))
        picked = [self.requests[i] for i in idx]
        return self._replace(Request(k, r.prompt_len, r.output_len, r.arrival_time) for k, r in enumerate(picked))

    def with_poisson_arrivals(self, rate: float, seed: int | None) -> Trace:
        """The same requests, in the same order, with arrival times from
        :func:`poisson_arrivals` (``rate`` in requests/s; raises as it does)."""
        times = poisson_arrivals(len(self), rate, seed)
        return self._replace(Request(r.request_id, r.prompt_len, r.output_len, float(t))
                             for r, t in zip(self.requests, times))

    @property
    def mean_prompt_len(self) -> float:
        """Mean prompt length in tokens (NaN for an empty trace)."""
        return float(np.mean([r.prompt_len for r in self.requests])) if self.requests else math.nan

    @property
    def mean_output_len(self) -> float:
        """Mean output length in tokens (NaN for an empty trace)."""
        return float(np.mean([r.output_len for r in self.requests])) if self.requests else math.nan

    def to_frame(self) -> pd.DataFrame:
        """One row per request: ``request_id``, ``prompt_len``, ``output_len`` (int64, tokens),
        ``arrival_time`` (float64, seconds)."""
        return pd.DataFrame({
            "request_id": np.array([r.request_id for r in self.requests], dtype=np.int64),
            "prompt_len": np.array([r.prompt_len for r in self.requests], dtype=np.int64),
            "output_len": np.array([r.output_len for r in self.requests], dtype=np.int64),
            "arrival_time": np.array([r.arrival_time for r in self.requests], dtype=np.float64),
        })

    def save_csv(self, path: str | Path, *, comments: Sequence[str] = (),
                 include_arrival_time: bool | None = None) -> Path:
        """Write ``prompt_len,output_len[,arrival_time]`` rows, after ``# `` comment lines
        (provenance). Arrival times are written when any is non-zero unless told otherwise.
        The output is byte-identical for the same trace. Returns the path; :func:`load_trace`
        reads it back."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if include_arrival_time is None:
            include_arrival_time = any(r.arrival_time != 0.0 for r in self.requests)
        lines = [f"# {c}".rstrip() for text in comments for c in str(text).splitlines()]
        if include_arrival_time:
            lines.append("prompt_len,output_len,arrival_time")
            lines += [f"{r.prompt_len},{r.output_len},{r.arrival_time!r}" for r in self.requests]
        else:
            lines.append("prompt_len,output_len")
            lines += [f"{r.prompt_len},{r.output_len}" for r in self.requests]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path


def _clip(line: str, limit: int = 80) -> str:
    """``repr(line)``, cut to about ``limit`` characters for an error message."""
    return repr(line) if len(line) <= limit else repr(line[:limit]) + f" ... ({len(line)} characters)"


def load_trace(path: str | Path, *, name: str | None = None) -> Trace:
    """Read a length-only trace CSV (e.g. ``data/sharegpt_lengths.csv``).

    Format: optional ``#`` comment lines (provenance, kept as ``Trace.source``) and blank lines,
    then a header with at least ``prompt_len`` and ``output_len`` (an ``arrival_time`` column in
    seconds is used when present; other columns are ignored), then one row per request.
    Lengths must be integers >= 1 tokens.

    Raises:
        FileNotFoundError: no such file.
        TraceFormatError (a ValueError): missing column, wrong field count (e.g. a truncated
            last line), non-integer or non-positive length, bad arrival time, or no rows; the
            message names the file and the 1-based line number.
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
                              arrival_times=arrivals if ia is not None else None)
