"""Simulator speed against a baseline commit: the same measurements, interleaved, in fresh processes.

Run: ``python -m paged.bench.sim [--base REF] [--rounds 5]`` (``make bench-sim [BASE=REF]``). The
baseline's ``paged/`` is exported from git into a temporary directory; every round runs one process per
side, alternately, each importing its own ``paged``, so a busy machine slows both alike. Each measures:

* ``sharegpt_point_s``: a 1,000-request ShareGPT point per system (Fig. 12's five, OPT-13B, 2 req/s),
  summed; ``paged_point_s``: the paged one (target ≤ 2 s); ``token_steps_per_s``: their token-steps
  per second of wall time (target ≥ 1,000,000);
* ``stepwise_paged_point_s``: the paged point one iteration at a time: the reference path
  (:mod:`paged.sim.fast` switched off; a baseline without that switch: its loop without fast-forward);
* ``alpaca_knee_s``: 10 minutes of Alpaca at paged's knee (45 req/s), where a request arrives every
  iteration or two and nearly every decode is followed by a prefill or preempts;
* notebook 02's paper-length sequence-group points (latency cap 0.5 s/token): beam search of width 6 on
  paged (9.9 req/s) and Orca (Oracle) (6 req/s), 6 parallel samples (5 req/s), Fig. 16's WMT16 5-shot
  prefix on LLaMA-13B at 25 req/s, reserved and found by prefix caching;
* Fig. 15's runs recording the blocks held with and without sharing at every iteration (Alpaca at
  4 req/s, the full hour): beam width 6 and 6 samples.

Printed: per measurement the median over rounds and the spread on each side, the speed-up of the
medians (above 1: this checkout is faster) and the same ratio within each round; ``uptime`` before and
after. Only names both sides have are used (``simulate_point``, ``simulate``, ``long_trace``), and each
side's way to serve one trace (:class:`paged.sim.config.ServingConfig`, or a baseline's ``run_system``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from paged.bench import bench_parser
from paged.cli import positive_float, positive_int, run_command

__all__ = ["measure", "main", "export_package"]

#: What each measuring process runs (the same source against either side's ``paged``).
_WORKER = r"""
import json, sys, time
import paged
from paged.experiments.serving import SYSTEMS, simulate_point
from paged.experiments.serving.run_length import long_trace
from paged.sim.simulator import simulate
from paged.workloads import get_trace
try:  # this checkout: one settings object; the reference path is the fast path switched off
    from paged.sim import fast
    from paged.sim.config import ServingConfig

    def serve(trace, system):
        return ServingConfig(model="opt-13b", system=system).serve(trace)

    def stepwise(trace):
        with fast.disabled():
            config = ServingConfig(model="opt-13b", system="paged")
            simulate(trace, config.kv_manager(), config.cost_model(), record_memory=False,
                     **config.scheduler_settings())
except ImportError:  # a baseline before it: its own names
    from paged.experiments.serving import cost_model_for, run_system
    from paged.systems import make_kv_manager

    def serve(trace, system):
        return run_system(trace, system, cost_model_for("opt-13b", system, 16))

    def stepwise(trace):
        cost = cost_model_for("opt-13b", "paged", 16)
        simulate(trace, make_kv_manager("paged", cost.num_kv_slots), cost, record_memory=False, fast_forward=False)

num_requests, rate, seed = json.loads(sys.argv[1])
trace = get_trace("sharegpt", num_requests, seed=seed, rate=rate)
knee = long_trace("alpaca-bare", 45.0, 600.0, seed)
serve(trace[:2], "paged")  # the model presets and traces load outside the timings
out = {"paged": paged.__file__}
steps = wall = 0.0
for system in SYSTEMS:
    start = time.perf_counter()
    result = serve(trace, system)
    seconds = time.perf_counter() - start
    steps += result.batched_requests_sum
    wall += seconds
    if system == "paged":
        out["paged_point_s"] = seconds
        start = time.perf_counter()
        stepwise(trace)
        out["stepwise_paged_point_s"] = time.perf_counter() - start
out["sharegpt_point_s"] = wall
out["token_steps_per_s"] = steps / wall
start = time.perf_counter()
serve(knee, "paged")
out["alpaca_knee_s"] = time.perf_counter() - start
groups = {"beam6_paged_point_s": dict(system="paged", rate=9.9, beam_width=6),
          "beam6_oracle_point_s": dict(system="orca-oracle", rate=6.0, beam_width=6),
          "n6_paged_point_s": dict(system="paged", rate=5.0, n=6),
          "prefix_point_s": dict(model="llama-13b", trace="wmt16-5shot", system="paged", rate=25.0),
          "prefix_caching_point_s": dict(model="llama-13b", trace="wmt16-5shot", system="paged", rate=25.0,
                                         prefix_caching=True)}
for key, point in groups.items():
    point = {"model": "opt-13b", "trace": "alpaca-bare", **point}
    get_trace(point["trace"], None)  # the trace loads outside the timing
    start = time.perf_counter()
    simulate_point(duration_scale=1.0, latency_cap=0.5, record_sharing=False, seed=seed, **point)
    out[key] = time.perf_counter() - start
for key, point in {"sharing_beam6_point_s": dict(beam_width=6), "sharing_n6_point_s": dict(n=6)}.items():
    start = time.perf_counter()  # Fig. 15: every iteration's blocks with and without sharing recorded
    simulate_point("opt-13b", "alpaca-bare", "paged", 4.0, duration_scale=1.0, record_sharing=True, seed=seed,
                   **point)
    out[key] = time.perf_counter() - start
