"""Paged vs contiguous decode-attention latency at the Fig. 18a points (paper §7.1).

Run: ``python -m paged.bench.kernel``. On a GPU it times the Triton paged kernel against SDPA over
a contiguous cache and reports the paged kernel's bandwidth against the device's peak; on a CPU it
times the torch paths (block-table gather + SDPA vs SDPA) and says so. Targets (GPU only):
paged ≤ 1.15× contiguous at the paper's points; ≥ 70% of peak HBM bandwidth at context ≥ 4096,
batch ≥ 32. On any machine it then prints the kernel's roofline (compulsory bytes per call and the
ideal time at the A100-40GB / H100 SXM / H200 HBM peaks) and the ahead-of-time compile check of the
kernel this shape launches, for sm_80 and sm_90 (registers, stack; ``--no-compile-check`` skips it).
"""

from __future__ import annotations

import argparse

from paged.bench import bench_parser
from paged.cli import positive_int, run_command
from paged.experiments.nb04_kernel.kernel import PAPER_RATIO, ROOFLINE_COLUMNS, roofline_table, sweep


GPU_CONTEXTS, GPU_BATCHES = [64, 128, 256, 1024, 4096, 16384], [8, 32, 64]


def _ints(text: str) -> list[int]:
    values = [positive_int(x) for x in text.split(",") if x]
    if not values:
        raise argparse.ArgumentTypeError("needs at least one comma-separated integer")
    return values


def main(argv: list[str] | None = None) -> None:
    """Print one line per point and a summary of the ratio against the paper's."""
    parser = bench_parser("paged.bench.kernel", __doc__)
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--dtype", default="auto", help="auto (fp16 on GPU, fp32 on CPU), float32, float16, bfloat16")
    parser.add_argument("--context-lens", type=_ints, default=None,
                        help="comma-separated tokens (default: 64,128,256,1024,4096,16384 on GPU; 64,128,256,1024 on CPU)")
    parser.add_argument("--batch-sizes", type=_ints, default=None, help="comma-separated (default 8,32,64 GPU; 8,32 CPU)")
    parser.add_argument("--num-heads", type=positive_int, default=40)
    parser.add_argument("--num-kv-heads", type=positive_int, default=40)
    parser.add_argument("--head-size", type=positive_int, default=128)
    parser.add_argument("--block-size", type=positive_int, default=16)
    parser.add_argument("--repeats", type=positive_int, default=5)
    parser.add_argument("--no-compile-check", action="store_true",
                        help="skip the ahead-of-time compile check for sm_80/sm_90 (about 10 s the first time)")
    run_command(parser, _report, argv)


def _report(args) -> None:
    from paged.experiments.nb04_kernel.kernel import resolve_device

    gpu = resolve_device(args.device).type == "cuda"
    context_lens = args.context_lens or (GPU_CONTEXTS if gpu else [64, 128, 256, 1024])
    batch_sizes = args.batch_sizes or (GPU_BATCHES if gpu else [8, 32])
    frame = sweep(context_lens, batch_sizes, num_heads=args.num_heads, num_kv_heads=args.num_kv_heads,
                  head_size=args.head_size, block_size=args.block_size, dtype=args.dtype, device=args.device,
                  repeats=args.repeats, max_kv_bytes=None if gpu else 2 << 30)
    print(f"device: {frame['device'].iloc[0]}   dtype: {frame['dtype'].iloc[0]}   "
          f"paged = {frame['paged_impl'].iloc[0]};  contiguous = {frame['contiguous_impl'].iloc[0]}")
    print(f"{'batch':>5} {'context':>8} {'paged µs':>11} {'contig µs':>11} {'ratio':>6} {'paged GB/s':>11} {'% peak':>7}")
    for r in frame.itertuples():
        peak = f"{100 * r.fraction_of_peak:6.1f}%" if r.fraction_of_peak == r.fraction_of_peak else "     –"
        print(f"{r.batch:>5} {r.context_len:>8} {r.paged_us:>11.1f} {r.contiguous_us:>11.1f} {r.ratio:>6.2f} "
              f"{r.paged_gbps:>11.1f} {peak:>7}")
    for batch, context_len in frame.attrs["skipped"]:
        print(f"skipped batch {batch} context {context_len} (K/V over 2 GiB on CPU)")
    paper = frame[frame["context_len"].isin([64, 128, 256]) & frame["batch"].isin([8, 32])]
    if len(paper):
        print(f"paged/contiguous at the paper's points: {paper['ratio'].min():.2f}–{paper['ratio'].max():.2f} "
              f"(paper, A100 CUDA kernels: {PAPER_RATIO[0]:.2f}–{PAPER_RATIO[1]:.2f}"
              f"{'; GPU target ≤ 1.15' if gpu else '; CPU torch paths, not comparable to a GPU kernel'})")
    # The GPU's dtype: this run's on a GPU; on a CPU the one a GPU run would use (fp16 unless --dtype says).
    dtype = frame["dtype"].iloc[0] if gpu or args.dtype != "auto" else "float16"
    # The roofline is arithmetic: on a CPU it covers the GPU's default grid unless a grid was given.
    _print_roofline(args, frame, args.context_lens or GPU_CONTEXTS, args.batch_sizes or GPU_BATCHES, gpu, dtype)
    if not args.no_compile_check:
        _print_compile_check(args, dtype)


