"""How each decoder family lays out its parameters, so a ``config.json`` gives the count (§6.1).

The parameter count sets a deployment's weight bytes, and so the KV cache memory left beside them
(:mod:`paged.sim.deployment`): counting a two-matrix MLP as a gated one overstates a GPT-NeoX model
by a third and shrinks its cache accordingly. Each family below is described as transformers'
``modeling_<type>.py`` builds it, per layer:

* attention: Q, K and V projections (``heads`` and ``KV heads`` × head size wide: MHA, GQA, MQA) and
  the output projection, each with or without a bias;
* MLP: three matrices when gated (SwiGLU / GeGLU: Llama, Mistral, Qwen, Gemma, Phi-3) or two (up and
  down: OPT, GPT-2, GPT-J, GPT-NeoX, Phi-2, Starcoder2), with or without biases;
* norms: RMSNorm (a weight) or LayerNorm (weight and bias), two per layer, one where attention and
  MLP read the same normalised input (GPT-J, Phi-2: parallel attention), four in Gemma 2; Qwen 3 and
  Phi's ``qk_layernorm`` also normalise queries and keys per head;

then the final norm, the token embedding, learned position embeddings (GPT-2; OPT's table has two
extra rows), and the LM head unless tied to the embedding (with a bias in GPT-J and Phi-2). A test
builds every family on PyTorch's meta device and checks the count is transformers' own, exactly.

Anything else is refused by name: encoder-only and encoder-decoder models (no decoding to serve),
mixtures of experts (their active parameters per token are not modelled), and other model types.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Family", "FAMILIES", "ENCODER_ONLY", "family_of", "count_parameters"]


@dataclass(frozen=True, slots=True)
class Family:
    """One decoder family's layout (module docstring). A ``str`` flag names the config field that says.

    Attributes:
        gated: three MLP matrices (gated) rather than two.
        layer_norm: LayerNorm (weight and bias) rather than RMSNorm (weight only).
        norms_per_layer: norms of ``hidden_size`` per layer.
        head_norms: norms of head size per layer (query and key norms): an int, or a config flag
            that, when true, adds two.
        qkv_bias, out_bias, mlp_bias: whether the Q/K/V projections, the output projection and the
            MLP matrices have biases.
        lm_head_bias: the untied LM head has a bias.
        positions: learned position embeddings: extra rows beyond the maximum positions (OPT: 2), or
            None for rotary embeddings (no parameters).
        intermediate: the config field of the MLP width; None: GPT-2's ``n_inner``, 4 × hidden when unset.
    """

    gated: bool
    layer_norm: bool
    norms_per_layer: int = 2
    head_norms: int | str = 0
    qkv_bias: bool | str = False
    out_bias: bool | str = False
    mlp_bias: bool | str = False
    lm_head_bias: bool = False
    positions: int | None = None
    intermediate: str | None = "intermediate_size"


_LLAMA = Family(gated=True, layer_norm=False, qkv_bias="attention_bias", out_bias="attention_bias",
                mlp_bias="mlp_bias")
_GPT2 = Family(gated=False, layer_norm=True, qkv_bias=True, out_bias=True, mlp_bias=True, positions=0,
               intermediate=None)

#: model_type -> layout, from transformers' modeling files of each type.
FAMILIES: dict[str, Family] = {
    "llama": _LLAMA,
    "mistral": Family(gated=True, layer_norm=False),
    "qwen2": Family(gated=True, layer_norm=False, qkv_bias=True),
    "qwen3": Family(gated=True, layer_norm=False, head_norms=2, qkv_bias="attention_bias", out_bias="attention_bias"),
    "gemma": Family(gated=True, layer_norm=False, qkv_bias="attention_bias", out_bias="attention_bias"),
    "gemma2": Family(gated=True, layer_norm=False, norms_per_layer=4, qkv_bias="attention_bias",
                     out_bias="attention_bias"),
    "phi3": Family(gated=True, layer_norm=False),
    "opt": Family(gated=False, layer_norm=True, qkv_bias="enable_bias", out_bias="enable_bias", mlp_bias="enable_bias",
                  positions=2, intermediate="ffn_dim"),
    "gpt2": _GPT2,
    "gptj": Family(gated=False, layer_norm=True, norms_per_layer=1, mlp_bias=True, lm_head_bias=True,
                   intermediate=None),
    "gpt_neox": Family(gated=False, layer_norm=True, qkv_bias="attention_bias", out_bias="attention_bias",
                       mlp_bias=True),
    "phi": Family(gated=False, layer_norm=True, norms_per_layer=1, head_norms="qk_layernorm", qkv_bias=True,
                  out_bias=True, mlp_bias=True, lm_head_bias=True),
    "starcoder2": Family(gated=False, layer_norm=True, qkv_bias="use_bias", out_bias="use_bias", mlp_bias="use_bias"),
}

#: Encoder-only model types (they encode text, they do not generate it: nothing to serve).
ENCODER_ONLY = frozenset({"bert", "roberta", "xlm-roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2",
                          "camembert", "mpnet", "modernbert", "ernie", "nomic_bert", "xlm"})
#: Config fields that mark a mixture of experts (Mixtral, Qwen-MoE, DeepSeek, OLMoE, ...).
_EXPERT_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


def family_of(config, source: str) -> Family:
    """The :class:`Family` of ``config`` (a transformers config), or a refusal that names why.

    Raises:
        ValueError: naming the model type and ``source``, for a mixture of experts, an encoder-only or
            encoder-decoder model, or a model type not in :data:`FAMILIES`.
    """
    model_type = getattr(config, "model_type", None)
    experts = next((f"{name}={value}" for name in _EXPERT_FIELDS if (value := getattr(config, name, None))), None)
    if experts:
        raise ValueError(f"{source}: {model_type!r} is a mixture-of-experts model ({experts}): not modelled (only "
                         f"dense decoder-only models: {', '.join(FAMILIES)})")
    if model_type in ENCODER_ONLY:
        raise ValueError(f"{source}: {model_type!r} is an encoder-only model: it encodes text and generates none, so "
                         f"there is no KV cache to serve (decoder-only families: {', '.join(FAMILIES)})")
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(f"{source}: {model_type!r} is an encoder-decoder model: not modelled (decoder-only families: "
                         f"{', '.join(FAMILIES)})")
    if model_type not in FAMILIES:
        raise ValueError(f"{source}: model_type {model_type!r} is not a decoder family whose parameters are counted "
                         f"here ({', '.join(FAMILIES)})")
    if model_type == "gpt2" and getattr(config, "add_cross_attention", False):
        raise ValueError(f"{source}: a GPT-2 with cross-attention is an encoder-decoder's decoder: not modelled")
    return FAMILIES[model_type]


def _flag(config, value: bool | str) -> bool:
    return bool(getattr(config, value, False)) if isinstance(value, str) else value


def count_parameters(config, family: Family, *, hidden: int, layers: int, heads: int, kv_heads: int, head: int,
                     inter: int, vocab: int) -> int:
    """Parameters of ``config``'s model (count; module docstring), its shape already read.

    Cost: O(1).
    """
    norm = 2 if family.layer_norm else 1  # parameters per normalised element
    q, kv = heads * head, kv_heads * head
    attn = hidden * (q + 2 * kv) + q * hidden
    attn += (q + 2 * kv) * _flag(config, family.qkv_bias) + hidden * _flag(config, family.out_bias)
    mlp = (3 if family.gated else 2) * hidden * inter
    if _flag(config, family.mlp_bias):
        mlp += (2 if family.gated else 1) * inter + hidden
    head_norms = family.head_norms if isinstance(family.head_norms, int) else 2 * _flag(config, family.head_norms)
    layer_norms = family.norms_per_layer * hidden * norm + head_norms * head * norm
    final_norm = hidden * norm
    embed_dim, extra = hidden, 0
    if getattr(config, "model_type", None) == "opt":
        # OPT-350m embeds in 512 dimensions and projects to and from the hidden size; it (and OPT
        # without pre-norm) has no final norm; layer_norm_elementwise_affine=False drops every norm's parameters.
        embed_dim = getattr(config, "word_embed_proj_dim", None) or hidden
        extra = 2 * hidden * embed_dim if embed_dim != hidden else 0
        affine = getattr(config, "layer_norm_elementwise_affine", True)
        layer_norms = layer_norms if affine else 0
        keeps_final = (getattr(config, "do_layer_norm_before", True)
                       and not getattr(config, "_remove_final_layer_norm", False))
        final_norm = final_norm if affine and keeps_final else 0
    positions = 0
    if family.positions is not None:
        positions = (getattr(config, "max_position_embeddings", 0) + family.positions) * hidden
    embedding = vocab * embed_dim
    tied = bool(getattr(config, "tie_word_embeddings", True))
    lm_head = (0 if tied else embedding) + vocab * family.lm_head_bias  # a tied head keeps its own bias
    return layers * (attn + mlp + layer_norms) + final_norm + embedding + positions + extra + lm_head
