"""``python -m paged.bench.cpu_attention``: the engine's CPU decode attention against contiguous SDPA, over a grid.

What paging costs the CPU engine per attention call (paper §4.1; §7.1 measures the same tax for the
GPU kernel). At every point of the grid (batch × longest context × uniform or mixed lengths ×
dtype) one decode query per sequence attends to its context, timed four ways on the same contexts
and the same random values:

* **kernel**: the C kernel, :func:`paged.kernels.cpu_kernel.paged_attention_cpu`, reading the
  paged cache ``[num_blocks, block_size, kv_heads, head_size]`` through the block tables; the blocks
  are scattered at random (a shuffled pool twice the size needed). Its per-step
  :func:`~paged.kernels.cpu_kernel.plan_cpu_decode` is timed apart (once per step, shared by
  every layer), from the engine's Python block tables;
* **bucketed**: the torch path, :func:`paged.kernels.bucketed.paged_attention_bucketed` (gather
  the used blocks into a reused workspace, then SDPA per length bucket) on the same paged cache;
  its :func:`~paged.kernels.bucketed.plan_buckets` timed apart the same way;
* **contiguous (token-major)**: :func:`paged.kernels.reference.contiguous_attention`, the Fig. 18a
  baseline: SDPA over a contiguous ``[batch, context, kv_heads, head_size]`` cache, the paged
  cache's token layout, padded to the longest context with a length mask when lengths differ;
* **contiguous (head-major)**: SDPA over ``[batch, kv_heads, context, head_size]``, the layout of a
  dense Hugging Face ``DynamicCache``, GQA folded into query rows, padded and masked the same way.

Uniform lengths: every sequence holds the point's context. Mixed: lengths drawn uniformly from
``[1, context]`` with one sequence at ``context`` (a ShareGPT-like spread), so the contiguous
baselines attend to padding and the paged paths do not. Heads default to the shipped tiny Llama's
(8 query heads, 2 KV heads, head size 32), blocks of 16 tokens.

How each point is timed (CPU time or wall time, interleaved rounds, the load average) is in
:func:`measure`; before the grid, :func:`compile_time` prints the kernel's first-use compile time.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from paged.bench import bench_parser
from paged.block.allocator import DEFAULT_BLOCK_SIZE
from paged.cli import positive_int, run_command
from paged.kernels.bucketed import GatherWorkspace, paged_attention_bucketed, plan_buckets
from paged.kernels.cpu_kernel import build_library, load_kernel, paged_attention_cpu, plan_cpu_decode
from paged.kernels.reference import contiguous_attention, paged_attention_reference

__all__ = ["BASELINES", "PAGED", "PATHS", "TARGET", "compile_time", "measure"]

#: The paged paths (what is compared), in table order.
PAGED = ("kernel", "bucketed")
#: The contiguous baselines.
BASELINES = ("token_major", "head_major")
#: Every timed path, in table order.
PATHS = PAGED + BASELINES
#: Target: a paged path at most this many times contiguous SDPA's time.
TARGET = 1.1
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _lengths(batch: int, context: int, mixed: bool, gen: torch.Generator) -> list[int]:
    if not mixed:
        return [context] * batch
    lens = torch.randint(1, context + 1, (batch,), generator=gen).tolist()
    lens[0] = context
    return lens


def _case(lens: list[int], num_heads: int, num_kv_heads: int, head_size: int, block_size: int,
          dtype: torch.dtype, gen: torch.Generator) -> dict:
    """The same contexts as a scattered paged cache and as both contiguous layouts."""
    batch, longest = len(lens), max(lens)
    width = -(-longest // block_size)
    pool = 2 * batch * width
    query = torch.randn(batch, num_heads, head_size, generator=gen).to(dtype)
    key = torch.randn(batch, width * block_size, num_kv_heads, head_size, generator=gen).to(dtype)
    value = torch.randn(batch, width * block_size, num_kv_heads, head_size, generator=gen).to(dtype)
    tables = torch.randperm(pool, generator=gen)[:batch * width].view(batch, width)
    key_cache = torch.zeros(pool, block_size, num_kv_heads, head_size, dtype=dtype)
    value_cache = torch.zeros_like(key_cache)
    key_cache[tables.reshape(-1)] = key.view(-1, block_size, num_kv_heads, head_size)
    value_cache[tables.reshape(-1)] = value.view(-1, block_size, num_kv_heads, head_size)
    context_lens = torch.tensor(lens, dtype=torch.int32)
    token_key, token_value = key[:, :longest].contiguous(), value[:, :longest].contiguous()
    head_key, head_value = token_key.transpose(1, 2).contiguous(), token_value.transpose(1, 2).contiguous()
    uniform = min(lens) == longest
    mask = None if uniform else (torch.arange(longest)[None, :] < context_lens[:, None])[:, None, None, :]
    return dict(query=query, key_cache=key_cache, value_cache=value_cache, tables=tables.to(torch.int32),
                context_lens=context_lens, token_key=token_key, token_value=token_value, head_key=head_key,
                head_value=head_value, mask=mask, uniform=uniform)


def _calls(case: dict, block_size: int, scale: float, kernel, threads: int) -> dict:
    """The paths (and the two per-step plans) as zero-argument callables; no kernel paths when ``kernel`` is None."""
    q, lens = case["query"], case["context_lens"]
    batch, num_heads, head_size = q.shape
    num_kv_heads = case["key_cache"].shape[2]
    lens_list = lens.tolist()
    used = [-(-n // block_size) for n in lens_list]
    table_lists = [row[:n] for row, n in zip(case["tables"].tolist(), used)]  # the engine's Python block tables
    plan = plan_buckets(table_lists, lens_list, block_size)
    workspace = GatherWorkspace()
    folded = q.view(batch, num_kv_heads, num_heads // num_kv_heads, head_size)
    calls = {}
    if kernel is not None:
        step = plan_cpu_decode(kernel, table_lists, lens_list, block_size, threads)
        calls["kernel"] = lambda: paged_attention_cpu(q, case["key_cache"], case["value_cache"], step, scale)
    calls.update({
        "bucketed": lambda: paged_attention_bucketed(q, case["key_cache"], case["value_cache"], plan, scale, workspace),
        "token_major": lambda: contiguous_attention(q, case["token_key"], case["token_value"],
                                                    None if case["uniform"] else lens, scale),
        "head_major": lambda: F.scaled_dot_product_attention(folded, case["head_key"], case["head_value"],
                                                             attn_mask=case["mask"], scale=scale),
        "bucketed_plan": lambda: plan_buckets(table_lists, lens_list, block_size),
    })
    if kernel is not None:
        calls["kernel_plan"] = lambda: plan_cpu_decode(kernel, table_lists, lens_list, block_size, threads)
    return calls


def _time(fn, repeats: int, clock) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        start = clock()
        fn()
        samples.append(clock() - start)
    return statistics.median(samples)


def compile_time() -> tuple[float, str] | None:
    """``(seconds, library name)`` of compiling the C kernel into an empty folder (its first use on a
    machine), or None when it does not build here (no compiler, ``PAGED_CPU_KERNEL=0``)."""
    if load_kernel() is None:
        return None
    from importlib import resources
    with tempfile.TemporaryDirectory() as folder, resources.as_file(
            resources.files("paged.kernels") / "paged_attention_cpu.c") as source:
        path, seconds = build_library(source, Path(folder))
        return seconds, path.name


def measure(*, batch_sizes=(1, 8, 32, 64, 128), contexts=(128, 512, 2048), mixes=("uniform", "mixed"),
            dtypes=("float32", "bfloat16"), num_heads: int = 8, num_kv_heads: int = 2, head_size: int = 32,
            block_size: int = DEFAULT_BLOCK_SIZE, rounds: int = 5, repeats: int = 3, seed: int = 0, threads: int = 1,
            check: bool = True) -> dict:
    """Time the paged paths and both contiguous baselines at every grid point (module docstring).

    Timing: with one thread (the default) CPU time of the measuring thread (``time.thread_time``),
    torch and the kernel on one thread; with ``threads`` > 1 (``--threads N``) wall time
    (``time.perf_counter``), torch and the kernel both on N threads. Per point, ``rounds``
    interleaved rounds of the four paths, each the median of ``repeats`` calls after one warm-up;
    the CLI's table gives the median over rounds and the ratios' [min - max]. The load average is
    taken before and after: the machine may be shared, and CPU time still counts cache misses that
    other processes cause.

    Args:
        batch_sizes: sequences per call.
        contexts: the longest context of a point (tokens).
        mixes: ``"uniform"`` and / or ``"mixed"`` lengths.
        dtypes: ``"float32"``, ``"bfloat16"``, ``"float16"``.
        num_heads, num_kv_heads, head_size, block_size: the attention's shape (block size in tokens).
        rounds: interleaved rounds per point (≥ 1); repeats: calls per path and round (≥ 1).
        threads: torch's and the kernel's threads (≥ 1); above 1 the timer is wall time.
        check: compare each paged path's output with
            :func:`paged.kernels.reference.paged_attention_reference` at every point first (raises
            AssertionError on a mismatch).

    Returns:
        ``{"rows": [{dtype, mix, batch, context, <path>_s, bucketed_plan_s, kernel_plan_s,
        <paged>_vs_<baseline>}, ...], "load": (before, after), "kernel": bool}``; times are medians
        over rounds (seconds of CPU time, or wall time with threads), each ratio ``(median, min, max)``
        over rounds of the paged path's time ÷ the baseline's. Without the kernel (no C compiler,
        ``PAGED_CPU_KERNEL=0``) its columns are absent and ``"kernel"`` is False.

    Raises:
        ValueError: an empty or non-positive grid axis, an unknown mix or dtype, ``num_heads`` not
            a multiple of ``num_kv_heads``, ``rounds``, ``repeats``, ``threads``, a head count or the
            head size < 1; each message names the argument.
    """
    for name, values in (("batch_sizes", batch_sizes), ("contexts", contexts)):
        if not values or min(values) < 1:
            raise ValueError(f"{name} must be one or more values ≥ 1, got {tuple(values)}")
    for name, value in (("rounds", rounds), ("repeats", repeats), ("threads", threads), ("num_kv_heads", num_kv_heads),
                        ("num_heads", num_heads), ("head_size", head_size)):
        if value < 1:
            raise ValueError(f"{name} must be ≥ 1, got {value}")
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads}): each KV head "
                         "serves a whole group of query heads (GQA)")
    if not mixes or set(mixes) - {"uniform", "mixed"}:
        raise ValueError(f"mixes must be 'uniform' and / or 'mixed', got {mixes}")
    if not dtypes or set(dtypes) - set(_DTYPES):
        raise ValueError(f"dtypes must be among {sorted(_DTYPES)}, got {dtypes}")
    kernel = load_kernel()
    clock = time.thread_time if threads == 1 else time.perf_counter
    gen = torch.Generator().manual_seed(seed)
    scale = head_size ** -0.5
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    rows = []
    load_before = os.getloadavg()[0]
    try:
        for dtype_name in dtypes:
            dtype = _DTYPES[dtype_name]
            for mix in mixes:
                for batch in batch_sizes:
                    for context in contexts:
                        lens = _lengths(batch, context, mix == "mixed", gen)
                        case = _case(lens, num_heads, num_kv_heads, head_size, block_size, dtype, gen)
                        calls = _calls(case, block_size, scale, kernel, threads)
                        if check:
                            for name in PAGED:
                                if name in calls:
                                    _check(case, calls[name](), scale, dtype)
                        samples = {name: [] for name in calls}
                        for _ in range(rounds):
                            for name, fn in calls.items():
                                samples[name].append(_time(fn, repeats, clock))
                        ratios = {f"{path}_vs_{base}": [p / b for p, b in zip(samples[path], samples[base])]
                                  for path in PAGED if path in samples for base in BASELINES}
                        rows.append({"dtype": dtype_name, "mix": mix, "batch": batch, "context": context,
                                     **{f"{name}_s": statistics.median(v) for name, v in samples.items()},
                                     **{key: (statistics.median(r), min(r), max(r)) for key, r in ratios.items()}})
                        del case, calls
    finally:
        torch.set_num_threads(previous_threads)
    return {"rows": rows, "load": (load_before, os.getloadavg()[0]), "kernel": kernel is not None}


def _check(case: dict, out: torch.Tensor, scale: float, dtype: torch.dtype) -> None:
    q = case["query"]
    ref = paged_attention_reference(q.float(), case["key_cache"].float(), case["value_cache"].float(),
                                    case["tables"], case["context_lens"], scale)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.float(), ref, atol=tol, rtol=tol)


def main(argv: list[str] | None = None) -> None:
    """CLI: print the first-use compile time, the grid, and how many points meet the target against each baseline."""
    parser = bench_parser("paged.bench.cpu_attention", __doc__)
    parser.add_argument("--batch-sizes", type=positive_int, nargs="+", default=[1, 8, 32, 64, 128])
    parser.add_argument("--contexts", type=positive_int, nargs="+", default=[128, 512, 2048])
    parser.add_argument("--mixes", nargs="+", default=["uniform", "mixed"], choices=["uniform", "mixed"])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=sorted(_DTYPES))
    parser.add_argument("--rounds", type=positive_int, default=5)
    parser.add_argument("--repeats", type=positive_int, default=3)
    parser.add_argument("--threads", type=positive_int, default=1,
                        help="torch's and the kernel's threads (above 1: wall time instead of CPU time)")
    parser.add_argument("--heads", type=positive_int, nargs=3, default=[8, 2, 32],
                        metavar=("NUM_HEADS", "NUM_KV_HEADS", "HEAD_SIZE"),
                        help="the attention's shape (default: the shipped model's; OPT-13B's is 40 40 128)")
    parser.add_argument("--no-compile-time", action="store_true", help="skip compiling the kernel into an empty folder")
    run_command(parser, _report, argv)


def _report(args) -> None:
    if not args.no_compile_time:
        built = compile_time()
        print("C kernel: not available here (no C compiler, or PAGED_CPU_KERNEL=0); the bucketed path only"
              if built is None else f"C kernel first-use compile: {built[0]:.1f} s ({built[1]})")
    r = measure(batch_sizes=tuple(args.batch_sizes), contexts=tuple(args.contexts), mixes=tuple(args.mixes),
                dtypes=tuple(args.dtypes), rounds=args.rounds, repeats=args.repeats, threads=args.threads,
                num_heads=args.heads[0], num_kv_heads=args.heads[1], head_size=args.heads[2])
    load = r["load"]
    timer = "CPU time" if args.threads == 1 else "wall time"
    print(f"load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f} on {os.cpu_count()} CPUs; {timer}, "
          f"torch and the kernel on {args.threads} thread(s); median over {args.rounds} interleaved rounds of "
          f"{args.repeats} calls [ratio min - max]")
    print(f"heads {args.heads[0]} / KV heads {args.heads[1]}, head size {args.heads[2]}, blocks of 16 tokens; "
          "ratio = paged path / contiguous "
          f"(target <= {TARGET}, x: above); plans = plan_cpu_decode / plan_buckets, once per step for every layer")
    paged = [p for p in PAGED if r["kernel"] or p != "kernel"]
    ratio_names = [f"{p}_vs_{b}" for p in paged for b in BASELINES]
    header = (f"{'dtype':<9} {'lengths':<8} {'batch':>5} {'context':>7} "
              + "".join(f"{p + ' µs':>12}" for p in paged) + f"{'token-maj µs':>13}{'head-maj µs':>12}"
              + f"{'plans µs':>14} " + "".join(f"{n.replace('_vs_', '/').replace('_major', '-maj'):>23}" for n in ratio_names))
    print(header)
    for row in r["rows"]:
        cells = []
        for name in ratio_names:
            med, lo, hi = row[name]
            cells.append(f"{med:5.2f} [{lo:.2f}-{hi:.2f}]{'  ' if med <= TARGET else ' x'}")
        plans = "/".join(f"{row[f'{p}_plan_s'] * 1e6:.0f}" for p in paged)
        print(f"{row['dtype']:<9} {row['mix']:<8} {row['batch']:>5} {row['context']:>7} "
              + "".join(f"{row[f'{p}_s'] * 1e6:>12.1f}" for p in paged)
              + f"{row['token_major_s'] * 1e6:>13.1f}{row['head_major_s'] * 1e6:>12.1f}{plans:>14} "
              + "".join(f"{c:>23}" for c in cells))
    for name in ratio_names:
        for mix in args.mixes:
            sel = [row[name][0] for row in r["rows"] if row["mix"] == mix]
            met = sum(x <= TARGET for x in sel)
            path, base = name.split("_vs_")
            print(f"{path} / {base.replace('_', '-')}, {mix} lengths: {min(sel):.2f}-{max(sel):.2f}, "
                  f"{met} of {len(sel)} points within {TARGET}x")


if __name__ == "__main__":
    main()
