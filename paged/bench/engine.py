"""``python -m paged.bench.engine``: the real engine's throughput ratios (and, optionally, sharing).

Prints each system's tokens/s, requests/s, batch size and peak KV memory as ratios to the paged
engine, from :func:`paged.experiments.engine.throughput_comparison` (the systems, the workload
and the method are documented there).
"""

from __future__ import annotations

import time

import pandas as pd
import torch

from paged.bench import bench_parser
from paged.cli import nonnegative_int, positive_int, run_command, seed_int
from paged.experiments.engine import DEFAULT_MODEL, SYSTEMS, sharing_savings, throughput_comparison


def main(argv: list[str] | None = None) -> None:
    """CLI: print the throughput ratios (and optionally the sharing savings)."""
    parser = bench_parser("paged.bench.engine", __doc__)
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--num-requests", type=positive_int, default=128)
    parser.add_argument("--kv-cache-tokens", type=positive_int, default=8192, help="KV budget for every system (tokens)")
    parser.add_argument("--block-size", type=positive_int, default=16)
    parser.add_argument("--seed", type=seed_int, default=0)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--threads", type=nonnegative_int, default=1,
                        help="torch threads for every system (1: steady on a shared CPU; 0: torch's default)")
    parser.add_argument("--sharing", action="store_true", help="also measure Fig. 15 sharing savings")
    run_command(parser, _report, argv)


def _report(args) -> None:
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    df = throughput_comparison(args.model, num_requests=args.num_requests, kv_cache_tokens=args.kv_cache_tokens,
                               block_size=args.block_size, seed=args.seed, systems=args.systems.split(","),
                               num_threads=args.threads or None)
    cols = ["system", "tokens_per_s", "requests_per_s", "mean_batch_size", "max_batch_size", "peak_kv_bytes",
            "tokens_per_s_ratio", "requests_per_s_ratio", "mean_batch_size_ratio", "peak_kv_bytes_ratio"]
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(df[cols].round(3).to_string(index=False))
    if args.sharing:
        print(sharing_savings(args.model, block_size=args.block_size, seed=args.seed).round(3).to_string(index=False))
    print(f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
