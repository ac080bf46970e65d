"""Traces by name: the committed real traces, the synthetic one, or a user's file (§6.1, §6.4, §6.5).

The committed length-only traces live in the project's ``data/`` folder, which the package
installs as ``paged.data`` (:func:`~paged.workloads.package_data.data_path`). Each real trace is committed twice, counted with each
built-in tokenizer: ``<stem>.csv`` with cl100k, ``<stem>_gpt2.csv`` with GPT-2's BPE (OPT's, the
paper's); ``get_trace(..., tokenizer=)`` picks one. ``data/README.md`` says where each came from.
"""

from __future__ import annotations

import numbers
import os
from functools import lru_cache
from pathlib import Path

from paged.workloads.loader import load_json_trace
from paged.workloads.package_data import counted_file_name, data_path
from paged.workloads.reweight import SHAREGPT_PAPER_MEANS, tilted_sample
from paged.workloads.synthetic import alpaca_like
from paged.workloads.tokenizers import canonical_tokenizer
from paged.workloads.trace import Trace
from paged.workloads.trace_csv import load_trace
from paged.workloads.trace_names import NAMED_TRACES

__all__ = ["NAMED_TRACES", "data_path", "get_trace", "trace_file"]


@lru_cache(maxsize=16)
def _cached_trace(path: str, mtime_ns: int) -> Trace:
    """A committed length trace, read once per modification time (sweeps load it many times)."""
    return load_trace(path)


@lru_cache(maxsize=2)
def _fig11_sharegpt(tokenizer: str) -> Trace:
    """The ``"sharegpt"`` pairs length-tilted to the paper's Fig. 11 means (seed 0), built once."""
    path = data_path(trace_file("sharegpt", tokenizer))
    return tilted_sample(_cached_trace(str(path), path.stat().st_mtime_ns), *SHAREGPT_PAPER_MEANS, seed=0)


#: §6.4's prefix lengths (LLaMA-13B's tokens): the 1-shot and 5-shot prefixes of 80 and 341 tokens.
PAPER_PREFIX_TOKENS = {"wmt16-1shot": 80, "wmt16-5shot": 341}


def _paper_prefix(name: str, tokenizer: str) -> Trace:
    """``name``'s requests with the shared prefix at the paper's length (:data:`PAPER_PREFIX_TOKENS`), each
    request's own tokens after it unchanged: what Fig. 16 would serve with the paper's prompts' prefixes."""
    path = data_path(trace_file(name, tokenizer))
    base = _cached_trace(str(path), path.stat().st_mtime_ns)
    prefix = PAPER_PREFIX_TOKENS[name]
    return Trace.from_lengths([r.prompt_len - r.prefix_len + prefix for r in base], [r.output_len for r in base],
                              prefix_lens=[prefix] * len(base), name=f"{name}-paper-prefix",
                              source=f"{base.source}; shared prefix set to the paper's {prefix} tokens (§6.4)")


def trace_file(name: str, tokenizer: str = "cl100k") -> str:
    """File name (in ``paged.data``) of the named trace counted with ``tokenizer``
    (``"gpt2"``/``"opt"`` or ``"cl100k"``).

    Raises:
        ValueError: an unknown or synthetic name, or a tokenizer the committed files were not counted with.
    """
    stem = NAMED_TRACES.get(name)
    if stem is None:
        raise ValueError(f"no committed file for trace {name!r}: the named real traces are "
                         f"{sorted(k for k, v in NAMED_TRACES.items() if v)}")
    tok = canonical_tokenizer(tokenizer)
    if tok not in ("gpt2", "cl100k"):
        raise ValueError(f"the committed traces are counted with 'gpt2' (alias 'opt') and 'cl100k', not "
                         f"{tokenizer!r}; to count with another tokenizer, load the dataset file itself")
    return counted_file_name(stem, tok)


