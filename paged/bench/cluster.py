"""A notebook's simulations on a local Dask or Ray cluster against joblib's default processes.

Run: ``python -m paged.bench.cluster`` (``make bench-cluster``). Each round runs the notebook
(default ``03_throughput`` with a shorter set of its paper-length runs, :data:`PARAMETERS`) once per
backend, in an order that rotates from round to round: ``loky`` (the default: the notebook's
``workers`` processes), then ``dask`` and ``ray`` (a local cluster of ``--workers`` processes on
127.0.0.1, started before the notebook and named to its kernel as ``make nb ... ARGS='--backend
dask'`` does: :func:`paged.experiments.notebook.jobs.cluster_for_children`). It prints, per
backend, the median and range of the notebook's wall time (kernel start to last cell) and of the
cluster's start, the per-round ratio default ÷ backend, and the load average before and after.
On one machine a cluster has no more cores than joblib's processes: the ratio measures the
backends' overhead; a cluster with more cores divides the simulations' share of the notebook's time.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from paged.bench import bench_parser
from paged.cli import positive_int, run_command

#: Notebook 03 with a tenth of the paper's trace length, one model: about a minute on 2 cores.
PARAMETERS = {"models": ["opt-13b"], "traces": ["sharegpt", "alpaca-bare"], "curve_fractions": [0.5],
              "thresholds": [0.2], "duration_scale": {"sharegpt": 0.1, "alpaca-bare": 0.1, "sharegpt-chat": 0.1},
              "cpu_scales": [2.0], "saturated_requests": 1000, "block_sizes": [8, 16, 32, 64]}


def _load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_once(notebook: Path, backend: str, workers: int, parameters: dict) -> dict:
    """One run of ``notebook`` with its simulations on ``backend``: ``{"start_s", "run_s"}`` (seconds
    to start the cluster, to run the notebook).

    Raises:
        RuntimeError: the notebook failed (its error's last line in the message).
    """
    from paged.experiments.notebook.execute import run_notebook
    from paged.experiments.notebook.jobs import cluster_for_children

    with tempfile.TemporaryDirectory(prefix="paged-bench-cluster-") as tmp:
        start = time.perf_counter()
        with cluster_for_children(backend, n_workers=workers):
            started = time.perf_counter()
            run = run_notebook(notebook, Path(tmp) / notebook.name, {**parameters, "workers": workers},
                               figures=Path(tmp) / "figures", runner="make bench-cluster")
            done = time.perf_counter()
    if run.error:
        raise RuntimeError(f"{notebook.name} on {backend}: {run.error}")
    return {"start_s": started - start, "run_s": done - started}


def main(argv: list[str] | None = None) -> None:
    """Print the timings and the ratios."""
    parser = bench_parser("paged.bench.cluster", __doc__)
    parser.add_argument("--notebook", default="notebooks/03_throughput.ipynb", help="the notebook to run")
    parser.add_argument("--backends", nargs="+", default=["loky", "dask", "ray"], choices=["loky", "dask", "ray"],
                        help="backends to time; the first is the baseline")
    parser.add_argument("--workers", type=positive_int, default=2, help="processes: joblib's and each cluster's")
    parser.add_argument("--rounds", type=positive_int, default=3, help="interleaved rounds")
    run_command(parser, _report, argv)


def _report(args) -> None:
    notebook = Path(args.notebook).resolve()
    if not notebook.is_file():
        raise FileNotFoundError(f"notebook {args.notebook!r} does not exist")
    parameters = PARAMETERS if notebook.stem == "03_throughput" else {}
    print(f"{notebook.name} {parameters or '(defaults)'}; {args.workers} workers, {args.rounds} rounds, "
          f"{os.cpu_count()} CPUs; load average before: {_load_average()}", flush=True)
    runs: dict[str, list[dict]] = {b: [] for b in args.backends}
    for r in range(args.rounds):
        order = args.backends[r % len(args.backends):] + args.backends[: r % len(args.backends)]
        for backend in order:
            runs[backend].append(run_once(notebook, backend, args.workers, parameters))
            print(f"round {r + 1} {backend:>4}: notebook {runs[backend][-1]['run_s']:6.1f} s, cluster start "
                  f"{runs[backend][-1]['start_s']:5.1f} s; load {_load_average()}", flush=True)
    base = args.backends[0]
    for backend, values in runs.items():
        run_s = [v["run_s"] for v in values]
        start_s = [v["start_s"] for v in values]
        line = (f"{backend:>4}: notebook median {statistics.median(run_s):6.1f} s [{min(run_s):.1f}-{max(run_s):.1f}], "
                f"cluster start {statistics.median(start_s):.1f} s")
        if backend != base:
            ratios = [b["run_s"] / v["run_s"] for b, v in zip(runs[base], values)]
            line += (f"; {base} ÷ {backend} median {statistics.median(ratios):.2f}× "
                     f"[{min(ratios):.2f}-{max(ratios):.2f}] (> 1: {backend} faster)")
        print(line)
    print(f"load average after: {_load_average()}")


if __name__ == "__main__":
    main()