def _print_roofline(args, frame, context_lens, batch_sizes, gpu: bool, dtype: str) -> None:
    table = roofline_table(context_lens, batch_sizes, num_heads=args.num_heads, num_kv_heads=args.num_kv_heads,
                           head_size=args.head_size, block_size=args.block_size, dtype=dtype)
    print(f"\nroofline ({dtype}): compulsory HBM bytes per call (K/V + block tables + query/output) "
          "÷ datasheet peak")
    names = list(ROOFLINE_COLUMNS)
    print(f"{'batch':>5} {'context':>8} {'K/V MiB':>9} {'table KiB':>10} " + " ".join(f"{n + ' µs':>13}" for n in names)
          + (f" {'measured µs':>12} {'of roofline':>11}" if gpu else ""))
    measured = {(r.batch, r.context_len): r for r in frame.itertuples()}
    for row in table.to_dict("records"):
        line = (f"{row['batch']:>5} {row['context_len']:>8} {row['kv_bytes'] / 2**20:>9.2f} "
                f"{row['table_bytes'] / 2**10:>10.2f} " + " ".join(f"{row[ROOFLINE_COLUMNS[n]]:>13.2f}" for n in names))
        point = measured.get((row["batch"], row["context_len"]))
        if gpu and point is not None:
            share = f"{100 * point.fraction_of_peak:.1f}%" if point.fraction_of_peak == point.fraction_of_peak else "–"
            line += f" {point.paged_us:>12.1f} {share:>11}"
        print(line)
    if not gpu:
        print("(CPU run: these are GPU floors for this shape; the CPU latencies above are not compared with them)")


def _print_compile_check(args, dtype: str) -> None:
    from paged.kernels import compile_check as cc

    if (why := cc.missing_tools()) is not None:
        print(f"\ncompile check skipped: {why}")
        return
    from paged.kernels.attention import SUPPORTED_BLOCK_SIZES, SUPPORTED_HEAD_SIZES

    if args.head_size not in SUPPORTED_HEAD_SIZES or args.block_size not in SUPPORTED_BLOCK_SIZES:
        print(f"\ncompile check skipped: the Triton kernel takes head sizes {SUPPORTED_HEAD_SIZES} and block "
              f"sizes {SUPPORTED_BLOCK_SIZES}, not {args.head_size} and {args.block_size}")
        return
    shapes = [cc.KernelShape(dtype, args.head_size, args.block_size, args.num_heads // args.num_kv_heads, split)
              for split in (False, True)]
    rows, stats = cc.check_in_subprocess(shapes, list(cc.ARCHS))
    print(f"\nahead-of-time compile check ({dtype}, head {args.head_size}, block {args.block_size}, "
          f"group {args.num_heads // args.num_kv_heads}; {stats['compiles']} compiles, {stats['seconds']:.0f} s):")
    for r in rows:
        flag = "; ".join(cc.violations(r)) or "ok"
        print(f"  {r['arch']} split-K {'on ' if r['split_k'] else 'off'} {r['kernel']:6} tile {r['tile']:>2} "
              f"warps {r['num_warps']} stages {r['num_stages']} {'dot ' if r['padded_dot'] else 'elem'}: "
              f"{r['registers']:>3} registers, stack {r['stack_bytes']} B, shared {r['shared_bytes'] / 1024:.1f} KiB, "
              f"{r['warps']} warps/SM ({100 * r['fraction']:.0f}% occupancy) — {flag}")


if __name__ == "__main__":
    main()