def get_trace(trace: str | Path, num_requests: int | None = None, *, seed: int = 0,
              rate: float | None = None, tokenizer: str | os.PathLike = "cl100k") -> Trace:
    """A trace by name or path, sampled and with arrival times.

    Args:
        trace: a name of :data:`NAMED_TRACES` (``"sharegpt"``, ``"sharegpt-chat"``, ``"alpaca"``,
            ``"alpaca-bare"``, ``"wmt16-1shot"``, ``"wmt16-5shot"``: committed real traces;
            ``"alpaca-synthetic"``: lognormal lengths with the paper's means; ``"sharegpt-fig11"``:
            the ``"sharegpt"`` pairs resampled with replacement, length-weighted to the paper's Fig. 11
            means, :func:`~paged.workloads.reweight.tilted_sample`, seed 0, as many as ``"sharegpt"``
            has: a sensitivity input, not the paper's trace; ``"wmt16-1shot-paper-prefix"``,
            ``"wmt16-5shot-paper-prefix"``: the WMT16 requests with the shared prefix at the paper's
            80 / 341 tokens, each request's own tokens unchanged), a path to a
            length CSV, or a path to a ShareGPT or Alpaca JSON file (tokenized, then cached:
            :mod:`paged.workloads.loader`).
        num_requests: requests to sample (without replacement, by ``seed``, original order kept);
            None keeps all (for ``"alpaca-synthetic"`` it defaults to 1,000).
        seed: seed for sampling, synthetic lengths and arrivals.
        rate: request rate (requests/s) of Poisson arrivals (``inf``: all at t = 0). None (the
            default) keeps the trace's own times: a CSV with an ``arrival_time`` column keeps
            them, any other trace has every request at t = 0. ``Trace.arrivals`` says which.
        tokenizer: which committed counts of a named real trace to use, ``"gpt2"`` (alias
            ``"opt"``: GPT-2's BPE, the paper's OPT models) or ``"cl100k"`` (default); for a JSON
            path, the tokenizer to count with (any of :func:`~paged.workloads.tokenizers.count_tokens`).
            Ignored for a length CSV (already counted) and ``"alpaca-synthetic"``.

    Raises:
        ValueError: for an unknown name or tokenizer, a bad count, rate or seed; TypeError for a
            trace that is neither a name nor a path;
        FileNotFoundError: for a missing path.
    """
    if not isinstance(trace, (str, os.PathLike)):
        raise TypeError(f"trace must be a trace name or a path, got {trace!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be an integer ≥ 0, got {seed!r}")
    key = str(trace).lower()
    if key == "alpaca-synthetic":
        base = alpaca_like(num_requests or 1000, seed)
    elif key == "sharegpt-fig11":
        base = _fig11_sharegpt(canonical_tokenizer(tokenizer))
    elif key.endswith("-paper-prefix") and key in NAMED_TRACES:
        base = _paper_prefix(key.removesuffix("-paper-prefix"), tokenizer)
    elif key in NAMED_TRACES:
        path = data_path(trace_file(key, tokenizer))
        base = _cached_trace(str(path), path.stat().st_mtime_ns)
    else:
        path = Path(trace)
        if path.is_dir() or not str(trace):
            raise ValueError(f"trace {str(trace)!r} is a directory or empty: give a trace name "
                             f"({', '.join(sorted(NAMED_TRACES))}) or a CSV / ShareGPT / Alpaca JSON file")
        if not path.exists():
            raise FileNotFoundError(
                f"trace {str(trace)!r} is neither a file nor one of {sorted(NAMED_TRACES)}"
            )
        base = load_json_trace(path, tokenizer) if path.suffix.lower() == ".json" else load_trace(path)
    if num_requests is not None and key != "alpaca-synthetic":
        try:
            base = base.sample(num_requests, seed)
        except ValueError as err:  # too few requests: name the file they came from
            raise ValueError(f"{trace}: {err}" if key not in NAMED_TRACES else str(err)) from None
    return base if rate is None else base.with_poisson_arrivals(rate, seed)
