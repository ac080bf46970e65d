"""The cost model against measured GPU times (Vidur's A100 and H100 profiles, data/vidur_*.csv).

Per operator (GEMMs, element-wise operators, attention, all-reduce) and per iteration (whole decode and
prefill steps, one GPU and tensor-parallel), every measured point is compared with the cost model on the
same shape, GPU, GPU count, batch and context, within the ranges stated here. The measured constants of
the cost model are refitted from the committed tables and must be the ones typed into the code.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from paged.sim import cost_model as cm
from paged.sim import gpu_measurements as gm
from paged.sim.cost_model import CostModel, ServerSpec
from paged.sim.gpu_spec import A100_MEASURED, GPUS, H100_MEASURED
from paged.sim.model_spec import get_model, spec_from_config

DATA = Path(__file__).resolve().parents[2] / "data"
GPU_KEY = {"a100": "a100-80gb", "h100": "h100-sxm"}
MEASURED = {"a100": A100_MEASURED, "h100": H100_MEASURED}
GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")


def _spec(model: str, layers: int = 1):
    hidden, heads, kv_heads, inter = gm.VIDUR_SHAPES[model]
    config = SimpleNamespace(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads,
                             num_hidden_layers=layers, intermediate_size=inter, vocab_size=32000)
    return spec_from_config(model, config)


def _cost(gpu: str, tp: int, spec, **kw) -> CostModel:
    g = GPUS[GPU_KEY[gpu]]
    server = ServerSpec(f"{tp}x{g.label}", tp, g.peak_flops, g.hbm_bytes_per_s, g.interconnect_bytes_per_s,
                        g.pcie_bytes_per_s, 2**40, g.name)
    return CostModel(spec, server, **{"block_size": 16, "cpu_scale": 0.0, **kw})


def _gemm_us(row) -> float:
    return sum(getattr(row, f"{op}_us") for op in GEMMS)


def _all_reduce_us(gpu: str, workers: int, size: float) -> float:
    """The measured median of the size bin holding ``size`` fp16 elements."""
    t = gm.all_reduce_medians()
    row = t[(t["gpu"] == gpu) & (t["num_workers"] == workers) & (t["size_lo"] <= size) & (size < t["size_hi"])]
    return float(row["time_median_us"].iloc[0])


# -- the tables ------------------------------------------------------------------------------------------
def test_tables_are_small_carry_their_provenance_and_vidurs_notice():
    for name in ("vidur_layer_medians.csv", "vidur_all_reduce_medians.csv", "vidur_attention_medians.csv"):
        text = (DATA / name).read_text(encoding="utf-8")
        assert len(text.encode()) < 20_000, name
        assert "microsoft/vidur commit 7d47513363ec447a741ac5e47241580b47724fbf" in text
        assert "MIT, Copyright (c) Microsoft Corporation" in text and "make data" in text
    notice = (DATA / "vidur_LICENSE.md").read_text(encoding="utf-8")
    assert "Copyright (c) Microsoft Corporation." in notice and "Permission is hereby granted" in notice
    layers = gm.layer_medians()
    assert len(layers) == 9 * 3 * 11 and layers.notna().all().all() and (layers.iloc[:, 4:] > 0).all().all()
    assert set(gm.attention_medians()["kind"]) == {"decode", "prefill"}


# -- the measured constants are the fits of the tables ---------------------------------------------------
def test_gemm_constants_are_the_fit_of_the_layer_table():
    fit = gm.fit_gemm_law()
    assert fit["exponent"] == cm.GEMM_BLEND_EXPONENT and fit["floor_s"] == pytest.approx(cm.GEMM_KERNEL_FLOOR_S)
    for gpu in ("a100", "h100"):
        assert fit[gpu] == (MEASURED[gpu]["memory_efficiency"], MEASURED[gpu]["compute_efficiency"]), gpu
    assert (cm.MEMORY_EFFICIENCY, cm.COMPUTE_EFFICIENCY) == fit["a100"]
    assert fit["rms_log_error"] < 0.08


def test_efficiency_ranges_are_the_spread_of_per_configuration_fits():
    layers = gm.layer_medians()
    a100 = layers[layers["gpu"] == "a100"]
    fits = [gm.fit_gemm_law(part, (cm.GEMM_BLEND_EXPONENT,), (cm.GEMM_KERNEL_FLOOR_S,))["a100"]
            for _, part in a100.groupby(["model", "tp"])]
    mem, comp = zip(*fits)
    assert (min(mem), max(mem)) == cm.MEMORY_EFFICIENCY_RANGE
    assert (min(comp), max(comp)) == cm.COMPUTE_EFFICIENCY_RANGE


def test_elementwise_and_all_reduce_constants_are_the_fits():
    fit = gm.fit_elementwise_law()
    assert fit["floor_s"] == pytest.approx(cm.ELEMENTWISE_FLOOR_S) and fit["efficiency"] == cm.ELEMENTWISE_EFFICIENCY
    for gpu in ("a100", "h100"):
        for workers, alpha, beta in MEASURED[gpu]["allreduce"]:
            a, b = gm.fit_all_reduce_law(gpu, workers)
            assert a == pytest.approx(alpha, rel=0.005) and b == pytest.approx(beta, rel=0.005), (gpu, workers)


def test_the_fit_law_is_the_cost_models_law():
    cost = _cost("a100", 4, _spec("Qwen-72B"))
    weights = sum(gm.layer_params("Qwen-72B", 4).values())
    for n in (1, 256, 4096):
        law = gm.gemm_law(2 * weights, 2 * weights * n, 2039e9, 312e12, 0.82, 0.74, cm.GEMM_BLEND_EXPONENT,
                          cm.GEMM_KERNEL_FLOOR_S)
        assert cost.gemm_time(weights, n, 4) == pytest.approx(law)


# -- per operator ----------------------------------------------------------------------------------------
def _layer_ratios():
    out = []
    for r in gm.layer_medians().itertuples():
        cost = _cost(r.gpu, r.tp, _spec(r.model))
        params = gm.layer_params(r.model, r.tp)
        ops = {op: cost.gemm_time(params[op], r.num_tokens) / (1e-6 * getattr(r, f"{op}_us")) for op in GEMMS}
        ops["gemms"] = cost.gemm_time(sum(params.values()), r.num_tokens, 4) / (1e-6 * _gemm_us(r))
        ops["elementwise"] = cost.elementwise_time(r.num_tokens) / (1e-6 * r.elementwise_us)
        out.append((r, ops))
    return out


def test_each_gemm_within_its_measured_range():
    """297 layers × 4 GEMMs: every one within 0.55–1.9× (90 % within 0.8–1.25×), the GEMMs of a layer
    within 0.75–1.4× (90 % within ±12 %), on both GPUs and every TP degree."""
    rows = _layer_ratios()
    single = np.array([ops[op] for _, ops in rows for op in GEMMS])
    layer = np.array([ops["gemms"] for _, ops in rows])
    assert 0.55 < single.min() and single.max() < 1.9
    assert 0.8 < np.percentile(single, 5) and np.percentile(single, 95) < 1.25
    assert 0.75 < layer.min() and layer.max() < 1.4
    assert 0.88 < np.percentile(layer, 5) and np.percentile(layer, 95) < 1.12


def test_gemms_between_the_limits_and_compute_bound_prefills_on_each_gpu():
    """The knee (128–512 tokens) and the compute-bound side (≥ 1,024 tokens), where the hard roofline at
    the datasheet-era efficiencies (0.8, 0.6) was 15–29 % off; and H100 decode GEMMs at batch 256."""
    for r, ops in _layer_ratios():
        if 128 <= r.num_tokens <= 512:
            assert 0.75 < ops["gemms"] < 1.4, r
        if r.num_tokens >= 1024:
            assert 0.85 < ops["gemms"] < 1.2, r
        if r.gpu == "h100" and r.num_tokens == 256:
            assert 0.8 < ops["gemms"] < 1.25, r


def test_elementwise_operators_within_their_measured_range():
    ratios = np.array([ops["elementwise"] for _, ops in _layer_ratios()])
    assert 0.3 < ratios.min() and ratios.max() < 1.7
    assert 0.65 < np.percentile(ratios, 5) and np.percentile(ratios, 95) < 1.45


def test_decode_and_prefill_attention_within_their_measured_range():
    """FlashInfer (a 2024 paged kernel) against the model's contiguous kernel: within 0.45–1.1× everywhere,
    0.8–1.1× where the batch reads ≥ 16K tokens of ≥ 512-token contexts (the kernel at 0.74–0.85 of HBM
    bandwidth, the model at the A100's 0.82); the prefill kernel within 0.6–1.1×."""
    cost = _cost("a100", 1, _spec("Meta-Llama-3-8B"), paged_kernel=False)
    for r in gm.attention_medians().itertuples():
        if r.kind == "decode":
            model = cost.decode_attention_time(r.batch * r.kv_tokens) - cm.KV_WRITE_FLOOR_S
            ratio = model / (1e-6 * r.attention_us)
            assert 0.45 < ratio < 1.1, r
            if r.batch * r.kv_tokens >= 16_384 and r.kv_tokens >= 512:
                assert 0.8 < ratio < 1.1, r
        else:
            ratio = (cost.prefill_attention_time([r.prefill_tokens]) - cm.KV_WRITE_FLOOR_S) / (1e-6 * r.attention_us)
            assert 0.6 < ratio < 1.1, r


def test_all_reduce_within_the_measured_bins():
    """Every size bin from 32K elements: within 0.45–1.8× of its median (small messages are bimodal: the
    quartiles of one bin differ up to 3×); from 1M elements (prefills, large decode batches) 0.8–1.3×."""
    t = gm.all_reduce_medians()
    for r in t[t["size_lo"] >= gm.ALL_REDUCE_MIN_SIZE].itertuples():
        hidden = 8192
        cost = _cost(r.gpu, int(r.num_workers), _spec("Qwen-72B"))
        ratio = cost.allreduce_time(r.size_median / hidden) / (1e-6 * r.time_median_us)
        assert 0.45 < ratio < 1.8, r
        if r.size_lo >= 2**20:
            assert 0.8 < ratio < 1.3, r


# -- per iteration ---------------------------------------------------------------------------------------
def _layer_row(gpu, model, tp, n):
    t = gm.layer_medians()
    return next(t[(t["gpu"] == gpu) & (t["model"] == model) & (t["tp"] == tp) & (t["num_tokens"] == n)].itertuples())


@pytest.mark.parametrize("batch", [1, 16, 64, 128, 256])
@pytest.mark.parametrize("context", [512, 1024, 2048])
def test_whole_decode_step_llama3_8b_a100(batch, context):
    """A decode step as Vidur sums it (32 layers × GEMMs, element-wise, attention, KV write; no LM head,
    no host) against the model's (contiguous kernel, no host costs): within 0.9–1.1× (0.94–1.05×)."""
    spec = _spec("Meta-Llama-3-8B", layers=32)
    cost = _cost("a100", 1, spec, paged_kernel=False)
    att = gm.attention_medians()
    a = att[(att["kind"] == "decode") & (att["kv_tokens"] == context)].set_index("batch")
    attn_us = float(np.interp(batch, a.index, a["attention_us"])) + 2.0
    row = _layer_row("a100", "Meta-Llama-3-8B", 1, batch)
    measured = 32 * 1e-6 * (_gemm_us(row) + row.elementwise_us + attn_us)
    model = cost.decode_time(batch, batch * context) - cost.gemm_time(spec.embedding_params, batch, 1)
    assert 0.9 < model / measured < 1.1


@pytest.mark.parametrize("tokens", [512, 2048])
def test_whole_prefill_step_llama3_8b_a100(tokens):
    """A one-prompt prefill: within 0.9–1.1× (1.03×, 0.95×) of the measured kernels with the KV write at
    HBM speed (the profile's FlashInfer append takes 152 and 1,093 µs per layer for 512 and 2,048 tokens,
    7.7 GB/s; counting it, the model is 0.91× and 0.77×)."""
    spec = _spec("Meta-Llama-3-8B", layers=32)
    cost = _cost("a100", 1, spec, paged_kernel=False)
    att = gm.attention_medians()
    attn_us = float(att[(att["kind"] == "prefill") & (att["prefill_tokens"] == tokens)]["attention_us"].iloc[0])
    row = _layer_row("a100", "Meta-Llama-3-8B", 1, tokens)
    measured = 32 * 1e-6 * (_gemm_us(row) + row.elementwise_us + attn_us)
    model = cost.prefill_time([tokens]) - cost.gemm_time(spec.embedding_params, 1, 1)
    assert 0.9 < model / measured < 1.1


@pytest.mark.parametrize("gpu,model,tp", [("a100", "Qwen-72B", 4), ("a100", "Qwen-72B", 8),
                                          ("a100", "Meta-Llama-3-70B", 4), ("h100", "Llama-2-70b-hf", 4),
                                          ("h100", "Qwen-72B", 8)])
@pytest.mark.parametrize("tokens", [16, 128, 256, 2048])
def test_tensor_parallel_steps_without_attention(gpu, model, tp, tokens):
    """A layer on ``tp`` GPUs: GEMMs, element-wise operators and two all-reduces of the tokens'
    activations (the measured bin medians) against the model: within 0.75–1.2× (0.80–1.13×). Decode batches
    (16–256 tokens) and a prefill (2,048). Attention is compared above (no 70B attention profile is reachable)."""
    spec = _spec(model)
    cost = _cost(gpu, tp, spec)
    row = _layer_row(gpu, model, tp, tokens)
    size = tokens * spec.hidden_size
    measured = 1e-6 * (_gemm_us(row) + row.elementwise_us + 2 * _all_reduce_us(gpu, tp, size))
    modelled = (cost.gemm_time(sum(gm.layer_params(model, tp).values()), tokens, 4) + cost.elementwise_time(tokens)
                + 2 * cost.allreduce_time(tokens))
    assert 0.75 < modelled / measured < 1.2


def test_the_papers_layers_against_their_measured_twins():
    """LLaMA-13B's layer is InternLM-20B's (hidden 5120, 40 heads, MLP 13824): its per-layer GEMMs on an
    A100 within 0.9–1.2× of the measured ones at every profiled batch (0.94–1.17×); OPT-13B's layer (1.2 %
    fewer weights, a two-matrix MLP) within the same range of the same measurements."""
    layers = gm.layer_medians()
    twin = layers[(layers["gpu"] == "a100") & (layers["model"] == "internlm-20b") & (layers["tp"] == 1)]
    for preset, low, high in (("llama-13b", 0.9, 1.2), ("opt-13b", 0.9, 1.2)):
        spec = get_model(preset)
        cost = _cost("a100", 1, spec)
        per_layer = spec.matmul_params / spec.num_layers
        for r in twin.itertuples():
            ratio = cost.gemm_time(per_layer, r.num_tokens, 4) / (1e-6 * _gemm_us(r))
            assert low < ratio < high, (preset, r.num_tokens, ratio)
