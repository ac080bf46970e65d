"""Measured throughput of the real engine vs contiguous-Max and Hugging Face (issue 5 §4, paper §6.2).

``python -m paged.bench.engine`` serves the same ShareGPT-length requests with one KV memory
budget under four systems and prints each one's tokens/s, requests/s, batch size and peak KV memory
as ratios to the paged engine:

* ``paged``: :class:`paged.engine.LLM` (paged KV cache);
* ``orca-max``: the same engine with ``kv_manager="contiguous-max"`` (one max-length reservation per
  sequence, §6.1), so only memory management differs;
* ``hf-generate``: ``model.generate`` in static batches as large as the budget allows;
* ``hf-generate-batch``: transformers' continuous batching with its own paged cache.

:func:`sharing_savings` measures Fig. 15: blocks in use with sharing vs without, for parallel
sampling and beam search.

Requests: lengths from ``data/sharegpt_lengths.csv`` (:func:`paged.workloads.load_trace`), scaled by
``max_model_len / 2048`` to the model's context; prompt tokens are random ids (only lengths matter);
EOS is ignored so every request generates exactly its trace output length. Every system serves the
identical request list, after the same untimed warm-up (4 short requests on that system).

Workload size: the default 128 requests (at 8192 KV slots, the shipped 1024-token model) fill the
paged cache (its batch is bounded by memory, the paper's mechanism), and the few longest requests'
lone tail is ~10% of the paged run. With 48 requests everything fits at once (peak ~5.6k of 8.2k
slots) and half the decode steps ran at batch ≤ 8 waiting for the 3 longest requests.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from paged.bench import bench_parser
from paged.cli import nonnegative_int, positive_int, run_command, seed_int
from paged.engine import LLM, SamplingParams
from paged.hf_baselines import run_hf_generate_batch, run_hf_static
from paged.workloads import SHAREGPT_LENGTHS_CSV, load_trace

__all__ = ["DEFAULT_MODEL", "sharegpt_requests", "throughput_comparison", "sharing_savings", "torch_threads", "main"]

DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "data" / "models" / "sharegpt-llama-tiny"
SYSTEMS = ("paged", "orca-max", "hf-generate", "hf-generate-batch")


def sharegpt_requests(num_requests: int, max_model_len: int, vocab_size: int, seed: int = 0,
                      length_scale: float | None = None) -> tuple[list[list[int]], list[int]]:
    """``num_requests`` (prompt token ids, output length) pairs with ShareGPT lengths (§6.1).

    Lengths are multiplied by ``length_scale`` (default ``max_model_len / 2048``), rounded, at least 1,
    and clipped so prompt + output ≤ ``max_model_len``.
    """
    trace = load_trace(SHAREGPT_LENGTHS_CSV)
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(trace), size=num_requests, replace=num_requests > len(trace))
    scale = max_model_len / 2048 if length_scale is None else length_scale
    prompts, outputs = [], []
    for i in idx:
        req = trace[int(i)]
        p = max(1, round(req.prompt_len * scale))
        o = max(1, min(round(req.output_len * scale), max_model_len - p))
        prompts.append(rng.integers(3, vocab_size, size=p).tolist())
        outputs.append(o)
    return prompts, outputs


def _engine_row(system: str, llm: LLM, prompts, outputs) -> dict:
    params = [SamplingParams(temperature=0, max_tokens=o, ignore_eos=True) for o in outputs]
    llm.generate(prompts, params, use_tqdm=False)
    stats = llm.last_stats
    return {"system": system, "seconds": stats.elapsed, "output_tokens": stats.generated_tokens,
            "max_batch_size": stats.max_batch_size, "mean_batch_size": stats.mean_batch_size,
            "peak_kv_bytes": stats.peak_kv_bytes, "num_preemptions": stats.num_preemptions}


def throughput_comparison(model_path=DEFAULT_MODEL, *, num_requests: int = 128, kv_cache_tokens: int = 8192,
                          block_size: int = 16, seed: int = 0, length_scale: float | None = None,
                          systems=SYSTEMS, max_num_seqs: int = 256, num_threads: int | None = None) -> pd.DataFrame:
    """Serve the same requests under each system with ``kv_cache_tokens`` KV slots; one row per system.

    ``num_threads`` sets ``torch.set_num_threads`` for the whole comparison (every system; restored
    afterwards); None keeps torch's setting. On a CPU shared with other jobs, 1 thread avoids the
    stalls of a 2-thread pool whose second core is busy (then every system slows many-fold).

    Columns: system, seconds, output_tokens, tokens_per_s, requests_per_s, max_batch_size,
    mean_batch_size, peak_kv_bytes, num_preemptions, and ``*_ratio`` columns (each system / paged).

    Raises:
        ValueError: unknown system name, ``kv_cache_tokens`` < ``block_size``, or ``num_threads`` < 1.
    """
    if kv_cache_tokens < block_size:
        raise ValueError(f"kv_cache_tokens={kv_cache_tokens} is less than one block of block_size={block_size} tokens")
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise ValueError(f"unknown systems {sorted(unknown)}; choose from {SYSTEMS}")
    with torch_threads(num_threads):
        df = _compare(model_path, num_requests, kv_cache_tokens, block_size, seed, length_scale, systems,
                      max_num_seqs)
        df["num_threads"] = torch.get_num_threads()
    return df


@contextmanager
def torch_threads(num_threads: int | None):
    """Run the body with ``torch.set_num_threads(num_threads)`` (None: unchanged); restore it after.

    Raises:
        ValueError: ``num_threads`` < 1.
    """
    if num_threads is not None and num_threads < 1:
        raise ValueError(f"num_threads must be ≥ 1 or None, got {num_threads}")
    previous = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _compare(model_path, num_requests, kv_cache_tokens, block_size, seed, length_scale, systems,
             max_num_seqs) -> pd.DataFrame:
    paged = LLM(model_path, block_size=block_size, num_gpu_blocks=kv_cache_tokens // block_size,
                max_num_seqs=max_num_seqs)
    model = paged.model
    prompts, outputs = sharegpt_requests(num_requests, paged.max_model_len, model.config.vocab_size, seed,
                                         length_scale)
    warm_prompts, warm_outputs = prompts[:4], [4] * min(4, len(prompts))  # untimed, the same for every system
    bytes_per_slot = paged.bytes_per_slot
    rows = []
    for system in systems:
        if system in ("paged", "orca-max"):
            llm = paged if system == "paged" else LLM(
                model, tokenizer=paged.tokenizer, block_size=block_size, num_gpu_blocks=kv_cache_tokens // block_size,
                kv_manager="contiguous-max", max_num_seqs=max_num_seqs)
            _engine_row(system, llm, warm_prompts, warm_outputs)
            rows.append(_engine_row(system, llm, prompts, outputs))
        else:
            run = run_hf_static if system == "hf-generate" else run_hf_generate_batch
            run(model, warm_prompts, warm_outputs, kv_cache_tokens)
            r = run(model, prompts, outputs, kv_cache_tokens)
            rows.append({"system": system, "seconds": r.seconds, "output_tokens": r.output_tokens,
                         "max_batch_size": r.max_batch_size, "mean_batch_size": r.mean_batch_size,
                         "peak_kv_bytes": r.peak_kv_slots * bytes_per_slot, "num_preemptions": 0})
    df = pd.DataFrame(rows)
    df["tokens_per_s"] = df["output_tokens"] / df["seconds"]
    df["requests_per_s"] = num_requests / df["seconds"]
    base = df.set_index("system").loc["paged"] if "paged" in set(df["system"]) else df.iloc[0]
    for col in ("tokens_per_s", "requests_per_s", "max_batch_size", "mean_batch_size", "peak_kv_bytes"):
        df[f"{col}_ratio"] = df[col] / base[col]
    df["num_requests"] = num_requests
    df["kv_cache_tokens"] = kv_cache_tokens
    return df


def sharing_savings(model_path=DEFAULT_MODEL, *, num_requests: int = 8, widths=(2, 4, 6), max_tokens: int = 32,
                    block_size: int = 16, seed: int = 0, length_scale: float | None = None) -> pd.DataFrame:
    """Fig. 15: KV blocks in use with sharing vs without, parallel sampling (n) and beam search (width).

    Per setting, the engine runs ``num_requests`` ShareGPT-length prompts; every decode step records the
    physical blocks in use and the blocks the same sequences would hold with no sharing (each sequence
    its own copy of every block). Savings = 1 − Σ in use / Σ without sharing over all decode steps.
    """
    llm = LLM(model_path, block_size=block_size)
    prompts, _ = sharegpt_requests(num_requests, llm.max_model_len - max_tokens, llm.model.config.vocab_size, seed,
                                   length_scale)
    rows = []
    for mode in ("parallel sampling", "beam search"):
        for w in widths:
            if mode == "parallel sampling":
                params = SamplingParams(n=w, temperature=1.0, seed=seed, max_tokens=max_tokens, ignore_eos=True)
            else:
                params = SamplingParams(beam_width=w, max_tokens=max_tokens, ignore_eos=True)
            llm.generate(prompts, params, use_tqdm=False)
            steps = [s for s in llm.last_stats.steps if not s.is_prefill and s.blocks_without_sharing]
            used = sum(s.blocks_in_use for s in steps)
            unshared = sum(s.blocks_without_sharing for s in steps)
            rows.append({"mode": mode, "width": w, "blocks_in_use": used, "blocks_without_sharing": unshared,
                         "memory_saving": 1 - used / unshared, "decode_steps": len(steps)})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> None:
    """CLI: print the throughput ratios (and optionally the sharing savings)."""
    parser = bench_parser("paged.bench.engine", __doc__)
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--num-requests", type=positive_int, default=128)
    parser.add_argument("--kv-cache-tokens", type=positive_int, default=8192, help="KV budget for every system (tokens)")
    parser.add_argument("--block-size", type=positive_int, default=16)
    parser.add_argument("--seed", type=seed_int, default=0)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--threads", type=nonnegative_int, default=1,
                        help="torch threads for every system (1: steady on a shared CPU; 0: torch's default)")
    parser.add_argument("--sharing", action="store_true", help="also measure Fig. 15 sharing savings")
    run_command(parser, _report, argv)


def _report(args) -> None:
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    df = throughput_comparison(args.model, num_requests=args.num_requests, kv_cache_tokens=args.kv_cache_tokens,
                               block_size=args.block_size, seed=args.seed, systems=args.systems.split(","),
                               num_threads=args.threads or None)
    cols = ["system", "tokens_per_s", "requests_per_s", "mean_batch_size", "max_batch_size", "peak_kv_bytes",
            "tokens_per_s_ratio", "requests_per_s_ratio", "mean_batch_size_ratio", "peak_kv_bytes_ratio"]
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(df[cols].round(3).to_string(index=False))
    if args.sharing:
        print(sharing_savings(args.model, block_size=args.block_size, seed=args.seed).round(3).to_string(index=False))
    print(f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
