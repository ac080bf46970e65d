"""Notebook 05's driver: the real engine's throughput vs Orca (Max) and Hugging Face, sharing (§6.2, §6.3).

:func:`throughput_comparison` serves the same ShareGPT-length requests with one KV memory
budget under four systems and prints each one's tokens/s, requests/s, batch size and peak KV memory
as ratios to the paged engine:

* ``paged``: :class:`paged.engine.LLM` (paged KV cache);
* ``orca-max``: the same engine with ``kv_manager="orca-max"`` (one max-length reservation per
  sequence, §6.1), so only memory management differs;
* ``hf-generate``: ``model.generate`` in static batches as large as the budget allows;
* ``hf-generate-batch``: transformers' continuous batching with its own paged cache.

:func:`sharing_savings` measures Fig. 15: blocks in use with sharing vs without, for parallel
sampling and beam search.

Requests: lengths from the committed ShareGPT trace (:func:`paged.workloads.get_trace`), scaled by
``max_model_len / 2048`` to the model's context; prompt tokens are random ids (only lengths matter);
EOS is ignored so every request generates exactly its trace output length. Every system serves the
identical request list, after the same untimed warm-up (4 short requests on that system).

Workload size: the default 128 requests (at 8192 KV slots, the shipped 1024-token model) fill the
paged cache (its batch is bounded by memory, the paper's mechanism), and the few longest requests'
lone tail is ~10% of the paged run. With 48 requests everything fits at once (peak ~5.6k of 8.2k
slots) and half the decode steps ran at batch ≤ 8 waiting for the 3 longest requests.
"""

from __future__ import annotations

from contextlib import contextmanager

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from paged.engine import LLM, SamplingParams
from paged.experiments.hf_baselines import run_hf_generate_batch, run_hf_static
from paged.experiments.plotting import SYSTEM_COLORS
from paged.systems import system_names
from paged.workloads import data_path, get_trace

__all__ = ["DEFAULT_MODEL", "SYSTEMS", "sharegpt_requests", "throughput_comparison", "sharing_savings", "torch_threads",
           "plot_throughput", "plot_step_cost", "plot_sharing", "paper_comparison"]

#: The small model shipped with the package (``data/models/sharegpt-llama-tiny``).
DEFAULT_MODEL = data_path("models/sharegpt-llama-tiny")
#: Systems the real engine compares (the registry's engine systems: paged, Orca (Max), HF baselines).
SYSTEMS = ("paged", "orca-max") + tuple(s for s in system_names(executor="engine") if s.startswith("hf-"))


def sharegpt_requests(num_requests: int, max_model_len: int, vocab_size: int, seed: int = 0,
                      length_scale: float | None = None, trace: str = "sharegpt") -> tuple[list[list[int]], list[int]]:
    """``num_requests`` (prompt token ids, output length) pairs with ShareGPT lengths (§6.1), or those
    of another named ``trace`` (e.g. ``"alpaca"``).

    The lengths are :func:`paged.workloads.get_trace` ``(trace, num_requests, seed=seed)``,
    multiplied by ``length_scale`` (default ``max_model_len / 2048``), rounded, at least 1, and clipped
    so prompt + output ≤ ``max_model_len``; prompt token ids are random (only lengths matter).

    Raises:
        ValueError: more requests than the trace holds.
    """
    trace = get_trace(trace, num_requests, seed=seed)  # sampled without replacement
    rng = np.random.default_rng(seed)
    scale = max_model_len / 2048 if length_scale is None else length_scale
    prompts, outputs = [], []
    for req in trace:
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
                kv_manager="orca-max", max_num_seqs=max_num_seqs)
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


def sharing_savings(model_path=DEFAULT_MODEL, *, num_requests: int = 8, widths=(2, 4, 6), max_tokens: int | None = 32,
                    block_size: int = 16, seed: int = 0, length_scale: float | None = None,
                    trace: str = "sharegpt") -> pd.DataFrame:
    """Fig. 15: KV blocks in use with sharing vs without, parallel sampling (n) and beam search (width).

    Per setting, the engine runs ``num_requests`` prompts with ``trace``'s lengths
    (:func:`sharegpt_requests`); every decode step records the physical blocks in use and the blocks the
    same sequences would hold with no sharing (each sequence its own copy of every block). Savings =
    1 − Σ in use / Σ without sharing over all decode steps. Each sample or beam generates ``max_tokens``
    tokens, or, with ``max_tokens=None``, its request's output length from the trace (EOS ignored).
    """
    llm = LLM(model_path, block_size=block_size)
    vocab = llm.model.config.vocab_size
    if max_tokens is None:  # the trace's output lengths, as sharegpt_requests scales and clips them
        prompts, outputs = sharegpt_requests(num_requests, llm.max_model_len, vocab, seed, length_scale, trace)
    else:
        prompts, outputs = sharegpt_requests(num_requests, llm.max_model_len - max_tokens, vocab, seed,
                                             length_scale, trace)
    rows = []
    for mode in ("parallel sampling", "beam search"):
        for w in widths:
            lens = outputs if max_tokens is None else [max_tokens] * len(prompts)
            if mode == "parallel sampling":
                params = [SamplingParams(n=w, temperature=1.0, seed=seed, max_tokens=m, ignore_eos=True) for m in lens]
            else:
                params = [SamplingParams(beam_width=w, max_tokens=m, ignore_eos=True) for m in lens]
            llm.generate(prompts, params, use_tqdm=False)
            steps = [s for s in llm.last_stats.steps if not s.is_prefill and s.blocks_without_sharing]
            used = sum(s.blocks_in_use for s in steps)
            unshared = sum(s.blocks_without_sharing for s in steps)
            rows.append({"mode": mode, "width": w, "blocks_in_use": used, "blocks_without_sharing": unshared,
                         "memory_saving": 1 - used / unshared, "decode_steps": len(steps)})
    return pd.DataFrame(rows)


