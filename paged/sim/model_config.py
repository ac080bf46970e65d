"""Model shapes from a Hugging Face ``config.json`` (transformers' config classes, no hub access).

A local ``config.json`` (or the name of one shipped in the package data, ``data/configs/``) is
read into its transformers config class (``AutoConfig.for_model(model_type, **fields)``: the
class's own defaults and attribute names apply, e.g. Gemma's explicit ``head_dim``) and becomes a
:class:`~paged.sim.model_spec.ModelSpec`:

* **KV heads** ``num_key_value_heads`` (grouped-query attention, GQA; one head: multi-query, MQA;
  as many as the query heads: multi-head, MHA) and the head size (``head_dim`` where the config
  states one, as Gemma's does, else ``hidden_size / heads``): KV bytes per token =
  2 × layers × KV heads × head size × bytes per element;
* **parameters**, counted from the shape as the family's transformers model lays them out
  (:mod:`paged.sim.decoder_families`: gated or two-matrix MLPs, biases, RMSNorm or LayerNorm,
  parallel attention, learned positions, a tied or untied LM head): the count transformers itself
  gives, within 0.1% of the published counts of the shipped configs (:data:`PUBLISHED_PARAMS`);
* **dtype** from ``torch_dtype`` / ``dtype`` (bytes per weight and per KV element);
* **max sequence length**: the model's own (``max_position_embeddings``, RoPE scaling taken into
  account, :mod:`paged.core.max_model_len`) unless a serving limit is given; a longer limit is
  refused unless allowed explicitly (vLLM's ``max_model_len`` and ``VLLM_ALLOW_LONG_MAX_MODEL_LEN``).

Only the dense decoder-only families of :data:`paged.sim.decoder_families.FAMILIES` are read (Llama,
Mistral, Qwen 2/3, Gemma 1/2, Phi-2/3, OPT, GPT-2, GPT-J, GPT-NeoX / Pythia, Starcoder2); an
encoder-only or encoder-decoder model, a mixture of experts or any other ``model_type`` is refused by
name. Sliding-window attention is not modelled: every token's KV is kept (Mistral-7B v0.3 and
Qwen2.5, the shipped ones, attend to the whole context).

transformers is imported when a config is first read (its config classes only, about 3 s once per
process); specs are cached per file.
"""

from __future__ import annotations

import functools
import json
import numbers
import os
from pathlib import Path

from paged.core.checks import as_positive_int
from paged.core.max_model_len import derived_max_model_len, verify_max_model_len
from paged.sim.decoder_families import FAMILIES, count_parameters, family_of
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



#: Fields every dense decoder's config.json states (under its own name, e.g. GPT-2's ``n_embd``), with the MLP
#: width of a family that has no default for it.
_REQUIRED_SHAPE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")

