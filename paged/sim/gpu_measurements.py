"""Measured GPU operator times (Vidur's A100 and H100 profiles) and the constants they give the cost model.

The committed tables under ``data/`` (built by :mod:`paged.tools.vidur_profiles`, ``make data``; MIT,
Microsoft's Vidur, the notice in ``data/vidur_LICENSE.md``) hold medians of CUDA-event timings:
one transformer layer's GEMMs and element-wise operators by GPU, model, tensor-parallel degree and
tokens; NCCL all-reduce inside a DGX node by message size; FlashInfer attention on an A100. The
cost model (:mod:`paged.sim.cost_model`) does not read them at run time: its constants are the
least-squares fits below, typed in with their values, and ``tests/sim/test_gpu_measurements.py``
refits them from the tables and compares the model with every measured point, per operator and per
iteration, within stated ranges. Nothing is fitted to the paper's throughput.

Fits (relative error, every point alike; a grid search, so deterministic and dependency-free):

* :func:`fit_gemm_law`: one layer's four GEMMs as ``((W / (B·m))^p + (F / (P·c))^p)^(1/p) + 4·f``
  (``W`` weight bytes, ``F`` FLOPs on one GPU, ``B``/``P`` the datasheet's HBM bandwidth and peak
  FLOP/s): a memory efficiency ``m`` and compute efficiency ``c`` per GPU, one blend exponent ``p``
  (the hard roofline is ``p = ∞``) and one per-kernel floor ``f`` shared by both GPUs;
* :func:`fit_elementwise_law`: norms, rotary embedding, activation and residual add as a per-layer
  floor plus their bytes (:func:`paged.sim.cost_model.elementwise_bytes_per_token`) at a fraction of
  HBM bandwidth;
* :func:`fit_all_reduce_law`: ``α + 2(w−1)/w · bytes / β`` (NCCL's bus bandwidth ``β``) per GPU and
  workers ``w``, on the size bins from :data:`ALL_REDUCE_MIN_SIZE` elements up.
"""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np

from paged.sim.cost_model import elementwise_bytes_per_token
from paged.workloads.package_data import data_path

__all__ = ["VIDUR_SHAPES", "VIDUR_GPUS", "layer_medians", "all_reduce_medians", "attention_medians",
           "layer_params", "gemm_law", "fit_gemm_law", "fit_elementwise_law",
           "fit_all_reduce_law", "GEMM_EXPONENTS", "GEMM_FLOORS_S", "ALL_REDUCE_MIN_SIZE"]

#: The profiled models' layer shapes (hidden, query heads, KV heads, MLP width; every one gated,
#: SwiGLU), from their Hugging Face configs; the table builder checks the profiles against them.
#: InternLM-20B's layer is LLaMA-13B's exactly and within 1.2 % of OPT-13B's parameters (OPT:
#: 4h² + 2·h·4h, InternLM: 4h² + 3·h·13824, h = 5120); Qwen-72B's (h = 8192) has 86 % of OPT-66B's.
VIDUR_SHAPES = {
    "Meta-Llama-3-8B": (4096, 32, 8, 14336), "Llama-2-7b-hf": (4096, 32, 32, 11008),
    "internlm-20b": (5120, 40, 40, 13824), "Qwen-72B": (8192, 64, 64, 24576),
    "Meta-Llama-3-70B": (8192, 64, 8, 28672), "Llama-2-70b-hf": (8192, 64, 8, 28672),
}
#: The datasheet figures the fits divide by, per profiled GPU: (peak dense FP16 FLOP/s, HBM bytes/s).
#: Vidur's "a100" is the 80 GB part (its device config: 80 GB) and its "h100" the SXM part of a
#: DGX H100 (its network profiles); figures as in :data:`paged.sim.gpu_spec.GPUS`.
VIDUR_GPUS = {"a100": (312e12, 2039e9), "h100": (989.5e12, 3.35e12)}
#: Grids of the GEMM fit's shared terms: blend exponent, per-kernel floor (seconds).
GEMM_EXPONENTS = (1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0)
GEMM_FLOORS_S = tuple(k * 1e-6 for k in range(0, 11))
#: The smallest all-reduce size bin the fit uses (fp16 elements): smaller bins hold one to four rows
#: each, and on the H100 pair they sit in a fast mode (7–9 µs) the larger messages never reach.
ALL_REDUCE_MIN_SIZE = 2**15
_EFFICIENCIES = np.round(np.arange(0.50, 1.0001, 0.01), 2)


