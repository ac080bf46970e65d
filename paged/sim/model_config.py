"""Model shapes from a Hugging Face ``config.json`` (transformers' config classes, no hub access).

A local ``config.json`` (or the name of one shipped in the package data, ``data/configs/``) is
read into its transformers config class (``AutoConfig.for_model(model_type, **fields)``: the
class's own defaults and attribute names apply, e.g. Gemma's explicit ``head_dim``) and becomes a
:class:`~paged.sim.model_spec.ModelSpec`:

* **KV heads** ``num_key_value_heads`` (grouped-query attention, GQA; one head: multi-query, MQA;
  as many as the query heads: multi-head, MHA): KV bytes per token =
  2 × layers × KV heads × head size × bytes per element;
* **parameters**, counted from the shape: per layer the Q, K, V and output projections
  (``hidden × head size × (heads + 2 × KV heads) + heads × head size × hidden``), their biases
  where the architecture has them (Qwen2's Q/K/V biases, ``attention_bias``), the MLP (three
  matrices for a gated MLP, SwiGLU / GeGLU: every shipped architecture; two for OPT) and the two
  norms; then the final norm, the embedding and, unless ``tie_word_embeddings``, the LM head. The
  shipped configs' counts agree with the published ones within 0.02% (:data:`PUBLISHED_PARAMS`);
* **dtype** from ``torch_dtype`` / ``dtype`` (bytes per weight and per KV element);
* **max sequence length**: ``max_position_embeddings`` unless a serving limit is given (vLLM's
  ``max_model_len`` does the same).

Only dense decoder-only models with the standard attribute names are read (Llama, Mistral, Qwen2,
Gemma, OPT and their relatives); a config without them, or a mixture of experts, is refused by name.
Sliding-window attention is not modelled: every token's KV is kept (Mistral-7B v0.3 and Qwen2.5, the
shipped ones, attend to the whole context).

transformers is imported when a config is first read (its config classes only, about 3 s once per
process); specs are cached per file.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from paged.sim.model_spec import ModelSpec

__all__ = ["SHIPPED_CONFIGS", "PUBLISHED_PARAMS", "config_path", "load_config", "spec_from_hf_config",
           "get_config_model"]

#: The configs in the package data (``data/configs/<name>.json``): name -> Hugging Face repository
#: whose ``config.json`` the architecture fields come from (data/README.md gives sources and licences).
SHIPPED_CONFIGS: dict[str, str] = {
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B",
    "mistral-7b-v0.3": "mistralai/Mistral-7B-v0.3",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B",
    "qwen2.5-72b": "Qwen/Qwen2.5-72B",
    "gemma-2b": "google/gemma-2b",
}

#: Published parameter counts (count, where published), for the test that the counted ones agree.
PUBLISHED_PARAMS: dict[str, tuple[float, str]] = {
    "llama-3.1-8b": (8.03e9, "Hugging Face model page meta-llama/Llama-3.1-8B, safetensors: 8.03B params"),
    "llama-3.1-70b": (70.6e9, "Hugging Face model page meta-llama/Llama-3.1-70B, safetensors: 70.6B params"),
    "mistral-7b-v0.3": (7.25e9, "Hugging Face model page mistralai/Mistral-7B-v0.3, safetensors: 7.25B params"),
    "qwen2.5-7b": (7.61e9, "Qwen2.5-7B model card: 'Number of Parameters: 7.61B'"),
    "qwen2.5-72b": (72.7e9, "Qwen2.5-72B model card: 'Number of Parameters: 72.7B'"),
    "gemma-2b": (2_506_434_560, "Gemma technical report (Gemma Team, 2024), Table 2: 2B model, "
                                "524,550,144 embedding + 1,981,884,416 non-embedding parameters"),
}

#: Bytes per element of a config's ``torch_dtype`` (IEEE 754 half, bfloat16 and single precision).
_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float": 4, "half": 2}
#: Architectures whose attention projections carry biases whatever ``attention_bias`` says. Source:
#: transformers' ``Qwen2Attention`` (``modeling_qwen2.py``) builds ``q_proj``, ``k_proj`` and ``v_proj`` with
#: ``bias=True`` and ``o_proj`` without, from no config field.
_QKV_BIAS = {"qwen2"}


def config_path(model: str | os.PathLike) -> Path:
    """The ``config.json`` of a shipped name (:data:`SHIPPED_CONFIGS`), or ``model`` itself as a
    path (a file, or a folder holding ``config.json``).

    Raises:
        ValueError: naming the choices and the path looked for, for a name that is neither shipped nor a file.
    """
    from paged.workloads.package_data import data_path

    if isinstance(model, str) and model.lower() in SHIPPED_CONFIGS:
        return data_path(f"configs/{model.lower()}.json")
    path = Path(model)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ValueError(f"unknown model {str(model)!r}: neither a Table 1 preset (opt-13b, opt-66b, opt-175b, "
                         f"llama-13b), a shipped config ({', '.join(SHIPPED_CONFIGS)}) nor a config.json file "
                         f"(looked for {path})")
    return path


def load_config(model: str | os.PathLike):
    """The transformers config object of ``model`` (a shipped name or a local ``config.json`` path).

    Raises:
        ValueError: as :func:`config_path`, and for a file that is not JSON, has no
            ``model_type``, or names a type transformers does not know.
    """
    path = config_path(model)
    try:
        fields = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not a JSON config: {err}") from None
    if not isinstance(fields, dict) or "model_type" not in fields:
        raise ValueError(f"{path} has no 'model_type': not a Hugging Face config.json")
    from transformers import AutoConfig
    from transformers.utils import logging as hf_logging

    fields = dict(fields)
    model_type = fields.pop("model_type")
    if "torch_dtype" in fields and "dtype" not in fields:  # the published files' name; transformers 5 says dtype
        fields["dtype"] = fields.pop("torch_dtype")
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its notices about legacy field values are not ours to print
    try:
        return AutoConfig.for_model(model_type, **fields)
    except ValueError as err:
        raise ValueError(f"{path}: transformers does not know model_type {model_type!r} ({err})") from None
    finally:
        hf_logging.set_verbosity(verbosity)


def _int(config, name: str, path) -> int:
    value = getattr(config, name, None)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{path}: config field {name!r} must be an integer ≥ 1 for a dense decoder-only "
                         f"model, got {value!r}")
    return value


def spec_from_hf_config(name: str, config, max_seq_len: int | None = None, source: str = "config") -> ModelSpec:
    """A :class:`ModelSpec` from a transformers config object (module docstring for what is counted).

    Args:
        name: the spec's name (a shipped name or the config's path).
        config: a ``transformers.PretrainedConfig`` of a dense decoder-only model.
        max_seq_len: longest sequence served (tokens); None: ``max_position_embeddings``.
        source: where the config came from, for error messages.

    Raises:
        ValueError: naming the field, for a config without the fields of a dense decoder-only model
            (a mixture of experts among them), a head count that does not divide, an unknown dtype,
            or a ``max_seq_len`` that is not an integer ≥ 1.
    """
    if getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None):
        raise ValueError(f"{source}: mixture-of-experts models are not modelled (only dense decoder-only ones)")
    hidden = _int(config, "hidden_size", source)
    layers = _int(config, "num_hidden_layers", source)
    heads = _int(config, "num_attention_heads", source)
    vocab = _int(config, "vocab_size", source)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head = getattr(config, "head_dim", None) or hidden // heads
    if heads % kv_heads:
        raise ValueError(f"{source}: {heads} attention heads do not split into groups of {kv_heads} KV heads")
    gated = getattr(config, "ffn_dim", None) is None  # OPT's two-matrix MLP has ffn_dim, the others gate
    inter = getattr(config, "ffn_dim", None) or _int(config, "intermediate_size", source)
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "float16"
    dtype_name = str(dtype).removeprefix("torch.")
    if dtype_name not in _DTYPE_BYTES:
        raise ValueError(f"{source}: dtype {dtype_name!r} is not one of {sorted(_DTYPE_BYTES)}")
    if max_seq_len is None:
        max_seq_len = _int(config, "max_position_embeddings", source)
    elif isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int) or max_seq_len < 1:
        raise ValueError(f"max_seq_len must be an integer ≥ 1 (tokens), got {max_seq_len!r}")
    q_width, kv_width = heads * head, kv_heads * head
    attn = hidden * (q_width + 2 * kv_width) + q_width * hidden
    if getattr(config, "model_type", None) in _QKV_BIAS or getattr(config, "attention_bias", False):
        attn += q_width + 2 * kv_width
    mlp = (3 if gated else 2) * hidden * inter
    tied = bool(getattr(config, "tie_word_embeddings", True))
    params = layers * (attn + mlp + 2 * hidden) + hidden + vocab * hidden * (1 if tied else 2)
    return ModelSpec(name, layers, hidden, heads, kv_heads, head, inter, vocab, params, _DTYPE_BYTES[dtype_name],
                     max_seq_len, tied)


@functools.lru_cache(maxsize=64)
def _cached(name: str, path: str, mtime_ns: int, max_seq_len: int | None) -> ModelSpec:
    return spec_from_hf_config(name, load_config(path), max_seq_len, source=path)


def get_config_model(model: str | os.PathLike, max_seq_len: int | None = None) -> ModelSpec:
    """The :class:`ModelSpec` of a shipped config name (:data:`SHIPPED_CONFIGS`, e.g.
    ``"llama-3.1-8b"``) or of a local ``config.json`` (its path is the spec's name).

    Cost: the first call in a process imports transformers' config classes (~3 s); the result is
    cached per file (and its modification time) and ``max_seq_len``.

    Raises:
        ValueError: as :func:`config_path`, :func:`load_config` and :func:`spec_from_hf_config`.
    """
    path = config_path(model)
    name = model.lower() if isinstance(model, str) and model.lower() in SHIPPED_CONFIGS else str(model)
    return _cached(name, str(path), path.stat().st_mtime_ns, max_seq_len)
