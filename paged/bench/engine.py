"""``python -m paged.bench.engine``: the real engine's throughput ratios over interleaved rounds.

Runs :func:`paged.experiments.nb05_engine.engine.throughput_comparison` with ``--rounds`` (default 5) rounds in
one process, the systems interleaved (order rotated each round), and prints every round's tokens/s,
batch sizes and the machine's load, then the median and spread (min–max) of paged ÷ each system
(:func:`~paged.experiments.nb05_engine.engine.ratio_summary`), with ``uptime`` before and after. The systems,
the workload and the method are documented in :mod:`paged.experiments.nb05_engine.engine`. A shared machine
makes wall-clock ratios noisy: read the load columns beside them.
"""

from __future__ import annotations

import subprocess
import time

import pandas as pd
import torch

from paged.bench import bench_parser
from paged.cli import nonnegative_int, positive_int, run_command, seed_int
from paged.experiments.nb05_engine.engine import DEFAULT_MODEL, SYSTEMS, ratio_summary, sharing_savings, throughput_comparison


def main(argv: list[str] | None = None) -> None:
    """CLI: print the throughput ratios (and optionally the sharing savings)."""
    parser = bench_parser("paged.bench.engine", __doc__)
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--num-requests", type=positive_int, default=128)
    parser.add_argument("--kv-cache-tokens", type=positive_int, default=8192, help="KV budget for every system (tokens)")
    parser.add_argument("--block-size", type=positive_int, default=16)
    parser.add_argument("--seed", type=seed_int, default=0)
    parser.add_argument("--systems", default="paged,orca-max,hf-generate-batch",
                        help=f"comma-separated, of {', '.join(SYSTEMS)} (default: the ratios the README quotes)")
    parser.add_argument("--threads", type=nonnegative_int, default=1,
                        help="torch threads for every system (1: steady on a shared CPU; 0: torch's default)")
    parser.add_argument("--rounds", type=positive_int, default=5, help="interleaved rounds (≥ 5 for a median)")
    parser.add_argument("--preemption", choices=("recompute", "swap"), default="recompute",
                        help="the paged engine's preemption mode (paged-swap always swaps)")
    parser.add_argument("--swap-space", type=float, default=0.25,
                        help="swap space of swapping systems, fraction of the KV budget")
    parser.add_argument("--sharing", action="store_true", help="also measure Fig. 15 sharing savings")
    run_command(parser, _report, argv)


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        import os

        return "load average: " + ", ".join(f"{v:.2f}" for v in os.getloadavg())


def _report(args) -> None:
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    print(f"before: {_uptime()}", flush=True)
    df = throughput_comparison(args.model, num_requests=args.num_requests, kv_cache_tokens=args.kv_cache_tokens,
                               block_size=args.block_size, seed=args.seed, systems=args.systems.split(","),
                               num_threads=args.threads or None, rounds=args.rounds, preemption=args.preemption,
                               swap_space=args.swap_space)
    cols = ["round", "system", "seconds", "tokens_per_s", "mean_batch_size", "max_batch_size", "num_preemptions",
            "recomputed_share", "load_1min"]
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(df[[c for c in cols if c in df.columns]].round(3).to_string(index=False))
        if "paged" in set(df["system"]):
            print("\npaged ÷ system, tokens/s, over the rounds:")
            print(ratio_summary(df).round(3).to_string(index=False))
    print(f"after: {_uptime()}")
    if args.sharing:
        print(sharing_savings(args.model, block_size=args.block_size, seed=args.seed).round(3).to_string(index=False))
    print(f"({time.perf_counter() - start:.1f} s; the machine may be shared: see the load above)")


if __name__ == "__main__":
    main()