def _read(name: str):
    import pandas as pd

    return pd.read_csv(data_path(name), comment="#")


@cache
def layer_medians():
    """``data/vidur_layer_medians.csv`` as a DataFrame: ``gpu, model, tp, num_tokens`` and the medians
    (µs per layer on one GPU) ``attn_pre_proj_us, attn_post_proj_us, mlp_up_proj_us, mlp_down_proj_us,
    elementwise_us``. Cached; do not modify the returned frame."""
    return _read("vidur_layer_medians.csv")


@cache
def all_reduce_medians():
    """``data/vidur_all_reduce_medians.csv``: ``gpu, num_workers, size_lo, size_hi, rows, size_median``
    (fp16 elements), ``time_median_us, time_p25_us, time_p75_us``. Cached."""
    return _read("vidur_all_reduce_medians.csv")


@cache
def attention_medians():
    """``data/vidur_attention_medians.csv``: ``kind`` (decode/prefill), ``batch``, ``kv_tokens`` (per
    sequence), ``prefill_tokens``, ``attention_us``, ``kv_cache_save_us`` (A100, Meta-Llama-3-8B). Cached."""
    return _read("vidur_attention_medians.csv")


def layer_params(model: str, tp: int = 1) -> dict[str, float]:
    """Weights of each GEMM of one layer of the profiled ``model`` on one of ``tp`` GPUs (count):
    ``attn_pre_proj`` (Q, K, V), ``attn_post_proj``, ``mlp_up_proj`` (up and gate), ``mlp_down_proj``."""
    hidden, heads, kv_heads, inter = VIDUR_SHAPES[model]
    head = hidden // heads
    return {"attn_pre_proj": hidden * (heads + 2 * kv_heads) * head / tp, "attn_post_proj": hidden * hidden / tp,
            "mlp_up_proj": 2 * hidden * inter / tp, "mlp_down_proj": inter * hidden / tp}


def _gemm_arrays(frame):
    w, f, t, gpu = [], [], [], []
    for r in frame.itertuples():
        params = sum(layer_params(r.model, r.tp).values())
        w.append(2 * params)
        f.append(2 * params * r.num_tokens)
        t.append(1e-6 * (r.attn_pre_proj_us + r.attn_post_proj_us + r.mlp_up_proj_us + r.mlp_down_proj_us))
        gpu.append(r.gpu)
    return np.array(w), np.array(f), np.array(t), np.array(gpu)


def gemm_law(weight_bytes, flops, hbm_bytes_per_s: float, peak_flops: float, memory_efficiency: float,
             compute_efficiency: float, exponent: float, floor_s: float, num_kernels: int = 4):
    """Seconds of GEMMs with ``weight_bytes`` of weights and ``flops`` (module docstring; arrays or
    floats): the blended roofline plus ``num_kernels`` floors."""
    mem = weight_bytes / (hbm_bytes_per_s * memory_efficiency)
    comp = flops / (peak_flops * compute_efficiency)
    return (mem**exponent + comp**exponent) ** (1.0 / exponent) + num_kernels * floor_s


