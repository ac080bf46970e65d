"""Traces by name: the committed real traces, the synthetic one, or a user's file (§6.1, §6.5).

The committed length-only traces live in the project's ``data/`` folder, which the package
installs as ``paged.data``; they are read through :mod:`importlib.resources`, so a wheel install
finds them with no checkout around.
"""

from __future__ import annotations

import math
from functools import lru_cache
from importlib import resources
from pathlib import Path

from paged.workloads.sharegpt import load_sharegpt
from paged.workloads.synthetic import alpaca_like
from paged.workloads.trace import Trace, load_trace

__all__ = ["NAMED_TRACES", "data_path", "get_trace"]


def data_path(name: str) -> Path:
    """Path of a file (or folder) of the package data ``paged.data`` (the project's ``data/``).

    Raises:
        FileNotFoundError: naming the file, if the package data does not hold it.
    """
    path = Path(str(resources.files("paged.data").joinpath(name)))
    if not path.exists():
        raise FileNotFoundError(f"package data file {name!r} not found (looked for {path})")
    return path


@lru_cache(maxsize=8)
def _cached_trace(path: str, mtime_ns: int) -> Trace:
    """A committed length trace, read once per modification time (sweeps load it many times)."""
    return load_trace(path)


#: Names accepted by :func:`get_trace`, and the committed files behind them (None: synthetic).
NAMED_TRACES: dict[str, str | None] = {
    "sharegpt": "sharegpt_lengths.csv",  # first-turn pairs (§6.1)
    "sharegpt-chat": "sharegpt_chat_lengths.csv",  # chatbot rounds (§6.5)
    "alpaca": None,  # synthetic: alpaca_like
}


def get_trace(trace: str | Path, num_requests: int | None = None, *, seed: int = 0,
              rate: float = math.inf) -> Trace:
    """A trace by name or path, sampled and with Poisson arrivals.

    Args:
        trace: ``"sharegpt"`` (committed real first-turn trace), ``"sharegpt-chat"`` (committed
            multi-turn chatbot trace, §6.5), ``"alpaca"`` (synthetic, the paper's means), a path
            to a length-only CSV, or a path to a ShareGPT-format JSON file (tokenized with cl100k).
        num_requests: requests to sample (without replacement, by ``seed``); None keeps all
            (for ``"alpaca"`` it defaults to 1,000).
        seed: seed for sampling, synthetic lengths and arrivals.
        rate: request rate (requests/s) of the Poisson arrivals; ``inf`` puts all at t = 0.

    Raises:
        ValueError: for an unknown name, a bad count or rate; FileNotFoundError for a missing path.
    """
    key = str(trace).lower()
    if key == "alpaca":
        base = alpaca_like(num_requests or 1000, seed)
    elif key in NAMED_TRACES:
        path = data_path(NAMED_TRACES[key])
        base = _cached_trace(str(path), path.stat().st_mtime_ns)
    else:
        path = Path(trace)
        if path.is_dir() or not str(trace):
            raise ValueError(f"trace {str(trace)!r} is a directory or empty: give a trace name "
                             f"({', '.join(sorted(NAMED_TRACES))}) or a CSV / ShareGPT JSON file")
        if not path.exists():
            raise FileNotFoundError(
                f"trace {str(trace)!r} is neither a file nor one of {sorted(NAMED_TRACES)}"
            )
        base = load_sharegpt(path) if path.suffix.lower() == ".json" else load_trace(path)
    if num_requests is not None and key != "alpaca":
        base = base.sample(num_requests, seed)
    return base.with_poisson_arrivals(rate, seed)
