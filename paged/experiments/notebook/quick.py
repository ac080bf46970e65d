"""``make quick``: every notebook with small parameters, to check an installation in about two minutes.

:data:`QUICK_PARAMETERS` holds one small parameter set per notebook; the notebook tests
(``tests/notebooks``) run the same sets. A quick run is a smoke test of the installation (every
notebook's code path, its figures and a clean executed notebook), not a result: its figures come
from a few hundred requests and short runs, and are written to ``build/quick/figures/``, never to
``figures/``.

Command line (run from the checkout; ``make quick`` does)::

    python -m paged.experiments.notebook.quick [--notebooks notebooks] [--out build/quick] [--workers 2]

It prints one line per notebook (seconds, figures written, problems) and exits with status 1
when a notebook failed or its executed copy is not clean
(:func:`paged.experiments.notebook.outputs.output_problems`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

__all__ = ["QUICK_PARAMETERS", "quick_jobs", "run_quick", "main"]

#: Small parameters per notebook (by file stem): seconds each, every figure still written (04: one
#: of the paper's points, batch 8 at context 64, so its "paper vs this run" table has a row).
QUICK_PARAMETERS: dict[str, dict] = {
    "00_tour": {"sched_num_requests": 6},
    "01_fragmentation": {"num_requests": 300, "block_sizes": [8, 16], "kv_cache_gib": 2.0},
    "02_sharing": {"num_requests": 40, "saturated_requests": 200, "saving_num_requests": 40, "widths": [2],
                   "systems": ["paged", "orca-oracle"], "rate_fractions": [0.5, 1.0], "saving_traces": ["alpaca"],
                   "engine_num_requests": 2, "demo_num_requests": 4, "demo_max_tokens": 2, "demo_rounds": 1,
                   "workers": 1},
    "03_throughput": {"models": ["opt-13b"], "traces": ["sharegpt"], "curve_fractions": [0.5], "thresholds": [0.2],
                      "duration_scale": {"sharegpt": 0.02, "alpaca": 0.02, "sharegpt-chat": 0.02},
                      "cpu_scales": [2.0], "saturated_requests": 200, "block_sizes": [8, 16], "workers": 1},
    "04_kernel": {"device": "cpu", "context_lens": [16, 64], "batch_sizes": [8], "num_heads": 8,
                  "num_kv_heads": 8, "head_size": 64, "repeats": 1},
    "05_engine": {"num_requests": 6, "kv_cache_tokens": 2048, "rounds": 1, "validation_requests": 6,
                  "validation_fractions": [0.5], "sharing_num_requests": 2, "sharing_max_tokens": 4, "widths": [2],
                  "profile_batch_sizes": [1, 2]},
    "06_today": {"models": ["opt-13b", "llama-3.1-8b", "gemma-2b"], "pairs": ["opt-13b", "gemma-2b@1xl4:2048"],
                 "long_pairs": {"gemma-2b@1xl4:8192": "sharegpt-8k"}, "breakdown_requests": 100, "duration_scale": 0.002,
                 "guess_duration": 5.0, "saturated_requests": 60, "rel_tol": 0.2, "sensitivity_pairs": ["gemma-2b@1xl4:2048"],
                 "workers": 1},
}


def quick_jobs(notebooks_dir: str | Path, out_dir: str | Path) -> list[dict]:
    """One :func:`paged.experiments.notebook.sweep.run_notebook` job per notebook of ``notebooks_dir``
    (``NN_*.ipynb``): its quick parameters, executed into ``out_dir/<name>.ipynb``, figures into
    ``out_dir/figures``. Longest first, so that two at once finish together.

    Raises:
        FileNotFoundError: no notebook in ``notebooks_dir``.
        KeyError: a notebook without quick parameters (add its set to :data:`QUICK_PARAMETERS`).
    """
    notebooks = sorted(Path(notebooks_dir).resolve().glob("[0-9][0-9]_*.ipynb"))
    if not notebooks:
        raise FileNotFoundError(f"no notebooks (NN_name.ipynb) in {str(notebooks_dir)!r}")
    missing = [nb.stem for nb in notebooks if nb.stem not in QUICK_PARAMETERS]
    if missing:
        raise KeyError(f"no quick parameters for {missing}: add them to QUICK_PARAMETERS")
    out = Path(out_dir).resolve()
    order = ("05_engine", "02_sharing", "03_throughput", "06_today", "01_fragmentation", "04_kernel", "00_tour")
    notebooks.sort(key=lambda nb: order.index(nb.stem) if nb.stem in order else -1)
    return [{"notebook": str(nb), "output": str(out / nb.name),
             "parameters": {**QUICK_PARAMETERS[nb.stem], "output_dir": str(out / "figures")}} for nb in notebooks]


def run_quick(notebooks_dir: str | Path = "notebooks", out_dir: str | Path = "build/quick", *,
              workers: int = 2) -> list[dict]:
    """Run every notebook with its quick parameters (:func:`quick_jobs`), ``workers`` at once.

    Returns:
        One dict per notebook, in the order of the notebooks' names: ``notebook`` (stem),
        ``seconds`` (wall), ``error`` (None when it ran to the end), ``problems``
        (:func:`~paged.experiments.notebook.outputs.output_problems` of the executed copy).
    """
    from paged.experiments.notebook.outputs import output_problems
    from paged.experiments.notebook.sweep import run_jobs, run_notebook

    jobs = quick_jobs(notebooks_dir, out_dir)
    (Path(out_dir) / "figures").mkdir(parents=True, exist_ok=True)
    runs = run_jobs(run_notebook, jobs, workers=workers, desc="make quick")
    rows = []
    for job, run in zip(jobs, runs):
        executed = Path(run["output"])
        rows.append({"notebook": Path(job["notebook"]).stem, "seconds": run["seconds"], "error": run["error"],
                     "problems": output_problems(executed) if executed.exists() else []})
    return sorted(rows, key=lambda row: row["notebook"])


def main(argv: list[str] | None = None) -> int:
    """``python -m paged.experiments.notebook.quick``: run, print one line per notebook, 1 on any failure;
    Ctrl-C prints one ``interrupted`` line and returns 130, leaving no temporary notebook in ``--out``."""
    parser = argparse.ArgumentParser(prog="python -m paged.experiments.notebook.quick", description=__doc__.split("\n")[0])
    parser.add_argument("--notebooks", default="notebooks", help="folder of the notebooks (NN_name.ipynb)")
    parser.add_argument("--out", default="build/quick", help="folder of the executed notebooks; figures in OUT/figures")
    parser.add_argument("--workers", type=int, default=2, help="notebooks at once")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        rows = run_quick(args.notebooks, args.out, workers=args.workers)
    except KeyboardInterrupt:
        from paged.experiments.notebook.execute import interrupted

        # A worker killed mid-run cannot remove its temporary notebook (paged.atomic); the finished
        # notebooks and figures are whole, so only those temporaries go.
        for tmp in Path(args.out).glob(".*.tmp.ipynb"):
            tmp.unlink(missing_ok=True)
        return interrupted()
    failed = 0
    for row in rows:
        status = "ok" if not row["error"] and not row["problems"] else "FAILED"
        failed += status != "ok"
        print(f"{row['notebook']:<18} {row['seconds']:6.1f} s  {status}")
        if row["error"]:
            print(f"    error: {row['error']}")
        for problem in row["problems"]:
            print(f"    {problem}")
    figures = sorted(p.name for p in (Path(args.out) / "figures").glob("*.png"))
    print(f"{len(rows)} notebooks in {time.perf_counter() - start:.0f} s ({args.workers} at once); "
          f"{len(figures)} figures in {Path(args.out) / 'figures'}; executed notebooks in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
