"""Models from a Hugging Face config.json through transformers' config classes: KV bytes per token
(MHA, GQA, MQA by hand), parameter counts against the published ones, and the Table 1 presets
unchanged (every field the cost model reads)."""

from __future__ import annotations

import json

import pytest

from paged.sim.model_config import PUBLISHED_PARAMS, SHIPPED_CONFIGS, get_config_model, load_config
from paged.sim.model_spec import get_model
from paged.workloads import data_path

pytest.importorskip("transformers")


@pytest.mark.parametrize("name", sorted(SHIPPED_CONFIGS))
def test_shipped_parameter_counts_are_the_published_ones_within_one_percent(name):
    published, _source = PUBLISHED_PARAMS[name]
    assert abs(get_config_model(name).num_params / published - 1) < 0.01


def test_every_shipped_config_has_a_published_count_and_a_file():
    assert set(PUBLISHED_PARAMS) == set(SHIPPED_CONFIGS)
    for name in SHIPPED_CONFIGS:
        assert json.loads(data_path(f"configs/{name}.json").read_text())["model_type"]


def test_kv_bytes_per_token_by_hand_mha_gqa_mqa():
    # MHA, OPT-13B: K and V × 40 layers × 40 heads × 128 × 2 bytes (fp16)
    assert get_model("opt-13b").kv_bytes_per_token == 2 * 40 * 40 * 128 * 2 == 819_200
    # GQA, Llama-3.1-8B: 32 layers, 8 KV heads of 128 (32 query heads), bf16
    llama = get_config_model("llama-3.1-8b")
    assert (llama.num_heads, llama.num_kv_heads, llama.head_size) == (32, 8, 128)
    assert llama.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131_072
    # MQA, Gemma-2B: 18 layers, one KV head of 256 (config's explicit head_dim), bf16
    gemma = get_config_model("gemma-2b")
    assert (gemma.num_heads, gemma.num_kv_heads, gemma.head_size) == (8, 1, 256)
    assert gemma.kv_bytes_per_token == 2 * 18 * 1 * 256 * 2 == 18_432


def test_gqa_keeps_the_attention_flops_of_every_query_head():
    llama = get_config_model("llama-3.1-8b")
    assert llama.attention_flops_width == 32 * 128  # not the 8 KV heads
    assert llama.decode_attention_flops_per_byte == 4.0  # 4 query heads per KV head, 2-byte elements
    assert get_model("opt-13b").decode_attention_flops_per_byte == 1.0


def test_untied_lm_head_is_counted_once_more_and_not_as_per_token_work():
    llama = get_config_model("llama-3.1-8b")
    assert not llama.tied_embeddings
    embed = 128_256 * 4096
    assert llama.matmul_params == llama.num_params - 2 * embed
    assert llama.streamed_weight_bytes == (llama.num_params - embed) * 2


@pytest.mark.parametrize("name", ["opt-13b", "opt-66b", "opt-175b", "llama-13b"])
def test_presets_give_the_cost_model_exactly_the_same_numbers(name):
    spec = get_model(name)  # the fields and the derived quantities the cost model reads, as integers
    assert spec.tied_embeddings
    assert spec.matmul_params == spec.num_params - spec.vocab_size * spec.hidden_size
    assert spec.streamed_weight_bytes == spec.weight_bytes
    assert spec.attention_flops_width == spec.hidden_size


def test_table1_presets_are_pinned():
    """The presets' counts by hand (attention 4h² + MLP 2 · h · 4h per OPT layer, one embedding;
    LLaMA's three MLP matrices of width 13824): the numbers every paper-scale result is built on."""
    for name, layers, h in (("opt-13b", 40, 5120), ("opt-66b", 64, 9216), ("opt-175b", 96, 12288)):
        spec = get_model(name)
        assert spec.num_params == layers * (4 * h * h + 2 * h * 4 * h) + 50272 * h
        assert spec.kv_bytes_per_token == 2 * layers * h * 2 and spec.max_seq_len == 2048
    llama = get_model("llama-13b")
    assert llama.num_params == 40 * (4 * 5120**2 + 3 * 5120 * 13824) + 32000 * 5120 == 12_851_609_600


def test_a_local_config_json_is_read_with_transformers_defaults(tmp_path):
    path = tmp_path / "config.json"  # a Llama-style MQA model; head_dim left to the config class
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2048,
                                "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 1,
                                "vocab_size": 1000, "max_position_embeddings": 4096, "torch_dtype": "float32"}))
    spec = get_config_model(tmp_path)  # a folder holding config.json works too
    assert spec.name == str(tmp_path) and spec.head_size == 128 and spec.dtype_bytes == 4
    assert spec.kv_bytes_per_token == 2 * 4 * 1 * 128 * 4
    assert spec.max_seq_len == 4096 and get_config_model(path, max_seq_len=512).max_seq_len == 512
    assert load_config(path).num_key_value_heads == 1


def test_bad_configs_are_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="unknown model .*neither a Table 1 preset"):
        get_config_model(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not a JSON config"):
        get_config_model(bad)
    bad.write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(ValueError, match="no 'model_type'"):
        get_config_model(bad)
    bad.write_text(json.dumps({"model_type": "mixtral", "num_local_experts": 8}))
    with pytest.raises(ValueError, match="mixture-of-experts"):
        get_config_model(bad)
    bad.write_text(json.dumps({"model_type": "llama", "num_attention_heads": 6, "num_key_value_heads": 4,
                               "hidden_size": 768}))
    with pytest.raises(ValueError, match="6 attention heads do not split into groups of 4"):
        get_config_model(bad)
