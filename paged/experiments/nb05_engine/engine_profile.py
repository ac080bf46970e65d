"""Where the engine's time goes on this machine: decode step cost vs batch size, and per-op shares.

Two measurements (printed by ``python -m paged.bench.engine_profile``) explain the engine's throughput
ratio (:func:`paged.experiments.nb05_engine.engine.throughput_comparison`) against the paper's mechanism (§6.2: a larger batch costs almost nothing
more per step on an A100, so throughput grows with the batch that memory allows):

* :func:`decode_step_cost`: the paged engine decodes batches of ``B`` identical-length requests; the
  median decode-step time per ``B`` shows how a step's cost grows with the batch. If one step at
  batch 32 costs ``k`` times a step at batch 8, a 4× larger batch gives only ``4 / k`` × the tokens/s.
* :func:`op_time_shares`: the paged engine serves ShareGPT-length requests under
  ``torch.profiler``; each op's self CPU time is summed into a few categories (matrix products,
  the decode attention's gathers and reductions, everything else) as a share of the run's wall time;
  the rest of the wall time is Python (scheduler, block tables, sampling, module calls).
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
from torch.profiler import ProfilerActivity, profile

from paged.block.allocator import DEFAULT_BLOCK_SIZE
from paged.engine import LLM, SamplingParams
from paged.experiments.nb05_engine.engine import DEFAULT_MODEL, sharegpt_requests, torch_threads

__all__ = ["OP_CATEGORIES", "decode_step_cost", "op_time_shares"]

# aten op name -> category (anything not listed is "other torch ops").
OP_CATEGORIES = {
    "aten::addmm": "matrix products (linear, attention bmm)", "aten::mm": "matrix products (linear, attention bmm)",
    "aten::bmm": "matrix products (linear, attention bmm)", "aten::linear": "matrix products (linear, attention bmm)",
    "aten::matmul": "matrix products (linear, attention bmm)",
    "aten::index_select": "KV gathers and scatters", "aten::index_add_": "KV gathers and scatters",
    "aten::index_fill_": "KV gathers and scatters", "aten::scatter_reduce": "KV gathers and scatters",
    "aten::index_copy_": "KV gathers and scatters", "aten::index": "KV gathers and scatters",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "prefill attention (SDPA)",
    "aten::_scaled_dot_product_attention_math": "prefill attention (SDPA)",
}


def decode_step_cost(model_path=DEFAULT_MODEL, *, batch_sizes=(1, 8, 16, 32, 64, 128), context_len: int = 128,
                     decode_steps: int = 16, block_size: int = DEFAULT_BLOCK_SIZE, num_threads: int | None = 1) -> pd.DataFrame:
    """Median decode-step wall time of the paged engine per batch size (seconds).

    Each batch is ``B`` random prompts of ``context_len`` tokens, each generating ``decode_steps + 1``
    tokens (EOS ignored), with a cache large enough for all of them (no preemption).

    Returns:
        columns batch_size, step_seconds (median over decode steps), tokens_per_s (B / step time),
        step_cost_vs_smallest and tokens_per_s_vs_smallest (ratios to the smallest batch measured).

    Raises:
        ValueError: an empty or non-positive batch size, or ``context_len`` / ``decode_steps`` < 1.
    """
    if not batch_sizes or min(batch_sizes) < 1 or context_len < 1 or decode_steps < 1:
        raise ValueError(f"need batch sizes ≥ 1, context_len ≥ 1, decode_steps ≥ 1; got {batch_sizes}, "
                         f"{context_len}, {decode_steps}")
    tokens_per_seq = context_len + decode_steps + 1
    blocks = max(batch_sizes) * -(-tokens_per_seq // block_size)
    with torch_threads(num_threads):
        llm = LLM(model_path, block_size=block_size, num_gpu_blocks=blocks, max_num_seqs=max(batch_sizes))
        rng = np.random.default_rng(0)
        vocab = llm.model.config.vocab_size
        params = SamplingParams(temperature=0, max_tokens=decode_steps + 1, ignore_eos=True)
        llm.generate([rng.integers(3, vocab, size=context_len).tolist()] * 2, params, use_tqdm=False)  # warm-up
        rows = []
        for b in batch_sizes:
            prompts = [rng.integers(3, vocab, size=context_len).tolist() for _ in range(b)]
            llm.generate(prompts, params, use_tqdm=False)
            times = [s.seconds for s in llm.last_stats.steps if not s.is_prefill and s.num_seqs == b]
            rows.append({"batch_size": b, "step_seconds": float(np.median(times))})
    df = pd.DataFrame(rows)
    df["tokens_per_s"] = df["batch_size"] / df["step_seconds"]
    smallest = df.loc[df["batch_size"].idxmin()]
    df["step_cost_vs_smallest"] = df["step_seconds"] / smallest["step_seconds"]
    df["tokens_per_s_vs_smallest"] = df["tokens_per_s"] / smallest["tokens_per_s"]
    return df


def op_time_shares(model_path=DEFAULT_MODEL, *, num_requests: int = 64, kv_cache_tokens: int = 8192,
                   block_size: int = DEFAULT_BLOCK_SIZE, seed: int = 0, max_output_len: int | None = None,
                   num_threads: int | None = 1) -> pd.DataFrame:
    """Share of the paged engine's wall time per op category, serving ShareGPT-length requests.

    The requests are :func:`paged.experiments.nb05_engine.engine.sharegpt_requests`, output lengths clipped to
    ``max_output_len`` tokens when given (a short profile for tests); the profiler adds a few µs per op,
    so absolute times are inflated slightly, shares much less.

    Returns:
        columns category, seconds (summed self CPU time), share (of wall time), with a final row
        "Python and framework (wall − ops)" for the time outside torch ops.
    """
    with torch_threads(num_threads):
        llm = LLM(model_path, block_size=block_size, num_gpu_blocks=kv_cache_tokens // block_size)
        prompts, outputs = sharegpt_requests(num_requests, llm.max_model_len, llm.model.config.vocab_size, seed)
        if max_output_len is not None:
            outputs = [min(o, max_output_len) for o in outputs]
        params = [SamplingParams(temperature=0, max_tokens=o, ignore_eos=True) for o in outputs]
        llm.generate(prompts[:4], params[:4], use_tqdm=False)  # warm-up
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            llm.generate(prompts, params, use_tqdm=False)
            wall = time.perf_counter() - start
    seconds: dict[str, float] = {}
    for event in prof.key_averages():
        category = OP_CATEGORIES.get(event.key, "other torch ops")
        seconds[category] = seconds.get(category, 0.0) + event.self_cpu_time_total / 1e6
    rows = sorted(({"category": k, "seconds": v} for k, v in seconds.items()), key=lambda r: -r["seconds"])
    rows.append({"category": "Python and framework (wall − ops)", "seconds": max(0.0, wall - sum(seconds.values()))})
    df = pd.DataFrame(rows)
    df["share"] = df["seconds"] / wall
    return df