def plot_throughput(df: pd.DataFrame, num_requests: int, kv_cache_tokens: int):
    """Tokens/s ÷ paged (left) and mean decode batch (right) per system (:func:`throughput_comparison` rows)."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    colors = [SYSTEM_COLORS.get(s, "0.4") for s in df["system"]]
    axes[0].bar(df["system"], df["tokens_per_s_ratio"], color=colors)
    axes[0].set_ylabel("tokens/s ÷ paged")
    axes[1].bar(df["system"], df["mean_batch_size"], color=colors)
    axes[1].set_ylabel("mean batch size (sequences)")
    for ax in axes:
        ax.tick_params(axis="x", rotation=30)
    fig.suptitle(f"{num_requests} ShareGPT-length requests, {kv_cache_tokens} KV slots, CPU")
    fig.tight_layout()
    return fig


def plot_step_cost(cost: pd.DataFrame):
    """Decode tokens/s vs batch size (:func:`paged.experiments.engine_profile.decode_step_cost` rows)."""
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(cost["batch_size"], cost["tokens_per_s"], marker="o")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("decode batch size (sequences)")
    ax.set_ylabel("tokens/s")
    ax.set_title("Paged engine decode throughput vs batch, CPU")
    fig.tight_layout()
    return fig


def plot_sharing(share: pd.DataFrame):
    """KV blocks saved by sharing (%) vs samples / beam width (:func:`sharing_savings` rows)."""
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for mode, part in share.groupby("mode"):
        ax.plot(part["width"], 100 * part["memory_saving"], marker="o", label=mode)
    ax.set_xlabel("samples n / beam width")
    ax.set_ylabel("KV blocks saved (%)")
    ax.legend()
    fig.tight_layout()
    return fig


def paper_comparison(df: pd.DataFrame, cost: pd.DataFrame, share: pd.DataFrame) -> pd.DataFrame:
    """The paper's claims beside this run: throughput and batch ratios, the step cost, sharing.

    Args:
        df: :func:`throughput_comparison` rows.
        cost: :func:`paged.experiments.engine_profile.decode_step_cost` rows.
        share: :func:`sharing_savings` rows.

    Returns:
        Columns ``claim``, ``paper``, ``this run`` (text).
    """
    from paged.experiments.paper import FIG13_BATCHED_REQUESTS, FIG15_SHARING_SAVED_PERCENT, SHAREGPT_SHARING_RANGES

    t = df.set_index("system")["tokens_per_s_ratio"]
    b = df.set_index("system")["mean_batch_size_ratio"]
    mean_batch = df.set_index("system")["mean_batch_size"]
    speedup = cost.set_index("batch_size")["tokens_per_s"]

    def nearest(x):  # the measured batch size closest to x
        return min(speedup.index, key=lambda s: abs(s - x))

    if {"paged", "orca-max"} <= set(mean_batch.index):
        small, big = nearest(mean_batch["orca-max"]), nearest(mean_batch["paged"])
    else:
        small, big = speedup.index.min(), speedup.index.max()
    widths = sorted(set(share["width"]))

    def saved(mode):
        return ", ".join(f"{100 * v:.0f}%" for v in share[share["mode"] == mode]["memory_saving"])

    def paper_range(mode):
        alpaca = FIG15_SHARING_SAVED_PERCENT["parallel" if mode == "parallel sampling" else "beam"]
        lo, hi = SHAREGPT_SHARING_RANGES["parallel" if mode == "parallel sampling" else "beam"]
        return f"ShareGPT {lo}-{hi}%; Alpaca {min(alpaca.values()):.1f}-{max(alpaca.values()):.1f}% (Fig. 15)"

    fig13 = FIG13_BATCHED_REQUESTS["sharegpt@2"]
    rows = [
        {"claim": "paged / Orca (Max) throughput", "paper": "2.7-8x sustained rate (ShareGPT, Fig. 12)",
         "this run": f"{1 / t['orca-max']:.2f}x tokens/s" if "orca-max" in t else "n/a"},
        {"claim": "paged / Orca (Max) mean batch (the memory effect)",
         "paper": f"{fig13['paged']:.2f} / {fig13['orca-max']:.2f} = {fig13['paged'] / fig13['orca-max']:.1f}x (Fig. 13)",
         "this run": f"{1 / b['orca-max']:.2f}x" if "orca-max" in b else "n/a"},
        {"claim": f"decode tokens/s at batch {big} / batch {small} (step-cost table)",
         "paper": "(GPU: close to the batch ratio)",
         "this run": f"{speedup[big] / speedup[small]:.2f}x for {big / small:.1f}x the batch"},
        {"claim": "paged / static batching throughput", "paper": "up to 22x vs FasterTransformer",
         "this run": f"{1 / t['hf-generate']:.2f}x" if "hf-generate" in t else "n/a"},
        {"claim": "paged / HF generate_batch", "paper": "(not in paper)",
         "this run": f"{1 / t['hf-generate-batch']:.2f}x" if "hf-generate-batch" in t else "n/a"},
    ]
    for mode in ("parallel sampling", "beam search"):
        rows.append({"claim": f"{mode} memory saved (n / width = {', '.join(map(str, widths))})",
                     "paper": paper_range(mode), "this run": saved(mode)})
    return pd.DataFrame(rows)

