"""Models from a Hugging Face config.json through transformers' config classes: KV bytes per token
(MHA, GQA, MQA by hand), parameter counts against the published ones for every common decoder family
(from their published config.json), the architectures it cannot count refused by name, the model's
positions bounding the served length, and the Table 1 presets unchanged (every field the cost model reads)."""

from __future__ import annotations

import json
import re

import pytest

from paged.sim.deployment import get_model_spec
from paged.sim.model_config import PUBLISHED_PARAMS, SHIPPED_CONFIGS, get_config_model, load_config
from paged.sim.model_spec import GiB, get_model
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
    shape = {"model_type": "llama", "hidden_size": 768, "num_hidden_layers": 2, "vocab_size": 100,
             "intermediate_size": 1024}
    bad.write_text(json.dumps({**shape, "num_attention_heads": 6, "num_key_value_heads": 4}))
    with pytest.raises(ValueError, match="6 attention heads do not split into groups of 4"):
        get_config_model(bad)
    for missing in ("num_hidden_layers", "intermediate_size"):  # the class would fill in another model's value
        bad.write_text(json.dumps({key: value for key, value in {**shape, "num_attention_heads": 6}.items()
                                   if key != missing}))
        with pytest.raises(ValueError, match=f"no '{missing}' field: the model's shape would be 'llama''s default"):
            get_config_model(bad)
    bad.write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "vocab_size": 100}))
    with pytest.raises(ValueError, match="no 'n_layer' field"):  # named as the file names it
        get_config_model(bad)
    for field, value in (("num_attention_heads", 0), ("hidden_size", -64), ("num_hidden_layers", 2.5),
                         ("head_dim", True)):
        bad.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                                   "num_hidden_layers": 2, field: value}))
        with pytest.raises(ValueError, match=f"{field} must be a positive integer, got {value!r}"):
            get_config_model(bad)


def test_a_model_shape_no_transformer_has_is_refused_by_name():
    import dataclasses
    spec = get_model("opt-13b")
    for field, value in (("num_heads", 0), ("num_layers", -1), ("head_size", 1.5), ("max_seq_len", None)):
        with pytest.raises(ValueError, match=f"{field} must be a positive integer, got {value!r}"):
            dataclasses.replace(spec, **{field: value})
    with pytest.raises(ValueError, match="40 query heads cannot share 3 KV heads"):
        dataclasses.replace(spec, num_kv_heads=3)