#: Shape fields of config.json (Llama / OPT names, GPT-2's) that must be positive integers where given.
_SHAPE_FIELDS = ("hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "head_dim",
                 "intermediate_size", "ffn_dim", "vocab_size", "n_embd", "n_head", "n_layer", "n_inner")


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
            ``model_type``, names a type transformers does not know, or leaves out a shape field
            (hidden size, layers, heads, vocabulary, a family's MLP width) its class would default.
    """
    path = config_path(model)
    try:
        fields = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not a JSON config: {err}") from None
    if not isinstance(fields, dict) or "model_type" not in fields:
        raise ValueError(f"{path} has no 'model_type': not a Hugging Face config.json")
    from transformers import AutoConfig
    from transformers.utils import logging as hf_logging

    fields = dict(fields)
    model_type = fields.pop("model_type")
    for name in _SHAPE_FIELDS:  # before the config class, which may divide by them (0 heads: ZeroDivisionError)
        if fields.get(name) is not None:
            as_positive_int(fields[name], f"{path}: {name}")
    if "torch_dtype" in fields and "dtype" not in fields:  # the published files' name; transformers 5 says dtype
        fields["dtype"] = fields.pop("torch_dtype")
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity(hf_logging.CRITICAL)  # its notices about field values: the refusal below says it once
    try:
        config = AutoConfig.for_model(model_type, **fields)
    except ValueError as err:
        if not isinstance(model_type, str) or model_type not in _known_model_types():
            raise ValueError(f"{path}: transformers does not know model_type {model_type!r} ({err})") from None
        raise ValueError(f"{path}: not a valid {model_type!r} config ({err})") from None
    except Exception as err:  # noqa: BLE001 - the config class validating the file's values (e.g. 0 heads)
        raise ValueError(f"{path}: not a valid {model_type!r} config ({type(err).__name__}: {err})") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:  # a type not modelled: spec_from_hf_config refuses it by its kind
        return config
    needed = _REQUIRED_SHAPE_FIELDS + ((family.intermediate,) if family.intermediate else ())
    mapped = getattr(config, "attribute_map", {})  # e.g. GPT-2's hidden_size is n_embd in its file
    missing = [mapped.get(name, name) for name in needed if name not in fields and mapped.get(name, name) not in fields]
    if missing:  # the config class would fill them with its defaults: another model, silently
        raise ValueError(f"{path}: no {', '.join(map(repr, missing))} field: the model's shape would be "
                         f"{model_type!r}'s default, not this model's")
    return config


def _known_model_types() -> frozenset:
    from transformers import CONFIG_MAPPING

    return frozenset(CONFIG_MAPPING.keys())


def _int(config, name: str, path) -> int:
    value = getattr(config, name, None)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{path}: config field {name!r} must be an integer ≥ 1 for a dense decoder-only "
                         f"model, got {value!r}")
    return value


def spec_from_hf_config(name: str, config, max_seq_len: int | None = None, source: str = "config", *,
                        allow_long_max_seq_len: bool = False) -> ModelSpec:
    """A :class:`ModelSpec` from a transformers config object (module docstring for what is counted).

    Args:
        name: the spec's name (a shipped name or the config's path).
        config: a ``transformers.PretrainedConfig`` of a dense decoder-only model (:data:`FAMILIES`).
        max_seq_len: longest sequence served (tokens); None: the model's own (``max_position_embeddings``,
            RoPE scaling taken into account: :func:`paged.core.max_model_len.derived_max_model_len`).
        source: where the config came from, for error messages.
        allow_long_max_seq_len: accept a ``max_seq_len`` beyond the model's positions (vLLM's
            ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``); the spec's ``model_max_len`` still says the model's own.

    Raises:
        ValueError: naming the field or the model type, for a family that is not counted (an
            encoder-only or encoder-decoder model, a mixture of experts, an unknown ``model_type``:
            :func:`paged.sim.decoder_families.family_of`), a shape field missing or not a positive
            integer, a head count that does not divide, an unknown dtype, or a ``max_seq_len`` that
            is not an integer ≥ 1 or exceeds the model's positions without ``allow_long_max_seq_len``.
    """
    family = family_of(config, source)
    hidden = _int(config, "hidden_size", source)
    layers = _int(config, "num_hidden_layers", source)
    heads = _int(config, "num_attention_heads", source)
    vocab = _int(config, "vocab_size", source)
    def optional(field: str, default: int) -> int:  # a field a config may leave out, checked where it is given
        return default if getattr(config, field, None) is None else _int(config, field, source)

    kv_heads = optional("num_key_value_heads", heads)
    if heads % kv_heads:
        raise ValueError(f"{source}: {heads} attention heads do not split into groups of {kv_heads} KV heads")
    if getattr(config, "head_dim", None) is None and hidden % heads:
        raise ValueError(f"{source}: hidden_size={hidden} does not split into {heads} attention heads")
    head = optional("head_dim", hidden // heads)
    if family.intermediate is None:  # GPT-2 / GPT-J: n_inner, or 4 × hidden when unset
        inter = optional("n_inner", 4 * hidden)
    else:
        inter = _int(config, family.intermediate, source)
    # ``torch_dtype`` only as a plain attribute (a namespace): transformers 5's property of that name warns
    dtype = getattr(config, "dtype", None) or vars(config).get("torch_dtype") or "float16"
    dtype_name = str(dtype).removeprefix("torch.")
    if dtype_name not in _DTYPE_BYTES:
        raise ValueError(f"{source}: dtype {dtype_name!r} is not one of {sorted(_DTYPE_BYTES)}")
    model_max_len, how = derived_max_model_len(config)
    max_seq_len = verify_max_model_len(model_max_len, max_seq_len, allow_long=allow_long_max_seq_len, model=name,
                                       how=how)
    params = count_parameters(config, family, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, head=head,
                              inter=inter, vocab=vocab)
    tied = bool(getattr(config, "tie_word_embeddings", True))
    return ModelSpec(name, layers, hidden, heads, kv_heads, head, inter, vocab, params, _DTYPE_BYTES[dtype_name],
                     max_seq_len, tied, model_max_len)


@functools.lru_cache(maxsize=64)
def _cached(name: str, path: str, mtime_ns: int, max_seq_len: int | None, allow_long: bool) -> ModelSpec:
    return spec_from_hf_config(name, load_config(path), max_seq_len, source=path, allow_long_max_seq_len=allow_long)


def get_config_model(model: str | os.PathLike, max_seq_len: int | None = None, *,
                     allow_long_max_seq_len: bool = False) -> ModelSpec:
    """The :class:`ModelSpec` of a shipped config name (:data:`SHIPPED_CONFIGS`, e.g.
    ``"llama-3.1-8b"``) or of a local ``config.json`` (its path is the spec's name).

    Cost: the first call in a process imports transformers' config classes (~3 s); the result is
    cached per file (and its modification time), ``max_seq_len`` and ``allow_long_max_seq_len``
    (:func:`spec_from_hf_config`).

    Raises:
        ValueError: as :func:`config_path`, :func:`load_config` and :func:`spec_from_hf_config`.
    """
    path = config_path(model)
    name = model.lower() if isinstance(model, str) and model.lower() in SHIPPED_CONFIGS else str(model)
    if max_seq_len is not None and not isinstance(max_seq_len, bool) and isinstance(max_seq_len, numbers.Integral):
        max_seq_len = int(max_seq_len)
    return _cached(name, str(path), path.stat().st_mtime_ns, max_seq_len, bool(allow_long_max_seq_len))
