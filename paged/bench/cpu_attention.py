"""``python -m paged.bench.cpu_attention``: the engine's CPU decode attention against contiguous SDPA, over a grid.

What paging costs the CPU engine per attention call (paper §4.1; §7.1 measures the same tax for the
GPU kernel). At every point of the grid (batch × longest context × uniform or mixed lengths ×
dtype) one decode query per sequence attends to its context, timed three ways on the same
contexts and the same random values:

* **paged**: the engine's CPU path, :func:`paged.kernels.bucketed.paged_attention_bucketed` on a
  paged cache ``[num_blocks, block_size, kv_heads, head_size]`` whose blocks are scattered at random
  (a shuffled pool twice the size needed), with a reused gather workspace; its per-step
  :func:`~paged.kernels.bucketed.plan_buckets` is timed apart (once per step, shared by every layer);
* **contiguous (token-major)**: :func:`paged.kernels.reference.contiguous_attention`, the Fig. 18a
  baseline: SDPA over a contiguous ``[batch, context, kv_heads, head_size]`` cache, the paged
  cache's token layout, padded to the longest context with a length mask when lengths differ;
* **contiguous (head-major)**: SDPA over ``[batch, kv_heads, context, head_size]``, the layout of a
  dense Hugging Face ``DynamicCache``, GQA folded into query rows, padded and masked the same way.

Uniform lengths: every sequence holds the point's context. Mixed: lengths drawn uniformly from
``[1, context]`` with one sequence at ``context`` (a ShareGPT-like spread), so the contiguous
baselines attend to padding and the paged path does not. Heads default to the shipped tiny Llama's
(8 query heads, 2 KV heads, head size 32), blocks of 16 tokens.

Timing: CPU time of the measuring thread (``time.thread_time``), torch on one thread; per point,
``rounds`` interleaved rounds of the three paths, each the median of ``repeats`` calls after one
warm-up; the table gives the median over rounds and the ratios' [min - max]. The load average is
printed before and after: the machine may be shared, and CPU time still counts cache misses that
other processes cause.
"""

from __future__ import annotations

import os
import statistics
import time

import torch
import torch.nn.functional as F

from paged.bench import bench_parser
from paged.cli import positive_int, run_command
from paged.kernels.bucketed import GatherWorkspace, paged_attention_bucketed, plan_buckets
from paged.kernels.reference import contiguous_attention, paged_attention_reference

__all__ = ["PATHS", "TARGET", "measure"]

#: The timed paths, in table order.
PATHS = ("paged", "token_major", "head_major")
#: Target: the paged path at most this many times contiguous SDPA's time.
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


def _calls(case: dict, block_size: int, scale: float) -> dict:
    """The three paths as zero-argument callables, and the plan's."""
    q, lens = case["query"], case["context_lens"]
    batch, num_heads, head_size = q.shape
    num_kv_heads = case["key_cache"].shape[2]
    lens_list = lens.tolist()
    plan = plan_buckets(case["tables"], lens_list, block_size)
    workspace = GatherWorkspace()
    folded = q.view(batch, num_kv_heads, num_heads // num_kv_heads, head_size)
    return {
        "paged": lambda: paged_attention_bucketed(q, case["key_cache"], case["value_cache"], plan, scale, workspace),
        "token_major": lambda: contiguous_attention(q, case["token_key"], case["token_value"],
                                                    None if case["uniform"] else lens, scale),
        "head_major": lambda: F.scaled_dot_product_attention(folded, case["head_key"], case["head_value"],
                                                             attn_mask=case["mask"], scale=scale),
        "plan": lambda: plan_buckets(case["tables"], lens_list, block_size),
    }


def _time(fn, repeats: int) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        start = time.thread_time()
        fn()
        samples.append(time.thread_time() - start)
    return statistics.median(samples)


def measure(*, batch_sizes=(1, 8, 32, 64, 128), contexts=(128, 512, 2048), mixes=("uniform", "mixed"),
            dtypes=("float32", "bfloat16"), num_heads: int = 8, num_kv_heads: int = 2, head_size: int = 32,
            block_size: int = 16, rounds: int = 5, repeats: int = 3, seed: int = 0, check: bool = True) -> dict:
    """Time the paged path and both contiguous baselines at every grid point (module docstring).

    Args:
        batch_sizes: sequences per call.
        contexts: the longest context of a point (tokens).
        mixes: ``"uniform"`` and / or ``"mixed"`` lengths.
        dtypes: ``"float32"``, ``"bfloat16"``, ``"float16"``.
        num_heads, num_kv_heads, head_size, block_size: the attention's shape (block size in tokens).
        rounds: interleaved rounds per point (≥ 1); repeats: calls per path and round (≥ 1).
        check: compare the paged output with :func:`paged.kernels.reference.paged_attention_reference`
            at every point first (raises AssertionError on a mismatch).

    Returns:
        ``{"rows": [{dtype, mix, batch, context, paged_s, token_major_s, head_major_s, plan_s,
        vs_token_major, vs_head_major}, ...], "load": (before, after)}``; times are medians over
        rounds (seconds of CPU time), each ratio ``(median, min, max)`` over rounds of paged ÷ baseline.

    Raises:
        ValueError: an empty or non-positive grid axis, an unknown mix or dtype, ``num_heads`` not
            a multiple of ``num_kv_heads``, ``rounds`` or ``repeats`` < 1.
    """
    if (not batch_sizes or not contexts or min(batch_sizes) < 1 or min(contexts) < 1 or rounds < 1 or repeats < 1
            or num_kv_heads < 1 or num_heads % num_kv_heads):
        raise ValueError(f"need batch sizes, contexts, rounds, repeats ≥ 1 and num_heads a multiple of num_kv_heads; "
                         f"got {batch_sizes}, {contexts}, {rounds}, {repeats}, {num_heads}/{num_kv_heads}")
    if not mixes or set(mixes) - {"uniform", "mixed"}:
        raise ValueError(f"mixes must be 'uniform' and / or 'mixed', got {mixes}")
    if not dtypes or set(dtypes) - set(_DTYPES):
        raise ValueError(f"dtypes must be among {sorted(_DTYPES)}, got {dtypes}")
    gen = torch.Generator().manual_seed(seed)
    scale = head_size ** -0.5
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(1)
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
                        calls = _calls(case, block_size, scale)
                        if check:
                            _check(case, calls["paged"](), scale, dtype)
                        samples = {name: [] for name in calls}
                        for _ in range(rounds):
                            for name, fn in calls.items():
                                samples[name].append(_time(fn, repeats))
                        ratios = {base: [p / b for p, b in zip(samples["paged"], samples[base])]
                                  for base in ("token_major", "head_major")}
                        rows.append({"dtype": dtype_name, "mix": mix, "batch": batch, "context": context,
                                     **{f"{name}_s": statistics.median(v) for name, v in samples.items()},
                                     **{f"vs_{base}": (statistics.median(r), min(r), max(r))
                                        for base, r in ratios.items()}})
                        del case, calls
    finally:
        torch.set_num_threads(previous_threads)
    return {"rows": rows, "load": (load_before, os.getloadavg()[0])}


def _check(case: dict, out: torch.Tensor, scale: float, dtype: torch.dtype) -> None:
    q = case["query"]
    ref = paged_attention_reference(q.float(), case["key_cache"].float(), case["value_cache"].float(),
                                    case["tables"], case["context_lens"], scale)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.float(), ref, atol=tol, rtol=tol)