# -- every common decoder family, from the published config.json -------------------------------------
# The architecture fields of the public config.json of each model (Hugging Face repository in the key's
# comment), as published; token ids and training-only fields left out where they change no count.
PUBLISHED = {
    # EleutherAI/pythia-6.9b: GPT-NeoX, two-matrix MLP, parallel residual with two LayerNorms, untied head
    "pythia-6.9b": {"architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0,
                    "hidden_act": "gelu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 16384,
                    "layer_norm_eps": 1e-05, "max_position_embeddings": 2048, "model_type": "gpt_neox",
                    "num_attention_heads": 32, "num_hidden_layers": 32, "rotary_emb_base": 10000, "rotary_pct": 0.25,
                    "tie_word_embeddings": False, "torch_dtype": "float16", "use_cache": True,
                    "use_parallel_residual": True, "vocab_size": 50432},
    # microsoft/phi-2: parallel attention (one LayerNorm), biases everywhere, untied head with a bias
    "phi-2": {"architectures": ["PhiForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 50256, "embd_pdrop": 0.0,
              "eos_token_id": 50256, "hidden_act": "gelu_new", "hidden_size": 2560, "initializer_range": 0.02,
              "intermediate_size": 10240, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048, "model_type": "phi",
              "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
              "partial_rotary_factor": 0.4, "qk_layernorm": False, "resid_pdrop": 0.1, "rope_scaling": None,
              "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "float16", "use_cache": True,
              "vocab_size": 51200},
    # bigcode/starcoder2-7b: GQA (4 KV heads), two-matrix MLP with biases, LayerNorm, tied embedding
    "starcoder2-7b": {"architectures": ["Starcoder2ForCausalLM"], "attention_dropout": 0.1, "bos_token_id": 0,
                      "eos_token_id": 0, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 4608,
                      "initializer_range": 0.018042, "intermediate_size": 18432, "max_position_embeddings": 16384,
                      "mlp_type": "default", "model_type": "starcoder2", "norm_epsilon": 1e-05, "norm_type": "layer_norm",
                      "num_attention_heads": 36, "num_hidden_layers": 32, "num_key_value_heads": 4,
                      "rope_theta": 1000000, "sliding_window": 4096, "torch_dtype": "bfloat16", "use_bias": True,
                      "use_cache": True, "vocab_size": 49152},
    # EleutherAI/gpt-j-6b: parallel attention, no attention biases, untied head with a bias
    "gpt-j-6b": {"activation_function": "gelu_new", "architectures": ["GPTJForCausalLM"], "bos_token_id": 50256,
                 "eos_token_id": 50256, "layer_norm_epsilon": 1e-05, "model_type": "gptj", "n_embd": 4096, "n_head": 16,
                 "n_inner": None, "n_layer": 28, "n_positions": 2048, "rotary": True, "rotary_dim": 64,
                 "tie_word_embeddings": False, "vocab_size": 50400},
    # openai-community/gpt2: learned positions, Conv1D projections with biases, tied embedding, fp32
    "gpt2": {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "bos_token_id": 50256,
             "eos_token_id": 50256, "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768,
             "n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257},
    # Qwen/Qwen3-8B: GQA, explicit head_dim, query and key RMSNorms per head, untied head
    "qwen3-8b": {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "bos_token_id": 151643,
                 "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
                 "intermediate_size": 12288, "max_position_embeddings": 40960, "max_window_layers": 36,
                 "model_type": "qwen3", "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
                 "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
                 "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_sliding_window": False,
                 "vocab_size": 151936},
    # google/gemma-2-9b: GeGLU, head_dim 256 × 16 heads (wider than hidden 3584), four RMSNorms per layer, tied
    "gemma-2-9b": {"architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attn_logit_softcapping": 50.0,
                   "bos_token_id": 2, "eos_token_id": 1, "final_logit_softcapping": 30.0, "head_dim": 256,
                   "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584, "intermediate_size": 14336,
                   "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 16,
                   "num_hidden_layers": 42, "num_key_value_heads": 8, "pad_token_id": 0, "query_pre_attn_scalar": 256,
                   "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096, "torch_dtype": "bfloat16",
                   "vocab_size": 256000},
    # microsoft/Phi-3-mini-4k-instruct: fused gated MLP and QKV, no biases, RMSNorm, untied head
    "phi-3-mini-4k": {"architectures": ["Phi3ForCausalLM"], "bos_token_id": 1, "eos_token_id": 32000,
                      "hidden_act": "silu", "hidden_size": 3072, "intermediate_size": 8192,
                      "max_position_embeddings": 4096, "model_type": "phi3", "num_attention_heads": 32,
                      "num_hidden_layers": 32, "num_key_value_heads": 32, "original_max_position_embeddings": 4096,
                      "pad_token_id": 32000, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0,
                      "sliding_window": 2047, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
                      "vocab_size": 32064},
}

#: Published parameter counts of the configs above (count, where published).
PUBLISHED_COUNTS = {
    "pythia-6.9b": (6_857_302_016, "Pythia model card (EleutherAI/pythia-6.9b), total params 6,857,302,016"),
    "phi-2": (2.78e9, "Hugging Face model page microsoft/phi-2, safetensors: 2.78B params"),
    "starcoder2-7b": (7.17e9, "Hugging Face model page bigcode/starcoder2-7b, safetensors: 7.17B params"),
    "gpt-j-6b": (6_053_381_344, "GPT-J model card (EleutherAI/gpt-j-6b), n_parameters 6,053,381,344"),
    "qwen3-8b": (8.2e9, "Qwen3-8B model card: 'Number of Parameters: 8.2B' (non-embedding 6.95B)"),
    "gemma-2-9b": (9.24e9, "Hugging Face model page google/gemma-2-9b, safetensors: 9.24B params"),
    "phi-3-mini-4k": (3.82e9, "Hugging Face model page microsoft/Phi-3-mini-4k-instruct, safetensors: 3.82B params"),
}


def _write(tmp_path, fields: dict, name: str = "config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(fields))
    return path


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_every_decoder_family_counts_its_published_parameters_within_one_percent(name, tmp_path):
    published, _source = PUBLISHED_COUNTS[name]
    spec = get_config_model(_write(tmp_path, PUBLISHED[name]))
    assert abs(spec.num_params / published - 1) < 0.01, (spec.num_params, published)


def test_the_two_matrix_families_are_counted_by_hand():
    """Pythia-6.9B exactly as its model card states (6,857,302,016), by the GPT-NeoX layout: per layer
    fused QKV and dense with biases (4h² + 4h), a two-matrix MLP with biases (2 · h · 4h + 5h) and two
    LayerNorms (4h); the final LayerNorm (2h); an untied embedding and head (2 · V · h)."""
    h, layers, vocab = 4096, 32, 50432
    layer = (4 * h * h + 4 * h) + (2 * h * 4 * h + 4 * h + h) + 4 * h
    assert layers * layer + 2 * h + 2 * vocab * h == 6_857_302_016


def test_pythia_and_phi_keep_their_kv_cache(tmp_path):
    """The counts set the memory the weights leave for KV: Pythia-6.9B on one L4 keeps 8.8 GiB (0.9 × 24 GiB
    − 13.7 GB of fp16 weights), not the 4.8 GiB a gated-MLP count (9.0 B parameters) would leave."""
    from paged.sim.deployment import get_deployment

    pythia = get_deployment(str(_write(tmp_path, PUBLISHED["pythia-6.9b"], "pythia.json")), "l4")
    assert pythia.model.num_params == 6_857_302_016
    assert round(pythia.kv_cache_bytes / GiB, 1) == 8.8
    assert pythia.model.kv_bytes_per_token == 2 * 32 * 32 * 128 * 2  # MHA, fp16
    phi = get_config_model(_write(tmp_path, PUBLISHED["phi-2"], "phi.json"))
    assert (phi.num_heads, phi.num_kv_heads, phi.head_size) == (32, 32, 80)
    assert phi.kv_bytes_per_token == 2 * 32 * 32 * 80 * 2


def test_kv_bytes_of_gqa_mqa_and_explicit_head_dim_families(tmp_path):
    starcoder = get_config_model(_write(tmp_path, PUBLISHED["starcoder2-7b"], "sc.json"))
    assert (starcoder.num_kv_heads, starcoder.head_size) == (4, 128) and starcoder.tied_embeddings
    assert starcoder.kv_bytes_per_token == 2 * 32 * 4 * 128 * 2
    gemma2 = get_config_model(_write(tmp_path, PUBLISHED["gemma-2-9b"], "g.json"))  # 16 heads × 256 > hidden 3584
    assert gemma2.head_size == 256 and gemma2.kv_bytes_per_token == 2 * 42 * 8 * 256 * 2
    gpt2 = get_config_model(_write(tmp_path, PUBLISHED["gpt2"], "gpt2.json"))  # no torch_dtype: fp16, as vLLM's "auto"
    assert gpt2.num_params == 124_439_808 and gpt2.max_seq_len == 1024  # n_positions
    assert gpt2.kv_bytes_per_token == 2 * 12 * 12 * 64 * 2


@pytest.mark.parametrize("fields, message", [
    ({"model_type": "bert", "hidden_size": 768, "intermediate_size": 3072, "max_position_embeddings": 512,
      "num_attention_heads": 12, "num_hidden_layers": 12, "type_vocab_size": 2, "vocab_size": 30522},
     "'bert' is an encoder-only model"),
    ({"model_type": "t5", "d_model": 512, "num_layers": 6, "num_heads": 8, "vocab_size": 32128},
     "'t5' is an encoder-decoder model"),
    ({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
      "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "vocab_size": 32000},
     "'mixtral' is a mixture-of-experts model (num_local_experts=8)"),
    ({"model_type": "qwen2_moe", "hidden_size": 2048, "num_attention_heads": 16, "num_hidden_layers": 24,
      "num_experts": 60, "vocab_size": 151936}, "'qwen2_moe' is a mixture-of-experts model (num_experts=60)"),
    ({"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71, "num_hidden_layers": 32,
      "vocab_size": 65024}, "model_type 'falcon' is not a decoder family whose parameters are counted"),
    ({"model_type": "no-such-type", "hidden_size": 8}, "transformers does not know model_type 'no-such-type'"),
])
def test_an_architecture_it_cannot_count_is_refused_by_name(fields, message, tmp_path):
    path = _write(tmp_path, fields)
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        get_config_model(path)
    assert str(path) in str(err.value)


# -- the model's positions bound the server's length (vLLM's _get_and_verify_max_len) ------------------
def test_a_max_seq_len_beyond_the_positions_is_refused_unless_allowed(tmp_path):
    path = _write(tmp_path, PUBLISHED["pythia-6.9b"])
    with pytest.raises(ValueError, match=r"max_seq_len=4096 is longer than .*'s 2048 positions "
                                         r"\(max_position_embeddings=2048\).*allow_long_max_seq_len=True"):
        get_config_model(path, max_seq_len=4096)
    long = get_config_model(path, max_seq_len=4096, allow_long_max_seq_len=True)
    assert (long.max_seq_len, long.model_max_len) == (4096, 2048)
    assert get_config_model(path, max_seq_len=1024).max_seq_len == 1024  # shorter is always fine
    with pytest.raises(ValueError, match="max_seq_len=4096 is longer than opt-13b's 2048 positions"):
        get_model_spec("opt-13b", 4096)
    assert get_model_spec("opt-13b", 4096, allow_long_max_seq_len=True).max_seq_len == 4096


@pytest.mark.parametrize("scaling, positions, expected", [
    ({"type": "linear", "factor": 2.0}, 4096, 8192),  # linear position interpolation: factor × positions
    ({"type": "dynamic", "factor": 4.0}, 4096, 16384),  # dynamic NTK, as vLLM counts it
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 32768, 131072),  # Qwen2.5's
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}, 131072, 131072),  # Llama 3.1 states its extended length
])
def test_rope_scaling_extends_the_models_positions(scaling, positions, expected, tmp_path):
    fields = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_attention_heads": 8,
              "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": positions, "rope_scaling": scaling}
    spec = get_config_model(_write(tmp_path, fields))
    assert spec.model_max_len == spec.max_seq_len == expected
    with pytest.raises(ValueError, match=f"max_seq_len={expected + 1} is longer"):
        get_config_model(_write(tmp_path, fields), max_seq_len=expected + 1)
