"""Requests, traces and Poisson arrivals (paper §6.1): the workload every experiment serves.

A trace is only lengths and arrival times: ``prompt_len`` and ``output_len`` in tokens and
``arrival_time`` in seconds, exactly what the paper uses from its datasets ("only lengths are
used"), plus ``prefix_len``: how many of the prompt's first tokens are a prefix shared by every
request of the trace (the few-shot prompt of the §6.4 translation workload; 0 elsewhere). Traces
are built by the dataset loaders (:mod:`paged.workloads.loader`, :mod:`paged.workloads.wmt16`),
:func:`paged.workloads.alpaca_like` (synthetic) or :func:`~paged.workloads.trace_csv.load_trace`
(the committed CSV files under ``data/``). Import everything from :mod:`paged.workloads`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from numbers import Integral, Real
from pathlib import Path
from typing import Any, overload

import numpy as np
import pandas as pd

from paged.workloads.arrivals import poisson_arrivals

__all__ = ["Request", "Trace"]


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a trace (§6.1).

    Attributes:
        request_id: position-based id, unique within its trace (0, 1, ...).
        prompt_len: prompt length in tokens (>= 0).
        output_len: number of tokens the request generates (>= 0).
        arrival_time: arrival time in seconds from the start of the trace (finite, >= 0).
        prefix_len: tokens at the start of the prompt that every request of the trace shares (the
            few-shot prefix of §6.4; 0 when nothing is shared), ``0 <= prefix_len <= prompt_len``.
            A KV cache manager that shares prefixes can keep one copy of their KV blocks.

    Raises:
        TypeError: a length or id that is not an integer (bool rejected).
        ValueError: a negative length, a prefix longer than the prompt, or a negative /
            non-finite arrival time.
    """

    request_id: int
    prompt_len: int
    output_len: int
    arrival_time: float = 0.0
    prefix_len: int = 0

    def __post_init__(self) -> None:
        for name in ("request_id", "prompt_len", "output_len", "prefix_len"):
            value = getattr(self, name)
            if type(value) is not int:  # (a plain int skips the slower abstract-class checks)
                if isinstance(value, bool) or not isinstance(value, Integral):
                    raise TypeError(f"Request.{name} must be an integer, got {value!r}")
                value = int(value)
                object.__setattr__(self, name, value)
            if value < 0:
                raise ValueError(f"Request.{name} must be >= 0, got {value}")
        if self.prefix_len > self.prompt_len:
            raise ValueError(f"Request.prefix_len ({self.prefix_len} tokens) is longer than the prompt "
                             f"({self.prompt_len} tokens)")
        t = self.arrival_time
        if type(t) is not float and (isinstance(t, bool) or not isinstance(t, Real)) or not math.isfinite(t) or t < 0:
            raise ValueError(f"Request.arrival_time must be a finite number >= 0 s, got {t!r}")
        if type(t) is not float:
            object.__setattr__(self, "arrival_time", float(t))

    def with_arrival(self, request_id: int, arrival_time: float) -> Request:
        """The same lengths (prefix included) under a new id and arrival time (seconds)."""
        return Request(request_id, self.prompt_len, self.output_len, arrival_time, self.prefix_len)


