"""Paged vs contiguous decode-attention latency at the Fig. 18a points (paper §7.1).

Run: ``python -m paged.bench.kernel``. On a GPU it times the Triton paged kernel against SDPA over
a contiguous cache and reports the paged kernel's bandwidth against the device's peak; on a CPU it
times the torch paths (block-table gather + SDPA vs SDPA) and says so. Targets (issue 3, GPU only):
paged ≤ 1.15× contiguous at the paper's points; ≥ 70% of peak HBM bandwidth at context ≥ 4096,
batch ≥ 32.
"""

from __future__ import annotations

import argparse

from paged.bench import bench_parser
from paged.cli import positive_int, run_command
from paged.experiments.kernel import PAPER_RATIO, sweep


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
    run_command(parser, _report, argv)


def _report(args) -> None:
    from paged.experiments.kernel import resolve_device

    gpu = resolve_device(args.device).type == "cuda"
    context_lens = args.context_lens or ([64, 128, 256, 1024, 4096, 16384] if gpu else [64, 128, 256, 1024])
    batch_sizes = args.batch_sizes or ([8, 32, 64] if gpu else [8, 32])
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


if __name__ == "__main__":
    main()
