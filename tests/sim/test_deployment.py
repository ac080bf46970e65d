"""Any model on tp GPUs from the datasheet table: KV cache memory by vLLM's rule, names that carry the
server through every layer, and models that do not fit refused by name with their bytes."""

from __future__ import annotations

import pytest

from paged.sim import cost_model
from paged.sim.cost_model import SERVERS, get_cost_model
from paged.sim.deployment import GPU_MEMORY_UTILIZATION, ModelDoesNotFitError, get_deployment
from paged.sim.gpu_spec import GPUS, get_gpu
from paged.sim.model_config import SHIPPED_CONFIGS
from paged.sim.model_spec import GiB, get_model

pytest.importorskip("transformers")


def test_the_a100_rows_are_the_cost_models_table1_constants():
    for key, hbm in (("a100-40gb", cost_model.A100_40GB_HBM_BYTES_PER_S), ("a100-80gb", cost_model.A100_80GB_HBM_BYTES_PER_S)):
        gpu = get_gpu(key)
        assert gpu.hbm_bytes_per_s == hbm and gpu.peak_flops == cost_model.A100_PEAK_FP16_FLOPS
        assert gpu.interconnect_bytes_per_s == cost_model.NVLINK_BYTES_PER_S
        assert gpu.pcie_bytes_per_s == pytest.approx(cost_model.PCIE4_X16_BYTES_PER_S, rel=1e-12)


def test_every_gpu_cites_its_datasheet_and_decode_attention_stays_memory_bound():
    for gpu in GPUS.values():
        assert "datasheet" in gpu.source
        for name in SHIPPED_CONFIGS:  # roofline: intensity below the ridge point on every part
            from paged.sim.model_config import get_config_model

            assert get_config_model(name).decode_attention_flops_per_byte < gpu.ridge_flops_per_byte / 10


def test_table1_presets_alone_keep_table1_servers():
    for name, server in SERVERS.items():
        assert get_deployment(name) is None
        assert get_cost_model(name, block_size=16).server is server


def test_kv_cache_memory_is_what_the_weights_leave():
    d = get_deployment("llama-3.1-8b", "h100-sxm", 2, 8192)
    budget = int(GPU_MEMORY_UTILIZATION * 80 * GiB)
    assert d.kv_cache_bytes == 2 * (budget - d.model.weight_bytes // 2)
    cost = get_cost_model("llama-3.1-8b", gpu="h100-sxm", tp=2, max_seq_len=8192, block_size=16)
    assert cost.server.num_gpus == 2 and cost.server.hbm_bytes_per_s == 3.35e12
    assert cost.num_kv_slots == d.kv_cache_bytes // (131_072 * 16) * 16
    # the rule on Table 1's own servers, as the module docstring states it (Table 1: 12, 21, 264 GB)
    got = [round(get_deployment(m, g, tp).kv_cache_bytes / GiB, 1)
           for m, g, tp in (("opt-13b", "a100-40gb", 1), ("opt-66b", "a100-40gb", 4), ("opt-175b", "a100-80gb", 8))]
    assert got == [12.1, 21.6, 250.8]


def test_a_deployment_name_round_trips_through_get_cost_model():
    cost = get_cost_model("qwen2.5-7b", gpu="H200", tp=4, max_seq_len=32768, paged_kernel=False, block_size=16)
    assert cost.model.name == "qwen2.5-7b@4xh200:32768"
    again = get_cost_model(cost.model.name, paged_kernel=False, block_size=16)
    assert again == cost
    assert get_cost_model("qwen2.5-7b@h200", block_size=16).server.num_gpus == 1  # tp and max length default
    assert get_cost_model("opt-13b@1xa100-40gb", block_size=16).model.max_seq_len == 2048


def test_the_simulator_serves_a_deployment_by_name():
    from paged.experiments.serving import simulate_point

    row = simulate_point(model="gemma-2b@1xl4:2048", system="orca-max", rate=4.0, num_requests=40)
    assert row["model"] == "gemma-2b@1xl4:2048" and row["throughput_rps"] > 0


def test_a_model_that_cannot_fit_is_refused_by_name_and_bytes():
    with pytest.raises(ModelDoesNotFitError, match=r"llama-3\.1-70b does not fit on 1x H100 SXM 80GB: its weights "
                                                   r"take 141,107,412,992 bytes"):
        get_cost_model("llama-3.1-70b", gpu="h100-sxm", block_size=16)
    with pytest.raises(ModelDoesNotFitError, match=r"llama-3\.1-8b on 1x L4 24GB leaves [\d,]+ bytes of KV cache, "
                                                   r"less than one 131072-token sequence needs \(17,179,869,184 bytes"):
        get_cost_model("llama-3.1-8b", gpu="l4", block_size=16)
    assert get_cost_model("llama-3.1-70b", gpu="h100-sxm", tp=4, block_size=16).num_kv_slots > 100_000
    assert issubclass(ModelDoesNotFitError, ValueError)


@pytest.mark.parametrize("kwargs, message", [
    (dict(model="llama-3.1-8b"), "has no Table 1 server: name a gpu"),
    (dict(model="opt-13b", tp=2), "tp sets up a server of your own: name its gpu"),
    (dict(model="opt-13b", max_seq_len=1024), "max_seq_len sets up a server of your own: name its gpu"),
    (dict(model="llama-3.1-8b", gpu="b200"), "unknown GPU 'b200'"),
    (dict(model="qwen2.5-7b", gpu="h100-sxm", tp=8), "tp=8 does not divide qwen2.5-7b's 28 query heads and 4 KV"),
    (dict(model="llama-3.1-8b", gpu="h100-sxm", tp=0), "tp must be an integer ≥ 1"),
    (dict(model="llama-3.1-8b@2xh100-sxm", tp=4), "tp given twice"),
    (dict(model="llama-3.1-8b@", gpu=None), "a deployment is named"),
    (dict(model="gpt-5", gpu="h100-sxm"), "unknown model 'gpt-5': neither"),
    (dict(model="gpt-5"), "unknown model 'gpt-5': neither"),
])
def test_bad_deployments_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        get_cost_model(**kwargs, block_size=16)


def test_the_preset_names_stay_the_table1_models():
    assert get_model("opt-13b").name == "opt-13b"
    with pytest.raises(ValueError, match="unknown model"):
        get_model("llama-3.1-8b")  # presets only: configs come through get_cost_model / get_model_spec