def main(argv: list[str] | None = None) -> None:
    """CLI: print the grid and how many points meet the target against each baseline."""
    parser = bench_parser("paged.bench.cpu_attention", __doc__)
    parser.add_argument("--batch-sizes", type=positive_int, nargs="+", default=[1, 8, 32, 64, 128])
    parser.add_argument("--contexts", type=positive_int, nargs="+", default=[128, 512, 2048])
    parser.add_argument("--mixes", nargs="+", default=["uniform", "mixed"], choices=["uniform", "mixed"])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=sorted(_DTYPES))
    parser.add_argument("--rounds", type=positive_int, default=5)
    parser.add_argument("--repeats", type=positive_int, default=3)
    run_command(parser, _report, argv)


def _report(args) -> None:
    r = measure(batch_sizes=tuple(args.batch_sizes), contexts=tuple(args.contexts), mixes=tuple(args.mixes),
                dtypes=tuple(args.dtypes), rounds=args.rounds, repeats=args.repeats)
    load = r["load"]
    print(f"load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f} on {os.cpu_count()} CPUs; CPU time, "
          f"torch on 1 thread; median over {args.rounds} interleaved rounds of {args.repeats} calls [ratio min - max]")
    print("heads 8 / KV heads 2, head size 32, blocks of 16 tokens; ratio = paged / contiguous "
          f"(target <= {TARGET}); plan = plan_buckets, once per step for every layer")
    print(f"{'dtype':<9} {'lengths':<8} {'batch':>5} {'context':>7} {'paged µs':>10} {'plan µs':>8} "
          f"{'token-major µs':>14} {'head-major µs':>13} {'paged/token-major':>23} {'paged/head-major':>23}")
    for row in r["rows"]:
        cells = []
        for base in ("token_major", "head_major"):
            med, lo, hi = row[f"vs_{base}"]
            cells.append(f"{med:5.2f} [{lo:.2f}-{hi:.2f}]{'  ' if med <= TARGET else ' x'}")
        print(f"{row['dtype']:<9} {row['mix']:<8} {row['batch']:>5} {row['context']:>7} {row['paged_s'] * 1e6:>10.1f} "
              f"{row['plan_s'] * 1e6:>8.1f} {row['token_major_s'] * 1e6:>14.1f} {row['head_major_s'] * 1e6:>13.1f} "
              f"{cells[0]:>23} {cells[1]:>23}")
    for base in ("token_major", "head_major"):
        for mix in args.mixes:
            sel = [row[f"vs_{base}"][0] for row in r["rows"] if row["mix"] == mix]
            met = sum(x <= TARGET for x in sel)
            print(f"paged / {base.replace('_', '-')}, {mix} lengths: {min(sel):.2f}-{max(sel):.2f}, "
                  f"{met} of {len(sel)} points within {TARGET}x")


if __name__ == "__main__":
    main()
