"""Simulator speed: simulated token-steps per second and the wall time of one serving point.

Run: ``python -m paged.bench.sim``. Targets: ≥ 1,000,000 token-steps/s on one core, and
≤ 2 s for one 1,000-request ShareGPT point on OPT-13B (paged, 2 requests/s: Fig. 13's point).
Also the regime that costs the most in notebook 03: short Alpaca requests at paged's knee (OPT-13B,
45 requests/s), where a request arrives every iteration or two, so nearly every decode iteration
is followed by a prefill and runs of identical decodes (the fast-forward) are one iteration long.
A token-step is one sequence advanced by one token in one iteration (prefill or decode), i.e.
the sum over iterations of the sequences in the batch. Also prints the same point stepped one
iteration at a time (``fast_forward=False``), which gives identical results, for comparison.
"""

from __future__ import annotations

import os
import time

from paged.bench import bench_parser
from paged.cli import positive_float, positive_int, run_command
from paged.workloads import get_trace
from paged.experiments.serving.run_length import long_trace
from paged.experiments.serving import SYSTEMS, cost_model_for, run_system
from paged.sim.simulator import simulate
from paged.systems import make_kv_manager


def measure(num_requests: int = 1000, rate: float = 2.0, seed: int = 0) -> dict[str, float]:
    """Time one point per system and the paged point without fast-forward.

    Returns:
        ``paged_point_s`` (seconds, paged at ``rate``), ``token_steps_per_s`` (over all systems'
        points), ``paged_token_steps_per_s``, ``stepwise_paged_point_s``; ``alpaca_knee_s`` and
        ``alpaca_knee_token_steps_per_s`` (3 minutes of Alpaca arrivals at 45 requests/s, about 8,100
        requests, paged, OPT-13B).
    """
    trace = get_trace("sharegpt", num_requests, seed=seed, rate=rate)
    steps = wall = 0.0
    out: dict[str, float] = {}
    for system in SYSTEMS:
        cost = cost_model_for("opt-13b", system, 16)
        start = time.perf_counter()
        result = run_system(trace, system, cost)
        seconds = time.perf_counter() - start
        steps += result.batched_requests_sum
        wall += seconds
        if system == "paged":
            out["paged_point_s"] = seconds
            out["paged_token_steps_per_s"] = result.batched_requests_sum / seconds
            manager = make_kv_manager("paged", cost.num_kv_slots)
            start = time.perf_counter()
            simulate(trace, manager, cost, record_memory=False, fast_forward=False)
            out["stepwise_paged_point_s"] = time.perf_counter() - start
    out["token_steps_per_s"] = steps / wall
    knee = long_trace("alpaca-bare", 45.0, 180.0, seed)  # 3 minutes of arrivals: about 8,100 requests
    start = time.perf_counter()
    result = run_system(knee, "paged", cost_model_for("opt-13b", "paged", 16))
    out["alpaca_knee_s"] = time.perf_counter() - start
    out["alpaca_knee_token_steps_per_s"] = result.batched_requests_sum / out["alpaca_knee_s"]
    return out


def main(argv: list[str] | None = None) -> None:
    """Print the simulator figures and whether each target is met."""
    parser = bench_parser("paged.bench.sim", __doc__)
    parser.add_argument("--num-requests", type=positive_int, default=1000, help="requests per point")
    parser.add_argument("--rate", type=positive_float, default=2.0, help="request rate (requests/s)")
    run_command(parser, _report, argv)


def _report(args) -> None:
    get_trace("sharegpt", 10, seed=0, rate=1.0)  # load the trace and the model presets outside the timings
    cost_model_for("opt-13b", "paged", 16)
    r = measure(args.num_requests, args.rate)
    print(f"token-steps/s, all five systems   : {r['token_steps_per_s']:>12,.0f} "
          f"(target ≥ 1,000,000: {'met' if r['token_steps_per_s'] >= 1e6 else 'NOT met'})")
    print(f"token-steps/s, paged              : {r['paged_token_steps_per_s']:>12,.0f}")
    print(f"{args.num_requests}-request ShareGPT point, OPT-13B, paged @ {args.rate} req/s: "
          f"{r['paged_point_s']:.3f} s (target ≤ 2 s: {'met' if r['paged_point_s'] <= 2 else 'NOT met'})")
    print(f"same point stepped one iteration at a time: {r['stepwise_paged_point_s']:.3f} s")
    print(f"3 minutes of Alpaca arrivals at paged's knee (45 req/s, OPT-13B): {r['alpaca_knee_s']:.3f} s, "
          f"{r['alpaca_knee_token_steps_per_s']:,.0f} token-steps/s")
    print(f"load average: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
