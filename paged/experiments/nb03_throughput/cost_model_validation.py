"""Simulated against measured iteration time: the cost model beside Vidur's A100 and H100 profiles.

Every throughput figure rests on the cost model (:mod:`paged.sim.cost_model`). Here it prices the
iterations that Vidur's profiles measured (:mod:`paged.sim.gpu_measurements`, ``data/vidur_*.csv``) and
each is set beside the sum of the measured kernels, as Vidur's own predictor sums them (layers × each
layer's operators; no LM head, no host costs, a contiguous attention kernel):

* **decode** and **prefill steps** of Meta-Llama-3-8B on one A100 (the layer of Llama-3.1-8B), batch
  1–256 × context 512–2,048 and prompts of 512 and 2,048 tokens, attention included (FlashInfer; the
  prefill's KV write at HBM speed, see ``tests/sim/test_gpu_measurements.py``);
* **steps without attention** of every profiled model, GPU and tensor-parallel degree (1, 4, 8), 1–2,048
  tokens: GEMMs, element-wise operators and two all-reduces per layer (the measured medians of the
  message's size bin, from 32K elements), where no attention profile of that model is reachable.

The twins say which of the simulated models each measured layer stands for. Cheap: about 300
evaluations of the cost model, no simulation.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from paged.experiments.notebook.ticks import plain_log_ticks
from paged.sim import gpu_measurements as gm
from paged.sim.config import DEFAULT_BLOCK_SIZE
from paged.sim.cost_model import CostModel, ServerSpec
from paged.sim.gpu_spec import GPUS
from paged.sim.model_spec import spec_from_config

__all__ = ["TWINS", "LAYERS", "iteration_points", "validation_summary", "plot_validation"]

#: Which simulated model each profiled layer stands for (shapes: :data:`paged.sim.gpu_measurements.VIDUR_SHAPES`).
TWINS = {"Meta-Llama-3-8B": "Llama-3.1-8B (same layer)", "Llama-2-7b-hf": "none (a 7B MHA layer)",
         "internlm-20b": "LLaMA-13B (same layer); OPT-13B (1.2 % more weights)",
         "Qwen-72B": "OPT-66B (86 % of its layer's weights)", "Meta-Llama-3-70B": "Llama-3.1-70B (same layer)",
         "Llama-2-70b-hf": "Llama-3.1-70B (same layer)"}
#: Layers of each profiled model (its Hugging Face config), to scale a layer to an iteration.
LAYERS = {"Meta-Llama-3-8B": 32, "Llama-2-7b-hf": 32, "internlm-20b": 60, "Qwen-72B": 80, "Meta-Llama-3-70B": 80,
          "Llama-2-70b-hf": 80}
_GPU = {"a100": "a100-80gb", "h100": "h100-sxm"}
_GEMMS = ("attn_pre_proj_us", "attn_post_proj_us", "mlp_up_proj_us", "mlp_down_proj_us")
_TOKENS = (1, 16, 64, 128, 256, 512, 2048)


def _cost(gpu: str, tp: int, model: str) -> CostModel:
    hidden, heads, kv_heads, inter = gm.VIDUR_SHAPES[model]
    config = type("Config", (), dict(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads,
                                     num_hidden_layers=LAYERS[model], intermediate_size=inter, vocab_size=32000))
    g = GPUS[_GPU[gpu]]
    server = ServerSpec(f"{tp}x{g.label}", tp, g.peak_flops, g.hbm_bytes_per_s, g.interconnect_bytes_per_s,
                        g.pcie_bytes_per_s, 2**40, g.name)
    # a contiguous kernel, as the measured FlashInfer one reads its KV: the block size prices nothing here
    return CostModel(spec_from_config(model, config), server, DEFAULT_BLOCK_SIZE, paged_kernel=False, cpu_scale=0.0)


def _all_reduce_us(table: pd.DataFrame, gpu: str, workers: int, size: float) -> float:
    row = table[(table["gpu"] == gpu) & (table["num_workers"] == workers) & (table["size_lo"] <= size)
                & (size < table["size_hi"])]
    return float(row["time_median_us"].iloc[0])


def iteration_points() -> pd.DataFrame:
    """One row per compared iteration: ``gpu, model, twin, tp, kind`` (``decode``, ``prefill``, ``without
    attention``), ``tokens`` (batch or prompt), ``context`` (tokens per sequence, decode), ``measured_s``,
    ``simulated_s``, ``ratio`` (simulated ÷ measured)."""
    layers, att, ar = gm.layer_medians(), gm.attention_medians(), gm.all_reduce_medians()
    rows = []

    def add(r, kind, tokens, context, measured, simulated):
        rows.append({"gpu": r.gpu, "model": r.model, "twin": TWINS[r.model], "tp": int(r.tp), "kind": kind,
                     "tokens": int(tokens), "context": int(context), "measured_s": measured, "simulated_s": simulated,
                     "ratio": simulated / measured})

    for r in layers.itertuples():
        if r.num_tokens not in _TOKENS:
            continue
        cost, n, L = _cost(r.gpu, int(r.tp), r.model), int(r.num_tokens), LAYERS[r.model]
        per_layer_us = sum(getattr(r, c) for c in _GEMMS) + r.elementwise_us
        head = cost.gemm_time(cost.model.embedding_params / cost.server.num_gpus, n, 1)
        if r.model == "Meta-Llama-3-8B" and r.gpu == "a100" and r.tp == 1:  # the attention profile's model
            for context in (512, 1024, 2048):
                if n > 256:
                    break
                dec = att[(att["kind"] == "decode") & (att["kv_tokens"] == context)].set_index("batch")
                attn_us = float(np.interp(n, dec.index, dec["attention_us"])) + 2.0  # + the KV write
                add(r, "decode", n, context, L * 1e-6 * (per_layer_us + attn_us), cost.decode_time(n, n * context) - head)
            pre = att[(att["kind"] == "prefill") & (att["prefill_tokens"] == n)]
            if len(pre):
                measured = L * 1e-6 * (per_layer_us + float(pre["attention_us"].iloc[0]))
                add(r, "prefill", n, 0, measured, cost.prefill_time([n]) - cost.gemm_time(
                    cost.model.embedding_params / cost.server.num_gpus, 1, 1))
        size = n * cost.model.hidden_size
        if r.tp > 1 and size < gm.ALL_REDUCE_MIN_SIZE:
            continue  # the smallest messages' bins hold one to four rows (gm.ALL_REDUCE_MIN_SIZE)
        measured = L * 1e-6 * (per_layer_us + (2 * _all_reduce_us(ar, r.gpu, int(r.tp), size) if r.tp > 1 else 0.0))
        simulated = L * (cost.gemm_time(cost.model.matmul_params / L / cost.server.num_gpus, n, 4)
                         + cost.elementwise_time(n) + 2 * cost.allreduce_time(n))
        add(r, "without attention", n, 0, measured, simulated)
    return pd.DataFrame(rows)


def validation_summary(points: pd.DataFrame) -> pd.DataFrame:
    """Per (kind, GPU, model, TP): points, and the lowest, median and highest ratio."""
    return (points.groupby(["kind", "gpu", "model", "twin", "tp"], sort=False)["ratio"]
            .agg(points="count", lowest="min", median="median", highest="max").reset_index())


def plot_validation(points: pd.DataFrame):
    """(a) Simulated vs measured iteration time (log-log, the diagonal and ±20 %); (b) simulated ÷ measured
    vs tokens per iteration, one colour per (GPU, model), one marker per kind.

    Raises:
        ValueError: if ``points`` is empty.
    """
    if not len(points):
        raise ValueError("no points to plot")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11.5, 4.6))
    keys = list(dict.fromkeys(zip(points["gpu"], points["model"])))
    colors = dict(zip(keys, plt.get_cmap("tab10")(np.arange(len(keys)) % 10)))
    markers = {"decode": "o", "prefill": "s", "without attention": "^"}
    first_of_key, first_of_kind = {}, {}  # the legend shows the style of a line drawn, never a proxy
    for (gpu, model, kind, tp), part in points.groupby(["gpu", "model", "kind", "tp"], sort=False):
        style = dict(color=colors[gpu, model], marker=markers.get(kind, "x"), linestyle="none", markersize=4,
                     markerfacecolor="none" if tp > 1 else colors[gpu, model])
        first_of_key.setdefault((gpu, model), style)
        if kind not in first_of_kind or tp > 1:  # an open marker says the kind without a model's colour
            first_of_kind[kind] = style
        ax1.plot(1e3 * part["measured_s"], 1e3 * part["simulated_s"], **style)
        ax2.plot(part["tokens"] * (1 + 0.04 * np.log2(tp)), part["ratio"], **style)
    lo, hi = 1e3 * points[["measured_s", "simulated_s"]].min().min(), 1e3 * points[["measured_s", "simulated_s"]].max().max()
    line = np.array([lo / 1.2, hi * 1.2])
    ax1.plot(line, line, color="black", linewidth=0.8)
    ax1.fill_between(line, line / 1.2, line * 1.2, color="grey", alpha=0.15, linewidth=0)
    ax1.set(xscale="log", yscale="log", xlabel="measured (ms per iteration, sum of kernels)",
            ylabel="simulated (ms per iteration)", title="(a) every compared iteration")
    ax2.axhline(1.0, color="black", linewidth=0.8)
    ax2.axhspan(1 / 1.2, 1.2, color="grey", alpha=0.15, linewidth=0)
    ax2.set(xscale="log", xlabel="tokens per iteration (decode batch or prompt)", ylabel="simulated ÷ measured",
            title="(b) the ratio (open markers: 4 or 8 GPUs)", ylim=(0.5, 1.6))
    handles = [plt.Line2D([], [], **first_of_key[k], label=f"{k[0].upper()} {k[1]}") for k in keys]
    handles += [plt.Line2D([], [], **{**first_of_kind[kind], "color": "black"}, label=kind)
                for kind in markers if kind in first_of_kind]
    ax2.legend(handles=handles, fontsize=7, loc="upper left", ncol=2, frameon=False)
    for axis in (ax1.xaxis, ax1.yaxis, ax2.xaxis):  # 0.1, 1, 10 ms; 1, 16, 256 tokens: as a paper prints them
        plain_log_ticks(axis)
    fig.tight_layout()
    return fig
