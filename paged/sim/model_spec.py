"""Model shapes and the KV cache capacity they imply (paper §3, Table 1).

KV bytes per token = 2 (K and V) × layers × KV heads × head size × bytes per element. Each preset
is derived from the model's published Hugging Face configuration (:data:`PUBLISHED_CONFIGS`, the
``config.json`` values of facebook/opt-13b, -66b, -175b's published shape and huggyllama/llama-13b)
by :func:`spec_from_config`, the same function that reads a transformers config object; a test
builds the transformers config classes from the same values and checks they give the same specs.
So no weights, no hub downloads and no transformers import are involved (``python -m paged
simulate`` starts in well under a second). Today's models come from their own ``config.json``
through transformers' config classes (:mod:`paged.sim.model_config`).
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from types import SimpleNamespace

from paged.core.checks import as_positive_int
from paged.core.max_model_len import verify_max_model_len

__all__ = ["ModelSpec", "MODELS", "PUBLISHED_CONFIGS", "get_model", "kv_cache_slots", "spec_from_config",
           "with_max_seq_len", "GiB"]

GiB = 1024**3


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The shape of a decoder-only transformer, as far as serving cares.

    Attributes:
        name: preset name, e.g. ``"opt-13b"``.
        num_layers, hidden_size, num_heads, num_kv_heads, head_size: architecture.
        intermediate_size: MLP width.
        vocab_size: vocabulary (tokens).
        num_params: parameters (count).
        dtype_bytes: bytes per weight / KV element (2 for fp16).
        max_seq_len: maximum sequence length (tokens).
        tied_embeddings: the output projection (LM head) is the input embedding matrix (OPT); False
            when it is a second ``vocab_size × hidden_size`` matrix counted in ``num_params``
            (Llama 3, Mistral, Qwen2.5).
        model_max_len: the longest sequence the model's positions allow (tokens; ``max_position_embeddings``
            or its RoPE-scaled length, :func:`paged.core.max_model_len.derived_max_model_len`), None if
            unknown. ``max_seq_len`` beyond it was allowed explicitly (:func:`with_max_seq_len`).
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_size: int
    intermediate_size: int
    vocab_size: int
    num_params: int
    dtype_bytes: int = 2
    max_seq_len: int = 2048
    tied_embeddings: bool = True
    model_max_len: int | None = None

    def __post_init__(self) -> None:
        """Refuse a shape no transformer has: a count that is not a positive integer, or query heads that the KV
        heads do not divide (ValueError naming the field)."""
        for field in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_size", "intermediate_size",
                      "vocab_size", "num_params", "dtype_bytes", "max_seq_len"):
            as_positive_int(getattr(self, field), f"model {self.name!r}: {field}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"model {self.name!r}: {self.num_heads} query heads cannot share "
                             f"{self.num_kv_heads} KV heads (a multiple is needed)")

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V one token occupies across all layers (bytes)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_size * self.dtype_bytes

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weights (bytes)."""
        return self.num_params * self.dtype_bytes

    @property
    def embedding_params(self) -> int:
        """Parameters of one ``vocab_size × hidden_size`` embedding matrix (count)."""
        return self.vocab_size * self.hidden_size

    @property
    def matmul_params(self) -> int:
        """Parameters every token is multiplied through (count): all but the input embedding (a
        lookup) and the LM head (applied only to the tokens that sample, see the cost model)."""
        return self.num_params - self.embedding_params * (1 if self.tied_embeddings else 2)

    @property
    def streamed_weight_bytes(self) -> int:
        """Bytes of weights one forward pass reads (bytes): all of them but an untied input
        embedding, of which only the batch's rows are read."""
        return (self.num_params - (0 if self.tied_embeddings else self.embedding_params)) * self.dtype_bytes

    @property
    def attention_flops_width(self) -> int:
        """Query heads × head size (elements): attention's FLOPs per token pair per layer are twice
        this for the scores and twice for the values, whatever the KV heads (GQA / MQA share K and V
        between query heads but compute every query head's products)."""
        return self.num_heads * self.head_size

    @property
    def decode_attention_flops_per_byte(self) -> float:
        """Arithmetic intensity of decode attention (FLOP/byte): per cached token and layer, every
        query head computes a score and a weighted value (4 × heads × head size FLOPs) over K and V
        read once (2 × KV heads × head size elements). It is the query heads per KV head divided by
        the bytes per element: 1 for fp16 MHA, 4–8 for GQA, far below any GPU's ridge point
        (:attr:`paged.sim.gpu_spec.GPUSpec.ridge_flops_per_byte`), so the cost model reads decode
        attention as memory bound."""
        return 4 * self.num_heads / (2 * self.num_kv_heads * self.dtype_bytes)


