"""One-command check of the Triton paged-attention kernel on a real CUDA GPU (``make gpu-check``).

Run: ``python -m paged.bench.gpu_check [--out build/gpu_check] [--autotune]``. Under 5 minutes on one
GPU, it

1. runs the GPU-only tests (``pytest -m gpu tests/kernels``: every dtype against the reference,
   single pass and split-K, block ids past 2**31 bytes);
2. times Fig. 18a's points (OPT-13B's attention: 40 heads × 128, fp16, block size 16; context
   64/128/256 × batch 8/32, the paper's) plus context 4,096 and 16,384, paged kernel vs SDPA over
   a contiguous cache, and writes ``fig18a_kernel.{png,pdf,csv}``;
3. times split-K on vs off at the long contexts (batch 1, 8, 32) and, for the group of one, the
   elementwise path vs the padded ``tl.dot`` — the two choices the CPU cannot time;
4. lists every kernel variant the JIT compiled with the registers and spills the CUDA driver
   reports, beside the ahead-of-time check for this GPU's architecture;
5. with ``--autotune``, times the neighbours of the launch table's entry for OPT-13B's shape
   (:func:`paged.kernels.launch_config.candidate_configs`), rejects any that spill, and caches the
   fastest in ``tuned_configs.json`` (never used by the tests);

and writes everything to ``gpu_check.json``: latency, paged ÷ contiguous and bandwidth ÷ peak per
point. Without a CUDA GPU it stops at once with one ``error:`` line (exit status 2); a failing
GPU test gives exit status 1 after the rest has run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from paged.bench import bench_parser
from paged.cli import positive_int, run_command

#: Fig. 18a's points (the paper's, §7.1) and the long contexts where split-K matters.
PAPER_CONTEXTS, LONG_CONTEXTS, BATCHES = (64, 128, 256), (4096, 16384), (8, 32)
OPT_13B = {"num_heads": 40, "num_kv_heads": 40, "head_size": 128, "block_size": 16}


def main(argv: list[str] | None = None) -> int:
    """Run the check; returns the exit status (1 when a GPU test failed)."""
    parser = bench_parser("paged.bench.gpu_check", __doc__)
    parser.add_argument("--out", default="build/gpu_check", help="folder for gpu_check.json and the figure")
    parser.add_argument("--tests", default="tests/kernels", help="the GPU tests to run ('' skips them)")
    parser.add_argument("--autotune", action="store_true", help="also time the launch table's neighbours (~1 min)")
    parser.add_argument("--repeats", type=positive_int, default=5, help="scale of do_bench's warm-up/rep windows")
    return run_command(parser, _check, argv)


def _require_gpu() -> None:
    import torch

    if os.environ.get("TRITON_INTERPRET") == "1":
        raise ValueError("TRITON_INTERPRET=1 is set: the GPU check times compiled kernels; unset it")
    if not torch.cuda.is_available():
        raise ValueError(f"make gpu-check needs a CUDA GPU, and torch {torch.__version__} sees none here "
                         f"(torch.cuda.is_available() is False; a CPU-only torch wheel, no driver, or "
                         f"CUDA_VISIBLE_DEVICES empty). Run it on a machine with an NVIDIA GPU.")


def _run_tests(path: str) -> dict:
    if not path:
        return {"skipped": "--tests ''"}
    if not Path(path).exists():
        return {"skipped": f"{path} not found (run from the repository root)"}
    start = time.perf_counter()
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    try:
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", path],
                                capture_output=True, text=True, env=env, timeout=240)
    except subprocess.TimeoutExpired:
        print("   GPU tests did not finish in 240 s", flush=True)
        return {"returncode": "timeout", "summary": "did not finish in 240 s", "seconds": 240}
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    print(result.stdout[-3000:] if result.returncode else (lines[-1] if lines else ""), flush=True)
    return {"returncode": result.returncode, "summary": lines[-1] if lines else "",
            "seconds": round(time.perf_counter() - start, 1)}


def _records(frame) -> list[dict]:
    return json.loads(frame.to_json(orient="records"))


def _check(args) -> int:
    _require_gpu()
    import torch
    import triton

    from paged.experiments.nb04_kernel import kernel as fig18a
    from paged.experiments.notebook.plotting import save_figure
    from paged.kernels import compile_check as cc
    from paged.kernels import triton_paged_attention as kernel
    from paged.kernels.launch_config import decode_config

    start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(device)
    capability = 10 * props.major + props.minor
    report = {"device": props.name, "capability": capability, "sms": props.multi_processor_count,
              "torch": torch.__version__, "triton": triton.__version__,
              "peak_gbps": fig18a.peak_bandwidth_gbps(props.name)}
    print(f"== {props.name} (sm_{capability}, {props.multi_processor_count} SMs), torch {torch.__version__}, "
          f"triton {triton.__version__}", flush=True)

    print("== GPU tests", flush=True)
    report["tests"] = _run_tests(args.tests)

    print("== Fig. 18a (OPT-13B attention, fp16)", flush=True)
    frame = fig18a.sweep(list(PAPER_CONTEXTS + LONG_CONTEXTS), list(BATCHES), dtype="float16", device="cuda",
                         repeats=args.repeats, progress=True, **OPT_13B)
    save_figure(fig18a.plot_fig18a(frame), frame, "fig18a_kernel", out)
    report["fig18a"] = _records(frame)
    paper = frame[frame["context_len"].isin(PAPER_CONTEXTS)]
    report["paper_points"] = {"ratio_min": float(paper["ratio"].min()), "ratio_max": float(paper["ratio"].max()),
                              "paper": list(fig18a.PAPER_RATIO)}

    print("== split-K on vs off, and the group-of-one paths", flush=True)
    split, paths = [], []
    for context_len in LONG_CONTEXTS:
        for batch in (1,) + BATCHES:
            times = fig18a.compare_launches(batch, context_len, {"split_k": {"split_k": True},
                                                                  "single_pass": {"split_k": False}},
                                            repeats=args.repeats, **OPT_13B)
            rule = kernel.use_split_k(batch, OPT_13B["num_kv_heads"], context_len, props.multi_processor_count)
            split.append({"batch": batch, "context_len": context_len, **times, "rule_picks_split_k": rule})
            print(f"   batch {batch:>2} context {context_len:>6}: split-K {times['split_k']:9.1f} µs, "
                  f"single pass {times['single_pass']:9.1f} µs (rule picks {'split-K' if rule else 'single pass'})")
    elementwise = decode_config(128, 1, 2, capability)
    dot = decode_config(128, 4, 2, capability)  # the dot path's table entry for head 128
    for batch, context_len in ((8, 256), (32, 256), (32, 4096)):
        times = fig18a.compare_launches(batch, context_len, {"elementwise": {"config": elementwise},
                                                              "padded_dot": {"config": dot}},
                                        repeats=args.repeats, **OPT_13B)
        paths.append({"batch": batch, "context_len": context_len, **times})
        print(f"   group of one, batch {batch:>2} context {context_len:>5}: elementwise {times['elementwise']:8.1f} µs, "
              f"padded tl.dot {times['padded_dot']:8.1f} µs")
    report["split_k"], report["group_of_one"] = split, paths

    if args.autotune:
        from paged.kernels.autotune import autotune

        print("== autotune (OPT-13B and a GQA shape, fp16, batch 32 × context 4096)", flush=True)
        report["autotune"] = autotune(out / "tuned_configs.json", repeats=args.repeats)

    report["compiled_variants"] = cc.compiled_variants()
    arch = next((a for a in cc.ARCHS.values() if a.capability == capability), None)
    if arch is not None and cc.missing_tools() is None:
        shapes = [cc.KernelShape("float16", 128, 16, 1, s) for s in (False, True)]
        report["aot_check"] = cc.check(shapes, [arch.name])[0]
    spills = [v for v in report["compiled_variants"] if v["spills"]]
    for v in report["compiled_variants"]:
        print(f"   {v['kernel']}: warps {v['num_warps']} stages {v['num_stages']} {v['constexprs']} → "
              f"{v['registers']} registers, {v['spills']} spills (driver)")
    report["seconds"] = round(time.perf_counter() - start, 1)
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    print(f"== paged/contiguous at the paper's points: {report['paper_points']['ratio_min']:.2f}–"
          f"{report['paper_points']['ratio_max']:.2f} (paper: 1.20–1.26); "
          f"{len(spills)} spilling variants; {report['seconds']:.0f} s; wrote {out}/gpu_check.json and "
          f"{out}/fig18a_kernel.png", flush=True)
    return 1 if report["tests"].get("returncode") or spills else 0


if __name__ == "__main__":
    sys.exit(main())