print(json.dumps(out))
"""

#: Measurements where smaller is better (seconds); the others are rates.
_SECONDS = ("paged_point_s", "sharegpt_point_s", "stepwise_paged_point_s", "alpaca_knee_s", "beam6_paged_point_s",
            "beam6_oracle_point_s", "n6_paged_point_s", "prefix_point_s", "prefix_caching_point_s",
            "sharing_beam6_point_s", "sharing_n6_point_s")


def export_package(ref: str, into: Path, repo: Path) -> Path:
    """Write commit ``ref``'s ``paged/`` package under ``into`` (``git archive``); returns ``into``.

    Raises:
        RuntimeError: if git cannot resolve ``ref`` or export it (git's message).
    """
    archive = subprocess.run(["git", "-C", str(repo), "archive", ref, "paged"], capture_output=True)
    if archive.returncode:
        raise RuntimeError(f"cannot export {ref!r}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def measure(package_root: Path, num_requests: int = 1000, rate: float = 2.0, seed: int = 0) -> dict:
    """One measuring process importing ``paged`` from ``package_root`` (module docstring): its figures
    (seconds, token-steps/s) and ``paged`` (the file imported).

    Raises:
        RuntimeError: if the process fails (its stderr).
    """
    env = {**os.environ, "PYTHONPATH": str(package_root)}
    proc = subprocess.run([sys.executable, "-c", _WORKER, json.dumps([num_requests, rate, seed])],
                          capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    if proc.returncode:
        raise RuntimeError(f"the measuring process for {package_root} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "load average: " + ", ".join(f"{v:.2f}" for v in os.getloadavg())


def main(argv: list[str] | None = None) -> None:
    """Print the interleaved comparison (module docstring)."""
    parser = bench_parser("paged.bench.sim", __doc__)
    parser.add_argument("--base", default="HEAD~1", help="baseline commit (default HEAD~1)")
    parser.add_argument("--rounds", type=positive_int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--num-requests", type=positive_int, default=1000, help="requests per ShareGPT point")
    parser.add_argument("--rate", type=positive_float, default=2.0, help="ShareGPT request rate (requests/s)")
    run_command(parser, _report, argv)


def _report(args) -> None:
    repo = Path(__file__).resolve().parents[2]
    rev = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", args.base], capture_output=True, text=True)
    if rev.returncode:
        raise RuntimeError(f"cannot resolve --base {args.base!r}: {rev.stderr.strip()}")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "paged"], capture_output=True,
                           text=True).stdout.strip()
    print(f"baseline {args.base} = {rev.stdout.strip()}; this checkout {head}{' + uncommitted changes' if dirty else ''}")
    print(_uptime())
    sides = {"baseline": [], "this": []}
    with tempfile.TemporaryDirectory(prefix="paged-bench-base-") as tmp:
        base_root = export_package(args.base, Path(tmp), repo)
        for r in range(args.rounds):
            order = (("baseline", base_root), ("this", repo)) if r % 2 == 0 else (("this", repo), ("baseline", base_root))
            for side, root in order:
                out = measure(root, args.num_requests, args.rate)
                if not out.pop("paged").startswith(str(root)):
                    raise RuntimeError(f"the {side} process imported another paged than {root}")
                sides[side].append(out)
            print(f"round {r + 1}/{args.rounds}: alpaca knee {sides['baseline'][-1]['alpaca_knee_s']:.2f} s vs "
                  f"{sides['this'][-1]['alpaca_knee_s']:.2f} s", flush=True)
    print(f"\n{'measurement':<24}{'baseline median [min–max]':>34}{'this median [min–max]':>34}"
          f"{'speed-up':>10}{'per round [min–max]':>22}")
    for key in sides["this"][0]:
        b = [m[key] for m in sides["baseline"]]
        t = [m[key] for m in sides["this"]]
        fmt = (lambda v: f"{v:.3f}") if key in _SECONDS else (lambda v: f"{v:,.0f}")
        if key in _SECONDS:
            ratio = statistics.median(b) / statistics.median(t)
            rounds = [x / y for x, y in zip(b, t)]
        else:
            ratio = statistics.median(t) / statistics.median(b)
            rounds = [y / x for x, y in zip(b, t)]
        print(f"{key:<24}{fmt(statistics.median(b)) + ' [' + fmt(min(b)) + '–' + fmt(max(b)) + ']':>34}"
              f"{fmt(statistics.median(t)) + ' [' + fmt(min(t)) + '–' + fmt(max(t)) + ']':>34}{ratio:>9.2f}×"
              f"{f'[{min(rounds):.2f}–{max(rounds):.2f}]':>22}")
    this = {k: statistics.median(m[k] for m in sides["this"]) for k in sides["this"][0]}
    print(f"\ntargets (this checkout): token-steps/s ≥ 1,000,000: "
          f"{'met' if this['token_steps_per_s'] >= 1e6 else 'NOT met'}; 1,000-request paged point ≤ 2 s: "
          f"{'met' if this['paged_point_s'] <= 2 else 'NOT met'}")
    print("speed-up: baseline ÷ this checkout of the median seconds (this ÷ baseline for token-steps/s), and "
          "the same ratio within each round (the two sides ran back to back); above 1: faster")
    print(_uptime())


if __name__ == "__main__":
    main()