def spec_from_config(name: str, config, max_seq_len: int = 2048) -> ModelSpec:
    """A :class:`ModelSpec` from a transformers-style config (OPT or Llama attribute names); ValueError on a
    count that is not a positive integer or a hidden size the heads do not divide.

    ``config`` is a ``transformers`` config object or anything with the same attributes
    (``hidden_size``, ``num_attention_heads``, ``num_hidden_layers``, ``vocab_size``, ``ffn_dim`` (OPT)
    or ``intermediate_size`` and ``num_key_value_heads`` (Llama)). Parameters count the attention and
    MLP matrices of every layer plus the embedding (biases and norms are left out: < 0.1%).
    """
    hidden = config.hidden_size
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    layers = config.num_hidden_layers
    inter = getattr(config, "ffn_dim", None) or config.intermediate_size
    vocab = config.vocab_size
    for field, value in (("hidden_size", hidden), ("num_attention_heads", heads), ("num_key_value_heads", kv_heads),
                         ("num_hidden_layers", layers)):
        as_positive_int(value, f"model {name!r}: the config's {field}")
    if hidden % heads:
        raise ValueError(f"model {name!r}: hidden_size {hidden} is not a multiple of num_attention_heads {heads}")
    head = hidden // heads
    gated = hasattr(config, "num_key_value_heads")  # Llama's SwiGLU MLP has three matrices
    attn = hidden * head * (heads + 2 * kv_heads) + heads * head * hidden
    mlp = (3 if gated else 2) * hidden * inter
    params = layers * (attn + mlp) + vocab * hidden
    model_max_len = getattr(config, "max_position_embeddings", None)
    return ModelSpec(name, layers, hidden, heads, kv_heads, head, inter, vocab, params, 2, max_seq_len, True,
                     model_max_len)


def with_max_seq_len(spec: ModelSpec, max_seq_len: int | None, *, allow_long: bool = False) -> ModelSpec:
    """``spec`` serving sequences of up to ``max_seq_len`` tokens (None: unchanged).

    Raises:
        ValueError: for a ``max_seq_len`` that is not an integer ≥ 1, or one beyond the model's
            ``model_max_len`` without ``allow_long`` (:func:`paged.core.max_model_len.verify_max_model_len`).
    """
    if max_seq_len is None:
        return spec
    if not isinstance(max_seq_len, bool) and isinstance(max_seq_len, numbers.Integral):
        max_seq_len = int(max_seq_len)  # numpy integers from a sweep's grid
    length = verify_max_model_len(spec.model_max_len, max_seq_len, allow_long=allow_long, model=spec.name,
                                  how=f"max_position_embeddings={spec.model_max_len}")
    return dataclasses.replace(spec, max_seq_len=length)


def _opt(layers: int, hidden: int, heads: int) -> dict:
    return {"model_type": "opt", "num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
            "ffn_dim": 4 * hidden, "vocab_size": 50272, "max_position_embeddings": 2048}


#: The published Hugging Face ``config.json`` values of each preset (OPT: Zhang et al. 2022, Table 1
#: shapes as in facebook/opt-*; LLaMA-13B: Touvron et al. 2023, as in huggyllama/llama-13b).
PUBLISHED_CONFIGS: dict[str, dict] = {
    "opt-13b": _opt(40, 5120, 40),
    "opt-66b": _opt(64, 9216, 72),
    "opt-175b": _opt(96, 12288, 96),
    "llama-13b": {"model_type": "llama", "num_hidden_layers": 40, "hidden_size": 5120, "num_attention_heads": 40,
                  "num_key_value_heads": 40, "intermediate_size": 13824, "vocab_size": 32000,
                  "max_position_embeddings": 2048},
}


def _presets() -> dict[str, ModelSpec]:
    return {name: spec_from_config(name, SimpleNamespace(**{k: v for k, v in values.items() if k != "model_type"}))
            for name, values in PUBLISHED_CONFIGS.items()}


MODELS: dict[str, ModelSpec] = {}


def get_model(name: str) -> ModelSpec:
    """The preset :class:`ModelSpec` called ``name`` (opt-13b, opt-66b, opt-175b, llama-13b).

    Raises:
        ValueError: for an unknown name; TypeError for a name that is not a string.
    """
    if not isinstance(name, str):
        raise TypeError(f"model must be a preset name (one of {sorted(MODELS or _presets())}), got {name!r}")
    if not MODELS:
        MODELS.update(_presets())
    try:
        return MODELS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}") from None


def kv_cache_slots(model: ModelSpec, kv_cache_bytes: int, block_size: int = 1) -> int:
    """Token slots a KV cache of ``kv_cache_bytes`` holds, rounded down to whole blocks.

    Example: OPT-13B (800 KiB per token) with 12 GiB holds 15,728 slots (the paper rounds to
    15.7K); in 16-token blocks, 983 blocks = 15,728 slots.

    Raises:
        ValueError: if the budget holds no block at all.
    """
    blocks = kv_cache_bytes // (model.kv_bytes_per_token * block_size)
    if blocks < 1:
        raise ValueError(
            f"a KV cache of {kv_cache_bytes} bytes holds no {block_size}-token block of "
            f"{model.name} ({model.kv_bytes_per_token} bytes per token)"
        )
    return blocks * block_size
