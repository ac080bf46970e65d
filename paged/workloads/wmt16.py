"""WMT16 English->German translation with a shared few-shot prefix (§6.4, Fig. 16).

Every request's prompt is the same few-shot prefix followed by one source sentence; the output is
the reference translation. The prompt format (the paper gives GPT-3's style, Fig. 10, not its
exact text):

* prefix, shared: ``"Translate English to German:\\n"`` then, per example pair, ``"{en} => {de}\\n"``;
* then the request's own part: ``"{source} =>"``; the model's output is ``" {reference}"``.

The k example pairs are newstest2016 lines drawn once with ``numpy.random.default_rng(0)``; the
1-shot prefix uses the first of the 5-shot prefix's pairs, and every line used as an example is
left out of the requests of both traces (so both serve the same 2,994 sentences). The committed
``data/wmt16_fewshot_examples.csv`` holds those 5 pairs (the only WMT16 text the project ships),
so :func:`wmt16_prefix` gives the prefix text without the test set.

Each :class:`~paged.workloads.trace.Request` carries ``prefix_len``, the prefix's tokens; the
prefix ends with a newline, so (checked for every request) the prompt's tokens are exactly the
prefix's tokens followed by the request's own.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from paged.workloads.filters import DEFAULT_LIMITS, length_filter
from paged.workloads.json_records import read_text
from paged.workloads.package_data import data_path
from paged.workloads.tokenizers import count_tokens
from paged.workloads.trace import Trace

__all__ = ["EXAMPLES_FILE", "INSTRUCTION", "MAX_SHOTS", "WMT16FormatError", "WMT16Report", "choose_example_lines",
           "fewshot_prefix", "read_parallel_text", "wmt16_examples", "wmt16_prefix", "wmt16_trace"]

INSTRUCTION = "Translate English to German:\n"
#: Shots of the largest prefix (§6.4 uses 1 and 5).
MAX_SHOTS = 5
#: The committed example pairs, in ``paged.data``.
EXAMPLES_FILE = "wmt16_fewshot_examples.csv"


class WMT16FormatError(ValueError):
    """The WMT16 text files are malformed or do not match; the message names the file(s)."""


@dataclass(slots=True)
class WMT16Report:
    """How a translation trace was built (attached as ``trace.report``).

    Attributes:
        shots: example pairs in the prefix.
        prefix_len: the shared prefix's tokens (every request's ``prefix_len``).
        tokenizer: tokenizer used for the counts.
        candidates: lines not used as examples (one candidate request each).
        requests_dropped: filter -> count (:func:`~paged.workloads.filters.length_filter`).
        num_requests: requests in the trace.
    """

    shots: int
    prefix_len: int
    tokenizer: str
    candidates: int
    requests_dropped: dict[str, int] = field(default_factory=dict)
    num_requests: int = 0

    def summary(self) -> str:
        """One line in words."""
        return (f"WMT16 en->de, {self.shots}-shot prefix of {self.prefix_len} tokens ({self.tokenizer}); "
                f"{self.candidates} candidate lines, dropped by filter {self.requests_dropped}; "
                f"requests {self.num_requests}")


def read_parallel_text(source: str | Path, target: str | Path) -> tuple[list[str], list[str]]:
    """The aligned lines of a source and a target file (line i goes with line i), newlines removed.

    Raises:
        FileNotFoundError: a missing file (named).
        WMT16FormatError: a file that is not UTF-8, has an empty line (named with its line number),
            or the two files' line counts differ (both named, with their counts).
    """
    sides = []
    for path in (Path(source), Path(target)):
        lines = read_text(path, "WMT16", WMT16FormatError).split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # the newline that ends the last line
        for i, line in enumerate(lines, start=1):
            if not line.strip():
                raise WMT16FormatError(f"{path}, line {i}: empty line (the two sides must be aligned sentence by "
                                       "sentence, one per line)")
        if not lines:
            raise WMT16FormatError(f"{path}: no lines")
        sides.append([line.rstrip("\r") for line in lines])
    if len(sides[0]) != len(sides[1]):
        raise WMT16FormatError(f"mismatched WMT16 sides: {source} has {len(sides[0])} lines, {target} has "
                               f"{len(sides[1])}; line i of one must be the translation of line i of the other")
    return sides[0], sides[1]


def choose_example_lines(num_lines: int, shots: int = MAX_SHOTS, seed: int = 0) -> list[int]:
    """0-based line numbers of the example pairs: ``shots`` distinct lines drawn with
    ``numpy.random.default_rng(seed)``, in the order drawn (a k-shot prefix uses the first k).

    Raises:
        ValueError: fewer lines than ``shots`` + 1 (no request would be left).
    """
    if num_lines <= shots:
        raise ValueError(f"{num_lines} lines cannot give {shots} example pairs and at least one request")
    return [int(i) for i in np.random.default_rng(seed).choice(num_lines, size=shots, replace=False)]


def fewshot_prefix(pairs: list[tuple[str, str]]) -> str:
    """The shared prefix text: the instruction line, then ``"{en} => {de}\\n"`` per example pair."""
    return INSTRUCTION + "".join(f"{en} => {de}\n" for en, de in pairs)


def wmt16_trace(source_lines: list[str], target_lines: list[str], example_lines: list[int], shots: int,
                tokenizer: str = "gpt2", *, max_model_len: int = 2048, limits: dict | None = None,
                name: str | None = None, source: str = "") -> Trace:
    """The ``shots``-shot translation trace: one request per line not in ``example_lines``, in
    file order; prompt = the prefix of the first ``shots`` example pairs + ``"{source} =>"``,
    ``prefix_len`` = the prefix's tokens; output = the tokens of ``" {reference}"``; then the
    length filters (``limits``, default :data:`~paged.workloads.filters.DEFAULT_LIMITS`).

    Cost: two token counts per line (~3,000 lines: well under a second with cl100k).

    Raises:
        ValueError: ``shots`` not in 1..len(example_lines); the prefix not shorter than
            ``max_model_len`` (the model's context, tokens: no source sentence would fit); a
            prompt whose tokens are not the prefix's followed by its own (a tokenizer that
            merges across the prefix's final newline); or no request left after the filters.
    """
    if not 1 <= shots <= len(example_lines):
        raise ValueError(f"shots must be in 1..{len(example_lines)}, got {shots}")
    prefix = fewshot_prefix([(source_lines[i], target_lines[i]) for i in example_lines[:shots]])
    prefix_len = int(count_tokens([prefix], tokenizer)[0])
    if prefix_len >= max_model_len:
        raise ValueError(f"the {shots}-shot prefix is {prefix_len} tokens ({tokenizer}), not shorter than the "
                         f"model's context of {max_model_len} tokens: no source sentence fits; use fewer shots")
    used = set(example_lines)
    keep_lines = [i for i in range(len(source_lines)) if i not in used]
    queries = [f"{source_lines[i]} =>" for i in keep_lines]
    own = count_tokens(queries, tokenizer)
    whole = count_tokens([prefix + q for q in queries], tokenizer)
    bad = np.flatnonzero(whole != prefix_len + own)
    if len(bad):
        i = keep_lines[int(bad[0])]
        raise ValueError(f"line {i + 1}: with {tokenizer}, the prompt is {int(whole[bad[0]])} tokens, not the "
                         f"prefix's {prefix_len} + its own {int(own[bad[0]])}: the prefix is not a token prefix")
    prompts = prefix_len + own
    outputs = count_tokens([" " + target_lines[i] for i in keep_lines], tokenizer)
    limits = dict(DEFAULT_LIMITS if limits is None else limits)
    keep, dropped = length_filter(prompts, outputs, limits)
    if not keep.any():
        raise ValueError(f"no WMT16 requests left after the filters {limits} (dropped {dropped})")
    report = WMT16Report(shots, prefix_len, str(tokenizer), len(keep_lines), dropped, int(keep.sum()))
    return Trace.from_lengths(prompts[keep], outputs[keep], prefix_lens=[prefix_len] * report.num_requests,
                              name=name or f"wmt16_{shots}shot", report=report,
                              source=f"{source}; {report.summary()}" if source else report.summary())


def wmt16_examples() -> list[dict[str, str]]:
    """The committed example pairs (``data/wmt16_fewshot_examples.csv``): dicts with ``shot``
    (1..5, the order of use), ``line`` (1-based line in newstest2016), ``en`` and ``de``.

    Raises:
        FileNotFoundError: the package data lacks the file.
    """
    text = data_path(EXAMPLES_FILE).read_text(encoding="utf-8")
    body = "\n".join(line for line in text.split("\n") if not line.startswith("#"))
    return list(csv.DictReader(io.StringIO(body)))


def wmt16_prefix(shots: int) -> str:
    """The shared ``shots``-shot prefix text (1..5) built from the committed example pairs: what
    every request of ``"wmt16-<shots>shot"`` starts with.

    Raises:
        ValueError: ``shots`` outside 1..5.
    """
    examples = wmt16_examples()
    if not 1 <= shots <= len(examples):
        raise ValueError(f"shots must be in 1..{len(examples)}, got {shots}")
    return fewshot_prefix([(e["en"], e["de"]) for e in examples[:shots]])