def fit_gemm_law(frame=None, exponents=GEMM_EXPONENTS, floors=GEMM_FLOORS_S) -> dict:
    """Least-squares fit (mean squared log ratio) of :func:`gemm_law` to the layer table's GEMM sums
    (``frame``: the table or some of its rows; a GPU without rows is left out).

    Returns:
        ``{"exponent": p, "floor_s": f, "a100": (m, c), "h100": (m, c), "rms_log_error": e}``:
        efficiencies on a 0.01 grid in [0.5, 1], ``p`` from ``exponents``, ``f`` from ``floors``. A
        few seconds for the whole grid; give one exponent and one floor to fit the efficiencies alone.
    """
    w, f, t, gpu = _gemm_arrays(layer_medians() if frame is None else frame)
    m, c = np.meshgrid(_EFFICIENCIES, _EFFICIENCIES, indexing="ij")
    m, c = m.ravel()[:, None], c.ravel()[:, None]
    best = None
    for p, floor in itertools.product(exponents, floors):
        total, chosen = 0.0, {}
        for name, (peak, bw) in VIDUR_GPUS.items():
            sel = gpu == name
            if not sel.any():
                continue
            pred = gemm_law(w[sel][None, :], f[sel][None, :], bw, peak, m, c, p, floor)
            loss = (np.log(pred / t[sel][None, :]) ** 2).sum(axis=1)
            i = int(np.argmin(loss))
            total += float(loss[i])
            chosen[name] = (float(m[i, 0]), float(c[i, 0]))
        if best is None or total < best[0] - 1e-12:
            best = (total, p, floor, chosen)
    total, p, floor, chosen = best
    return {"exponent": p, "floor_s": floor, **chosen, "rms_log_error": float(np.sqrt(total / len(t)))}


def fit_elementwise_law(frame=None) -> dict:
    """Fit ``floor + bytes / (HBM bandwidth · e)`` to the layer table's element-wise sums (bytes:
    :func:`paged.sim.cost_model.elementwise_bytes_per_token` × tokens, every profiled model gated with rotary embeddings).

    Returns:
        ``{"floor_s": per-layer floor (1 µs grid, 5–40 µs), "efficiency": e (0.01 grid), "rms_log_error"}``.
    """
    frame = layer_medians() if frame is None else frame
    by, bw, t = [], [], []
    for r in frame.itertuples():
        hidden, _, _, inter = VIDUR_SHAPES[r.model]
        by.append(elementwise_bytes_per_token(hidden, inter, r.tp) * r.num_tokens)
        bw.append(VIDUR_GPUS[r.gpu][1])
        t.append(1e-6 * r.elementwise_us)
    by, bw, t = np.array(by), np.array(bw), np.array(t)
    floors = np.arange(5, 41)[:, None, None] * 1e-6
    effs = np.round(np.arange(0.20, 1.0001, 0.01), 2)[None, :, None]
    loss = (np.log((floors + by / (bw * effs)) / t) ** 2).sum(axis=2)
    i, j = np.unravel_index(int(np.argmin(loss)), loss.shape)
    return {"floor_s": float(floors[i, 0, 0]), "efficiency": float(effs[0, j, 0]),
            "rms_log_error": float(np.sqrt(loss[i, j] / len(t)))}


def fit_all_reduce_law(gpu: str, workers: int, frame=None) -> tuple[float, float]:
    """``(α seconds, β bus bytes/s)`` of ``gpu``'s all-reduce over ``workers`` GPUs of one node: linear
    least squares of the relative error over the size bins from :data:`ALL_REDUCE_MIN_SIZE` elements up.

    Raises:
        ValueError: if the table has no such rows.
    """
    frame = all_reduce_medians() if frame is None else frame
    d = frame[(frame["gpu"] == gpu) & (frame["num_workers"] == workers) & (frame["size_lo"] >= ALL_REDUCE_MIN_SIZE)]
    if not len(d):
        raise ValueError(f"no all-reduce medians for {gpu} × {workers}")
    bus = (2 * d["size_median"] * 2 * (workers - 1) / workers).to_numpy(float)
    t = 1e-6 * d["time_median_us"].to_numpy(float)
    x = np.column_stack([np.ones_like(t), bus]) / t[:, None]
    (alpha, inv_beta), *_ = np.linalg.lstsq(x, np.ones_like(t), rcond=None)
    return float(alpha), float(1.0 / inv_beta)
