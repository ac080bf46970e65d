"""Notebook 05's driver: the real engine's throughput vs Orca (Max) and Hugging Face, sharing (§6.2, §6.3).

:func:`throughput_comparison` serves the same ShareGPT-length requests with one KV memory
budget under each system, in interleaved rounds, and gives each one's tokens/s, requests/s, batch
size and peak KV memory as ratios to the paged engine (:func:`ratio_summary`: median and spread):

* ``paged``: :class:`paged.engine.LLM` (paged KV cache), preempting by recomputation (vLLM's default
  for single-sequence requests, §4.5) unless ``preemption="swap"``;
* ``paged-swap``: the same, preempting by swapping to a swap space of ``swap_space`` × the KV budget
  (vLLM keeps CPU swap space beside the GPU cache, §4.5; on a CPU a swap is a memory copy);
* ``orca-max``: the same engine with ``kv_manager="orca-max"`` (one max-length reservation per
  sequence, §6.1), so only memory management differs;
* ``hf-generate``: ``model.generate`` in static batches as large as the budget allows;
* ``hf-generate-batch``: transformers' continuous batching with its own paged cache.

:func:`sharing_savings` measures Fig. 15: blocks in use with sharing vs without, for parallel
sampling and beam search.

Requests: lengths from the committed ShareGPT trace (:func:`paged.workloads.get_trace`), scaled by
``max_model_len / 2048`` to the model's context; prompt tokens are random ids (only lengths matter);
EOS is ignored so every request generates exactly its trace output length. Every system serves the
identical request list, after the same untimed warm-up (4 short requests on that system). The
timed region of every system is its serving only: engines and caches are built before, HF's
continuous-batching manager is started before and torn down after it.

Workload size: the default 128 requests (at 8192 KV slots, the shipped 1024-token model) fill the
paged cache (its batch is bounded by memory, the paper's mechanism), and the few longest requests'
lone tail is ~10% of the paged run. With 48 requests everything fits at once (peak ~5.6k of 8.2k
slots) and half the decode steps ran at batch ≤ 8 waiting for the 3 longest requests.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from paged.block.allocator import DEFAULT_BLOCK_SIZE
from paged.engine import LLM, SamplingParams
from paged.experiments.nb05_engine.hf_baselines import run_hf_generate_batch, run_hf_static
from paged.experiments.notebook.plotting import SYSTEM_COLORS, integer_ticks, plain_log_ticks
from paged.systems import system_names
from paged.workloads import data_path, get_trace

__all__ = ["DEFAULT_MODEL", "SYSTEMS", "sharegpt_requests", "throughput_comparison", "ratio_summary", "sharing_savings",
           "torch_threads",
           "plot_throughput", "plot_step_cost", "plot_sharing", "paper_comparison", "summary_text"]

#: The small model shipped with the package (``data/models/sharegpt-llama-tiny``).
DEFAULT_MODEL = data_path("models/sharegpt-llama-tiny")
#: Systems the real engine compares (the registry's engine systems: paged, Orca (Max), HF baselines).
SYSTEMS = ("paged", "paged-swap", "orca-max") + tuple(s for s in system_names(executor="engine")
                                                     if s.startswith("hf-"))


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
    stats, result = llm.last_stats, llm.last_result
    return {"system": system, "seconds": stats.elapsed, "output_tokens": stats.generated_tokens,
            "max_batch_size": stats.max_batch_size, "mean_batch_size": stats.mean_batch_size,
            "peak_kv_bytes": stats.peak_kv_bytes, "num_preemptions": stats.num_preemptions,
            "recomputed_share": result.recomputed_tokens / result.prefill_tokens if result.prefill_tokens else 0.0}


def throughput_comparison(model_path=DEFAULT_MODEL, *, num_requests: int = 128, kv_cache_tokens: int = 8192,
                          block_size: int = DEFAULT_BLOCK_SIZE, seed: int = 0, length_scale: float | None = None,
                          systems=SYSTEMS, max_num_seqs: int = 256, num_threads: int | None = None,
                          rounds: int = 1, preemption: str = "recompute", swap_space: float = 0.25) -> pd.DataFrame:
    """Serve the same requests under each system with ``kv_cache_tokens`` KV slots, ``rounds`` times.

    The systems are built once and warmed up once (4 short requests each, untimed); then every round
    runs each system once, in an order rotated by one each round, so the systems share the machine's
    load alike (interleaved rounds in one process). ``num_threads`` sets ``torch.set_num_threads``
    for the whole comparison (restored afterwards); None keeps torch's setting. ``preemption`` is
    the paged engine's (§4.5; Orca (Max) never preempts); ``paged-swap`` always swaps: it copies a
    preempted request's blocks to a swap space of ``swap_space`` × the KV budget (vLLM's default 4 GiB
    per GPU is about a third of the KV cache of the paper's OPT-13B server) and back, and recomputes
    it only when the swap space is full.

    Columns, one row per (round, system): round, system, seconds, output_tokens, tokens_per_s,
    requests_per_s, max_batch_size, mean_batch_size (measured: the engine's and HF static's per
    decode step, HF continuous batching's decoding requests per forward), peak_kv_bytes,
    num_preemptions, recomputed_share (of the paged engine's prefill tokens), load_1min (the
    machine's load average after the run), ``*_ratio`` columns (each system ÷ paged, same round).

    Raises:
        ValueError: unknown system name, ``kv_cache_tokens`` < ``block_size``, ``rounds`` or
            ``num_threads`` < 1.
    """
    if kv_cache_tokens < block_size:
        raise ValueError(f"kv_cache_tokens={kv_cache_tokens} is less than one block of block_size={block_size} tokens")
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise ValueError(f"unknown systems {sorted(unknown)}; choose from {SYSTEMS}")
    if rounds < 1:
        raise ValueError(f"rounds must be ≥ 1, got {rounds}")
    if not 0 <= swap_space <= 1:
        raise ValueError(f"swap_space must be a fraction of the KV budget in [0, 1], got {swap_space}")
    with torch_threads(num_threads):
        df = _compare(model_path, num_requests, kv_cache_tokens, block_size, seed, length_scale, list(systems),
                      max_num_seqs, rounds, preemption, swap_space)
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
             max_num_seqs, rounds, preemption, swap_space) -> pd.DataFrame:
    blocks = kv_cache_tokens // block_size
    paged = LLM(model_path, block_size=block_size, num_gpu_blocks=blocks, max_num_seqs=max_num_seqs,
                preemption=preemption, num_cpu_blocks=int(swap_space * blocks) if preemption == "swap" else 0)
    model = paged.model
    prompts, outputs = sharegpt_requests(num_requests, paged.max_model_len, model.config.vocab_size, seed,
                                         length_scale)
    warm_prompts, warm_outputs = prompts[:4], [4] * min(4, len(prompts))  # untimed, the same for every system
    bytes_per_slot = paged.bytes_per_slot
    engines = {"paged": paged}
    if "paged-swap" in systems:
        engines["paged-swap"] = LLM(model, tokenizer=paged.tokenizer, block_size=block_size, num_gpu_blocks=blocks,
                                    max_num_seqs=max_num_seqs, preemption="swap", num_cpu_blocks=int(swap_space * blocks))
    if "orca-max" in systems:
        engines["orca-max"] = LLM(model, tokenizer=paged.tokenizer, block_size=block_size,
                                  num_gpu_blocks=kv_cache_tokens // block_size, kv_manager="orca-max",
                                  max_num_seqs=max_num_seqs)

    def run(system, prompts, outputs):
        if system in engines:
            return _engine_row(system, engines[system], prompts, outputs)
        r = (run_hf_static if system == "hf-generate" else run_hf_generate_batch)(model, prompts, outputs,
                                                                                  kv_cache_tokens)
        return {"system": system, "seconds": r.seconds, "output_tokens": r.output_tokens,
                "max_batch_size": r.max_batch_size, "mean_batch_size": r.mean_batch_size,
                "peak_kv_bytes": r.peak_kv_slots * bytes_per_slot, "num_preemptions": 0, "recomputed_share": 0.0}

    for system in systems:
        run(system, warm_prompts, warm_outputs)
    rows = []
    for k in range(rounds):
        for system in systems[k % len(systems):] + systems[:k % len(systems)]:
            rows.append({"round": k, **run(system, prompts, outputs), "load_1min": os.getloadavg()[0]})
    df = pd.DataFrame(rows)
    df["tokens_per_s"] = df["output_tokens"] / df["seconds"]
    df["requests_per_s"] = num_requests / df["seconds"]
    if "paged" in systems:
        base = df[df["system"] == "paged"].set_index("round")
        for col in ("tokens_per_s", "requests_per_s", "max_batch_size", "mean_batch_size", "peak_kv_bytes"):
            df[f"{col}_ratio"] = df[col] / df["round"].map(base[col])
    df["num_requests"] = num_requests
    df["kv_cache_tokens"] = kv_cache_tokens
    df["preemption"] = preemption
    order = {s: i for i, s in enumerate(systems)}
    df = df.assign(_order=df["system"].map(order)).sort_values(["round", "_order"]).drop(columns="_order")
    return df.reset_index(drop=True)


def ratio_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Paged ÷ each system, tokens/s, over the rounds of :func:`throughput_comparison`: one row per
    system with ``median``, ``min``, ``max`` (each round's paired ratio), ``rounds`` and the median
    mean batch of both; paged itself is left out.

    Raises:
        ValueError: if ``df`` has no paged rows.
    """
    if "tokens_per_s_ratio" not in df.columns:
        raise ValueError("no paged rows to divide by")
    rows = []
    for system, part in df[df["system"] != "paged"].groupby("system", sort=False):
        ratio = 1.0 / part["tokens_per_s_ratio"]
        rows.append({"system": system, "paged_speedup_median": float(np.median(ratio)),
                     "paged_speedup_min": float(ratio.min()), "paged_speedup_max": float(ratio.max()),
                     "rounds": len(part), "mean_batch": float(part["mean_batch_size"].median()),
                     "paged_mean_batch": float(df.loc[df["system"] == "paged", "mean_batch_size"].median())})
    return pd.DataFrame(rows)


def sharing_savings(model_path=DEFAULT_MODEL, *, num_requests: int = 8, widths=(2, 4, 6), max_tokens: int | None = 32,
                    block_size: int = DEFAULT_BLOCK_SIZE, seed: int = 0, length_scale: float | None = None,
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


def _medians(df: pd.DataFrame) -> pd.DataFrame:
    """Per system (first-seen order): the median over rounds of every numeric column."""
    return df.groupby("system", sort=False).median(numeric_only=True)


def plot_throughput(df: pd.DataFrame, num_requests: int, kv_cache_tokens: int):
    """Tokens/s ÷ paged (left; median over rounds, bars min–max) and mean decode batch (right) per
    system (:func:`throughput_comparison` rows)."""
    med = _medians(df)
    lo = df.groupby("system", sort=False)["tokens_per_s_ratio"].min()
    hi = df.groupby("system", sort=False)["tokens_per_s_ratio"].max()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    colors = [SYSTEM_COLORS.get(s, "0.4") for s in med.index]
    axes[0].bar(med.index, med["tokens_per_s_ratio"], color=colors,
                yerr=[med["tokens_per_s_ratio"] - lo, hi - med["tokens_per_s_ratio"]], capsize=3)
    axes[0].set_ylabel("tokens/s ÷ paged's")
    axes[0].set_title("throughput (median; bars: min–max of rounds)", fontsize=9)
    axes[1].bar(med.index, med["mean_batch_size"], color=colors)
    axes[1].set_ylabel("sequences")
    axes[1].set_title("mean decode batch", fontsize=9)
    for ax in axes:
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()  # the title (requests, KV slots, rounds) is the caller's: save_figure's claim
    return fig


def plot_step_cost(cost: pd.DataFrame):
    """Decode step time (ms, left) and the tokens/s it gives (right) vs batch size
    (:func:`paged.experiments.nb05_engine.engine_profile.decode_step_cost` rows)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3.2))
    a.plot(cost["batch_size"], 1e3 * cost["step_seconds"], marker="o")
    a.set(ylabel="decode step time (ms)", title="time per step", ylim=(0, None))
    b.plot(cost["batch_size"], cost["tokens_per_s"], marker="o")
    b.set(ylabel="tokens/s", title="throughput (batch ÷ step time)", ylim=(0, None))
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        plain_log_ticks(ax.xaxis)
        ax.set_xlabel("decode batch size (sequences)")
    fig.tight_layout()
    return fig


def plot_sharing(share: pd.DataFrame):
    """KV blocks saved by sharing (%) vs samples / beam width (:func:`sharing_savings` rows)."""
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for mode, part in share.groupby("mode"):
        ax.plot(part["width"], 100 * part["memory_saving"], marker="o", label=mode)
    ax.set_xlabel("samples n / beam width")
    integer_ticks(ax.xaxis)
    ax.set_ylabel("KV blocks saved (%)")
    ax.set_ylim(0, None)
    ax.legend(frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    return fig


def paper_comparison(df: pd.DataFrame, cost: pd.DataFrame, share: pd.DataFrame) -> pd.DataFrame:
    """The paper's claims beside this run: throughput and batch ratios, the step cost, sharing.

    Args:
        df: :func:`throughput_comparison` rows.
        cost: :func:`paged.experiments.nb05_engine.engine_profile.decode_step_cost` rows.
        share: :func:`sharing_savings` rows.

    Returns:
        Columns ``claim``, ``paper``, ``this run`` (text).
    """
    from paged.experiments.notebook.paper import FIG13_BATCHED_REQUESTS, FIG15_SHARING_SAVED_PERCENT, SHAREGPT_SHARING_RANGES

    med = _medians(df)
    t, b, mean_batch = med["tokens_per_s_ratio"], med["mean_batch_size_ratio"], med["mean_batch_size"]
    spread = {r["system"]: r for _, r in ratio_summary(df).iterrows()}
    speedup = cost.set_index("batch_size")["tokens_per_s"]

    def over(system):  # paged ÷ system, median over rounds (min–max)
        r = spread[system]
        n = int(r["rounds"])
        band = f" ({r['paged_speedup_min']:.2f}–{r['paged_speedup_max']:.2f}, {n} rounds)" if n > 1 else " (1 round)"
        return f"{r['paged_speedup_median']:.2f}x{band}"

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
         "this run": f"{over('orca-max')} tokens/s" if "orca-max" in t else "n/a"},
        {"claim": "paged / Orca (Max) mean batch (the memory effect)",
         "paper": f"{fig13['paged']:.2f} / {fig13['orca-max']:.2f} = {fig13['paged'] / fig13['orca-max']:.1f}x (Fig. 13)",
         "this run": f"{1 / b['orca-max']:.2f}x" if "orca-max" in b else "n/a"},
        {"claim": f"decode tokens/s at batch {big} / batch {small} (step-cost table)",
         "paper": "(GPU: close to the batch ratio)",
         "this run": f"{speedup[big] / speedup[small]:.2f}x for {big / small:.1f}x the batch"},
        {"claim": "paged / static batching throughput", "paper": "up to 22x vs FasterTransformer",
         "this run": over("hf-generate") if "hf-generate" in t else "n/a"},
        {"claim": "paged / HF generate_batch", "paper": "(not in paper)",
         "this run": over("hf-generate-batch") if "hf-generate-batch" in t else "n/a"},
    ]
    for mode in ("parallel sampling", "beam search"):
        rows.append({"claim": f"{mode} memory saved (n / width = {', '.join(map(str, widths))})",
                     "paper": paper_range(mode), "this run": saved(mode)})
    return pd.DataFrame(rows)



def summary_text(df: pd.DataFrame, cost: pd.DataFrame) -> str:
    """Markdown lines quoting :func:`throughput_comparison` and the step-cost table: each ratio's median
    and spread, the batch ratio, what a bigger batch costs per step, and the preemption mode's effect."""
    summary = ratio_summary(df).set_index("system")
    med = _medians(df)
    lines = []
    for system, r in summary.iterrows():
        rounds = int(r["rounds"])
        spread = (f"median of {rounds} rounds, {r['paged_speedup_min']:.2f}–{r['paged_speedup_max']:.2f}" if rounds > 1
                  else "one round: no spread")
        lines.append(f"* paged ÷ {system}: {r['paged_speedup_median']:.2f}× tokens/s ({spread}); mean decode batch "
                     f"{r['paged_mean_batch']:.1f} vs {r['mean_batch']:.1f}.")
    step = cost.set_index("batch_size")["step_seconds"]
    if len(step) > 1:
        lo, hi = step.index.min(), step.index.max()
        lines.append(f"* A decode step at batch {hi} costs {step[hi] / step[lo]:.1f}× one at batch {lo} "
                     f"({hi / lo:.0f}× the batch): on this CPU the batch is not free.")
    if "paged-swap" in med.index:
        lines.append(f"* paged ({df['preemption'].iloc[0]} preemption): {med.loc['paged', 'recomputed_share']:.0%} of its "
                     f"prefill tokens recompute preempted requests ({med.loc['paged', 'num_preemptions']:.0f} "
                     f"preemptions); paged-swap: {med.loc['paged-swap', 'recomputed_share']:.0%} (it recomputes "
                     f"only when its swap space is full).")
    lines.append(f"* Load average during the runs: {df['load_1min'].min():.1f}–{df['load_1min'].max():.1f}.")
    return "\n".join(lines)
