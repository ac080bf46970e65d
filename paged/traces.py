"""Named traces for notebooks and the command line: one call from a name to a ready trace.

``get_trace("sharegpt", 1000, seed=0, rate=2.0)`` samples 1,000 requests from the committed
real ShareGPT length trace and gives them Poisson arrivals at 2 requests/s.
"""

from __future__ import annotations

import math
from pathlib import Path

from paged.workloads import Trace, alpaca_like, load_sharegpt, load_trace

__all__ = ["DATA_DIR", "NAMED_TRACES", "get_trace"]

#: The project's data folder (committed length-only traces, the small model).
DATA_DIR = Path(__file__).resolve().parents[1] / "data"

#: Names accepted by :func:`get_trace`, and the committed files behind them.
NAMED_TRACES = {
    "sharegpt": DATA_DIR / "sharegpt_lengths.csv",
    "sharegpt-chat": DATA_DIR / "sharegpt_chat_lengths.csv",
    "alpaca": None,  # synthetic: paged.workloads.alpaca_like
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
        base = load_trace(NAMED_TRACES[key])
    else:
        path = Path(trace)
        if not path.exists():
            raise FileNotFoundError(
                f"trace {str(trace)!r} is neither a file nor one of {sorted(NAMED_TRACES)}"
            )
        base = load_sharegpt(path) if path.suffix.lower() == ".json" else load_trace(path)
    if num_requests is not None and key != "alpaca":
        base = base.sample(num_requests, seed)
    return base.with_poisson_arrivals(rate, seed)