@dataclass(frozen=True, slots=True)
class Trace(Sequence[Request]):
    """An ordered, immutable sequence of :class:`Request` plus provenance (§6.1).

    Supports ``len``, iteration and indexing (an int gives a Request, a slice a Trace).

    Attributes:
        requests: the requests, in order (a tuple).
        name: short name, e.g. ``"sharegpt"``.
        source: where the lengths came from (file, tokenizer, filters), free text.
        report: for traces built from a dataset file, its report
            (:class:`paged.workloads.sharegpt.ShareGPTLoadReport`,
            :class:`paged.workloads.alpaca.AlpacaLoadReport`: records read, whether the file was
            cut, what was dropped and why; :class:`paged.workloads.wmt16.WMT16Report`: the shared
            prefix and the filters); None for a trace read from a CSV.
        arrivals: how the arrival times were set, in words: ``"all at t = 0 s"``, ``"from the
            arrival_time column of FILE"`` (a timed CSV keeps its times) or ``"Poisson, R req/s,
            seed S"``.
    """

    requests: tuple[Request, ...]
    name: str = ""
    source: str = ""
    report: Any = field(default=None, compare=False)
    arrivals: str = "all at t = 0 s"

    def __post_init__(self) -> None:
        reqs = tuple(self.requests)
        for r in reqs:
            if not isinstance(r, Request):
                raise TypeError(f"Trace holds Request objects, got {type(r).__name__}")
        object.__setattr__(self, "requests", reqs)

    @classmethod
    def from_lengths(cls, prompt_lens: Iterable[int], output_lens: Iterable[int], *,
                     name: str = "", source: str = "", report: Any = None,
                     arrival_times: Iterable[float] | None = None, prefix_lens: Iterable[int] | None = None,
                     arrivals: str | None = None) -> Trace:
        """Build a trace from parallel length lists (tokens); ids are 0..n-1, arrivals 0.0 s
        unless ``arrival_times`` (seconds) is given (then ``arrivals`` says where they came from),
        shared prefixes 0 unless ``prefix_lens`` (tokens) is given. O(n).

        Raises:
            ValueError: the lists differ in length, or a value is out of range (see :class:`Request`).
        """
        p, o = list(prompt_lens), list(output_lens)
        a = [0.0] * len(p) if arrival_times is None else list(arrival_times)
        x = [0] * len(p) if prefix_lens is None else list(prefix_lens)
        if not len(p) == len(o) == len(a) == len(x):
            raise ValueError(f"length lists differ: {len(p)} prompts, {len(o)} outputs, {len(a)} arrivals, "
                             f"{len(x)} prefixes")
        reqs = tuple(Request(i, int(pl), int(ol), float(t), int(xl))
                     for i, (pl, ol, t, xl) in enumerate(zip(p, o, a, x)))
        if arrivals is None:
            arrivals = "all at t = 0 s" if arrival_times is None else "given arrival times"
        return cls(reqs, name=name, source=source, report=report, arrivals=arrivals)

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
            return self._replace(self.requests[index])
        return self.requests[index]

    def _replace(self, requests: Iterable[Request], arrivals: str | None = None) -> Trace:
        return Trace(tuple(requests), name=self.name, source=self.source, report=self.report,
                     arrivals=self.arrivals if arrivals is None else arrivals)

    @property
    def is_timed(self) -> bool:
        """True when any request arrives after t = 0 s (the trace carries its own arrival times)."""
        return any(r.arrival_time != 0.0 for r in self.requests)

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
        return self._replace(r.with_arrival(k, r.arrival_time) for k, r in enumerate(picked))

    def with_poisson_arrivals(self, rate: float, seed: int | None) -> Trace:
        """The same requests (lengths and shared prefixes), in the same order, with arrival times
        from :func:`poisson_arrivals` (``rate`` in requests/s; raises as it does); any earlier
        times are replaced, and :attr:`arrivals` says so."""
        times = poisson_arrivals(len(self), rate, seed)
        how = "all at t = 0 s (rate inf)" if math.isinf(rate) else f"Poisson, {rate:g} req/s, seed {seed}"
        return self._replace((r.with_arrival(r.request_id, float(t)) for r, t in zip(self.requests, times)),
                             arrivals=how)

    @property
    def mean_prompt_len(self) -> float:
        """Mean prompt length in tokens (NaN for an empty trace)."""
        return float(np.mean([r.prompt_len for r in self.requests])) if self.requests else math.nan

    @property
    def mean_output_len(self) -> float:
        """Mean output length in tokens (NaN for an empty trace)."""
        return float(np.mean([r.output_len for r in self.requests])) if self.requests else math.nan

    @property
    def has_shared_prefix(self) -> bool:
        """True when any request has a shared prefix (``prefix_len > 0``)."""
        return any(r.prefix_len for r in self.requests)

    def to_frame(self) -> pd.DataFrame:
        """One row per request: ``request_id``, ``prompt_len``, ``output_len``, ``prefix_len``
        (int64, tokens), ``arrival_time`` (float64, seconds)."""
        return pd.DataFrame({
            "request_id": np.array([r.request_id for r in self.requests], dtype=np.int64),
            "prompt_len": np.array([r.prompt_len for r in self.requests], dtype=np.int64),
            "output_len": np.array([r.output_len for r in self.requests], dtype=np.int64),
            "prefix_len": np.array([r.prefix_len for r in self.requests], dtype=np.int64),
            "arrival_time": np.array([r.arrival_time for r in self.requests], dtype=np.float64),
        })

    def save_csv(self, path: str | Path, *, comments: Sequence[str] = (),
                 include_arrival_time: bool | None = None) -> Path:
        """Write ``prompt_len,output_len[,prefix_len][,arrival_time]`` rows, after ``# `` comment
        lines (provenance). Shared prefixes are written when any is non-zero, arrival times when
        any is non-zero unless told otherwise. The output is byte-identical for the same trace.
        Returns the path; :func:`load_trace` reads it back (:func:`paged.workloads.trace_csv.load_trace`)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if include_arrival_time is None:
            include_arrival_time = self.is_timed
        columns = ["prompt_len", "output_len"] + ["prefix_len"] * self.has_shared_prefix \
            + ["arrival_time"] * bool(include_arrival_time)
        lines = [f"# {c}".rstrip() for text in comments for c in str(text).splitlines()]
        lines.append(",".join(columns))
        lines += [",".join(str(getattr(r, c)) if c != "arrival_time" else repr(r.arrival_time) for c in columns)
                  for r in self.requests]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path
