"""``python -m paged.bench.engine_profile``: the decode step cost per batch size and the per-op time shares.

The measurements are :func:`paged.experiments.nb05_engine.engine_profile.decode_step_cost` and
:func:`~paged.experiments.nb05_engine.engine_profile.op_time_shares` (method and caveats there).
"""

from __future__ import annotations

import pandas as pd

from paged.bench import bench_parser
from paged.cli import nonnegative_int, positive_int, run_command
from paged.experiments.nb05_engine.engine_profile import DEFAULT_MODEL, decode_step_cost, op_time_shares


def main(argv: list[str] | None = None) -> None:
    """CLI: print the decode step cost per batch size and the per-op time shares."""
    parser = bench_parser("paged.bench.engine_profile", __doc__)
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--num-requests", type=positive_int, default=64, help="requests for the op profile")
    parser.add_argument("--threads", type=nonnegative_int, default=1, help="torch threads (0: torch's default)")
    run_command(parser, _report, argv)


def _report(args) -> None:
    threads = args.threads or None
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(decode_step_cost(args.model, num_threads=threads).round(4).to_string(index=False))
        print(op_time_shares(args.model, num_requests=args.num_requests, num_threads=threads).round(3)
              .to_string(index=False))


if __name__ == "__main__":
    main()
