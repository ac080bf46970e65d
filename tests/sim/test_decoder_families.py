"""Every decoder family's count is exactly what transformers builds: each family, with random shapes and
every bias / norm / tying option its config offers, is built on PyTorch's meta device (no memory, no
weights) and its parameters are counted against :func:`paged.sim.decoder_families.count_parameters`."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from paged.sim.decoder_families import FAMILIES, family_of
from paged.sim.model_config import spec_from_hf_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

FLAGS = ("attention_bias", "mlp_bias", "use_bias", "qk_layernorm", "tie_word_embeddings")


def _config(model_type: str, heads: int, kv_ratio: int, head: int, layers: int, vocab: int, flags: dict, opt: dict):
    kv_heads = heads // kv_ratio
    hidden = heads * 8
    fields = dict(vocab_size=vocab, pad_token_id=0, bos_token_id=1, eos_token_id=2, **flags)
    if model_type in ("gpt2", "gptj"):
        fields.update(n_embd=hidden, n_head=heads, n_layer=layers, n_positions=64, n_inner=opt["n_inner"])
        if model_type == "gptj":
            fields["rotary_dim"] = 4
    else:
        fields.update(hidden_size=hidden, num_attention_heads=heads, num_hidden_layers=layers,
                      max_position_embeddings=64)
        if model_type == "opt":  # MHA only; OPT-350m's projected embedding and post-norm variant
            fields.update(ffn_dim=48, word_embed_proj_dim=opt["proj"] or hidden,
                          do_layer_norm_before=opt["pre_norm"], enable_bias=opt["bias"])
        else:
            fields.update(intermediate_size=48,
                          num_key_value_heads=heads if model_type == "gpt_neox" else kv_heads)
        if model_type in ("llama", "qwen3", "gemma", "gemma2"):
            fields["head_dim"] = head  # an explicit head size, not hidden / heads
    return transformers.AutoConfig.for_model(model_type, **fields)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model_type=st.sampled_from(sorted(FAMILIES)), heads=st.sampled_from([4, 8]), kv_ratio=st.sampled_from([1, 2, 4]),
       head=st.sampled_from([8, 16]), layers=st.integers(1, 2), vocab=st.sampled_from([97, 128]),
       flags=st.fixed_dictionaries({name: st.booleans() for name in FLAGS}),
       opt=st.fixed_dictionaries({"n_inner": st.sampled_from([None, 48]), "proj": st.sampled_from([None, 16]),
                                  "pre_norm": st.booleans(), "bias": st.booleans()}))
def test_the_count_is_transformers_own_for_every_family_and_option(model_type, heads, kv_ratio, head, layers, vocab,
                                                                     flags, opt):
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = _config(model_type, heads, kv_ratio, head, layers, vocab, flags, opt)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config)
    built = sum(p.numel() for p in model.parameters())  # a tied weight counts once
    spec = spec_from_hf_config(model_type, config)
    assert spec.num_params == built
    # KV per token: K and V of every layer's KV heads (what the model's attention projects to)
    layer = model.get_decoder().layers[0] if hasattr(model.get_decoder(), "layers") else None
    k_proj = getattr(getattr(layer, "self_attn", None), "k_proj", None)
    if k_proj is not None:  # the families with separate K and V projections
        assert k_proj.out_features == spec.num_kv_heads * spec.head_size


def test_every_family_is_one_transformers_knows():
    for model_type in FAMILIES:
        assert family_of(transformers.AutoConfig.for_model(model_type), "test") is FAMILIES[model_type]
