"""The Alpaca workload (§6.1, Fig. 11b): real Stanford Alpaca instructions and their answers.

The file is a JSON list of ``{"instruction", "input", "output"}`` records (Stanford Alpaca's
``alpaca_data.json`` and samples of it). A request's prompt is the instruction with its input in
a stated prompt format (:data:`PROMPT_FORMATS`), its output the reference ``output``:

* ``"alpaca"`` (default): Stanford Alpaca's own training prompt (``PROMPT_DICT`` of the
  stanford_alpaca repository's ``train.py``), ``prompt_input`` for a record with an input and
  ``prompt_no_input`` without; ~28 tokens of fixed text around the instruction.
* ``"bare"``: the instruction alone, or the instruction, a newline and the input.

The paper's mean prompt (19.31 tokens, OPT's tokenizer) is close to the bare format's, far from
the template's; it does not say which it used (``data/README.md`` has both, measured).

Unlike the ShareGPT file, an Alpaca file is complete: a file cut mid-record is refused.
Tokenizing goes through :mod:`paged.workloads.loader` (``datasets``, cached).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from paged.workloads.filters import length_filter
from paged.workloads.json_records import position, read_json_list
from paged.workloads.trace import Trace

__all__ = ["AlpacaFormatError", "AlpacaLoadReport", "PROMPT_FORMATS", "alpaca_texts", "alpaca_trace",
           "read_alpaca_records"]

#: Prompt formats: name -> (format with an input, format without one); ``{instruction}``, ``{input}``.
PROMPT_FORMATS: dict[str, tuple[str, str]] = {
    "alpaca": (
        "Below is an instruction that describes a task, paired with an input that provides further context. "
        "Write a response that appropriately completes the request.\n\n"
        "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:",
        "Below is an instruction that describes a task. "
        "Write a response that appropriately completes the request.\n\n"
        "### Instruction:\n{instruction}\n\n### Response:",
    ),
    "bare": ("{instruction}\n{input}", "{instruction}"),
}
_FIELDS = ("instruction", "input", "output")


class AlpacaFormatError(ValueError):
    """An Alpaca file is malformed or cut off; the message names the file and the position."""


@dataclass(slots=True)
class AlpacaLoadReport:
    """What an Alpaca load read, dropped and kept (attached to the trace as ``trace.report``).

    Attributes:
        path: the JSON file read.
        records_read: records in the file.
        records_with_input: records whose ``input`` is not empty (they use the with-input format).
        prompt_format: a key of :data:`PROMPT_FORMATS`.
        tokenizer: tokenizer used for the counts.
        candidates: requests before the length filters (one per record).
        requests_dropped: filter -> count, each request under the FIRST filter it fails
            (prompt_too_short, output_too_short, prompt_too_long, total_too_long).
        num_requests: requests in the trace.
    """

    path: str
    records_read: int
    records_with_input: int
    prompt_format: str
    tokenizer: str = ""
    candidates: int = 0
    requests_dropped: dict[str, int] = field(default_factory=dict)
    num_requests: int = 0

    def summary(self) -> str:
        """One paragraph in words, for logs and CSV provenance headers."""
        return (f"{self.path}: {self.records_read} records ({self.records_with_input} with an input); "
                f"prompt format {self.prompt_format!r}, tokenizer={self.tokenizer}; candidates {self.candidates}, "
                f"dropped by filter {self.requests_dropped}; requests {self.num_requests}")


def _record_problem(record: Any) -> str | None:
    if not isinstance(record, dict):
        return f"is not an object with the fields {list(_FIELDS)}"
    for name in _FIELDS:
        if not isinstance(record.get(name), str):
            return f"field {name!r} is {'missing' if name not in record else type(record[name]).__name__}, not a string"
    return None


def read_alpaca_records(path: str | Path) -> list[dict[str, str]]:
    """Parse an Alpaca JSON list, checking every record.

    Cost: O(file size) (2 MB for the 5,000-record sample: ~30 ms).

    Raises:
        FileNotFoundError: no such file (named).
        AlpacaFormatError: not UTF-8, not a JSON list, malformed JSON, the file cut off
            mid-record (names the record and position), a record without string
            ``instruction``/``input``/``output`` fields, or no records at all.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Alpaca file not found: {path}")
    records, cut_at, text = read_json_list(path, check=_record_problem, error=AlpacaFormatError)
    if cut_at is not None:
        raise AlpacaFormatError(f"{path}: the file is cut off (truncated) at {position(text, cut_at)}, after "
                                f"{len(records)} complete records; an Alpaca file must be a closed JSON list")
    if not records:
        raise AlpacaFormatError(f"{path}: the JSON list holds no records")
    return records


def alpaca_texts(records: list[dict[str, str]], prompt_format: str = "alpaca") -> list[list[str]]:
    """``[prompt, output]`` texts of each record in ``prompt_format`` (a key of :data:`PROMPT_FORMATS`).

    Raises:
        ValueError: an unknown prompt format.
    """
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"unknown Alpaca prompt format {prompt_format!r}: give one of {sorted(PROMPT_FORMATS)}")
    with_input, no_input = PROMPT_FORMATS[prompt_format]
    return [[(with_input if r["input"] else no_input).format(instruction=r["instruction"], input=r["input"]),
             r["output"]] for r in records]


def alpaca_trace(report: AlpacaLoadReport, lens: list[np.ndarray], *, min_prompt_len: int = 4,
                 min_output_len: int = 4, max_prompt_len: int | None = 1024, max_total_len: int | None = 2048,
                 name: str = "alpaca") -> Trace:
    """The trace of one request per record from ``lens`` (per record: int64 ``[prompt, output]``
    token counts), after the length filters (tokens; None disables a maximum), in file order.

    Raises:
        ValueError: no request left after the filters (the message has the file and the counts).
    """
    p = np.array([int(x[0]) for x in lens], dtype=np.int64)
    o = np.array([int(x[1]) for x in lens], dtype=np.int64)
    limits = {"min_prompt_len": min_prompt_len, "min_output_len": min_output_len,
              "max_prompt_len": max_prompt_len, "max_total_len": max_total_len}
    keep, report.requests_dropped = length_filter(p, o, limits)
    report.candidates = len(p)
    report.num_requests = int(keep.sum())
    if report.num_requests == 0:
        raise ValueError(f"no Alpaca requests left after the filters {limits}: {report.summary()}")
    return Trace.from_lengths(p[keep], o[keep], name=name, report=report,
                              source=f"Alpaca ({report.summary()}); filters {limits}")
