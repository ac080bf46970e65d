"""The longest sequence a server serves (vLLM's ``max_model_len``): derived, verified, enforced.

A request is a prompt plus the tokens it generates; its KV cache and its positions grow to
``prompt + output`` tokens. Two limits bound that sum, checked where vLLM checks them:

* **the model's positions** (:func:`derived_max_model_len`, :func:`verify_max_model_len`; vLLM's
  ``ModelConfig._get_and_verify_max_len``): the smallest of the config's length fields
  (``max_position_embeddings``, GPT-2's ``n_positions``, ...), times the RoPE scaling factor for the
  scalings that do not already state the extended length (linear, dynamic NTK, YaRN from its
  ``original_max_position_embeddings``; Llama 3's ``llama3`` and Phi-3's ``longrope`` / ``su``
  configs give the extended length in ``max_position_embeddings`` itself). A server length beyond
  it is refused unless the caller overrides it on purpose (vLLM's ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``);
* **the server's length** (:func:`check_request_len`): a request whose prompt plus output exceeds
  it can never be served, whatever the memory: every system refuses it at admission with the same
  message (vLLM refuses it when the request is added, as its OpenAI server's "maximum context
  length" error does), so a paged server and an Orca one never disagree about what is servable.

Configs are read by attribute (a transformers ``PretrainedConfig`` or any object with the same
names), so nothing here imports transformers.
"""

from __future__ import annotations

from paged.core.kv_cache_manager import RequestTooLargeError

__all__ = ["POSITION_FIELDS", "ALLOW_LONG_HINT", "derived_max_model_len", "verify_max_model_len", "check_request_len"]

#: Config fields that bound a model's sequence length (vLLM's ``possible_keys``); the smallest given wins.
POSITION_FIELDS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                   "max_sequence_length", "max_seq_length", "seq_len")
#: RoPE scalings whose config already states the extended length in ``max_position_embeddings``.
_LENGTH_STATED = ("llama3", "longrope", "su")


def _rope_scaling(config) -> dict | None:
    """The config's RoPE scaling as a dict (``rope_scaling``, or transformers 5's ``rope_parameters``;
    for per-layer-type parameters, Gemma 3's, those of the full-attention layers), or None."""
    scaling = getattr(config, "rope_scaling", None) or getattr(config, "rope_parameters", None)
    if isinstance(scaling, dict) and isinstance(scaling.get("full_attention"), dict):
        scaling = scaling["full_attention"]
    return scaling if isinstance(scaling, dict) else None


def derived_max_model_len(config) -> tuple[int | None, str]:
    """The longest sequence ``config``'s positions allow (tokens), and how it was derived (for messages).

    Returns ``(None, reason)`` when the config has none of :data:`POSITION_FIELDS` (vLLM then
    assumes 2,048 tokens; the callers here ask for an explicit length instead).
    """
    found = [(value, name) for name in POSITION_FIELDS
             if isinstance(value := getattr(config, name, None), int) and not isinstance(value, bool) and value > 0]
    if not found:
        return None, f"no {' / '.join(POSITION_FIELDS[:2])} field"
    length, name = min(found)
    how = f"{name}={length}"
    scaling = _rope_scaling(config)
    if scaling:
        kind = scaling.get("rope_type") or scaling.get("type") or "default"
        factor = scaling.get("factor", 1.0)  # transformers' "default" RoPE has none
        if kind not in _LENGTH_STATED and isinstance(factor, (int, float)) and factor > 0 and factor != 1:
            if kind == "yarn" and isinstance(scaling.get("original_max_position_embeddings"), int):
                length = scaling["original_max_position_embeddings"]
                how = f"original_max_position_embeddings={length}"
            length = int(length * factor)
            how += f" × {kind} RoPE scaling factor {factor:g}"
    return length, how


#: How a caller of the simulator allows a length beyond the model's (the refusal's advice).
ALLOW_LONG_HINT = ("allow it explicitly to simulate it anyway (allow_long_max_seq_len=True; on the command line "
                   "--allow-long-max-seq-len), as vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 does")


def verify_max_model_len(model_max_len: int | None, max_model_len: int | None, *, allow_long: bool = False,
                         model: str = "the model", how: str = "", what: str = "max_seq_len",
                         hint: str = ALLOW_LONG_HINT) -> int:
    """The server's longest sequence: ``max_model_len`` if given, else the model's own.

    Args:
        model_max_len: the longest sequence the model's positions allow (tokens; :func:`derived_max_model_len`).
        max_model_len: the length asked for (tokens), or None for the model's own.
        allow_long: accept a length beyond the model's (vLLM's ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``): the
            model then runs at positions it was not trained for; the caller records that it did.
        model, how, what: the model's name, how its length was derived, the parameter's name (for messages).
        hint: how the caller allows a longer length (the refusal's last words); "" for none.

    Raises:
        ValueError: naming both lengths, for a ``max_model_len`` beyond the model's without ``allow_long``,
            and when neither length is known; also for a ``max_model_len`` that is not an integer ≥ 1.
    """
    if max_model_len is None:
        if model_max_len is None:
            raise ValueError(f"{model} states no maximum sequence length ({how}): give {what}")
        return model_max_len
    if isinstance(max_model_len, bool) or not isinstance(max_model_len, int) or max_model_len < 1:
        raise ValueError(f"{what} must be an integer ≥ 1 (tokens), got {max_model_len!r}")
    if model_max_len is not None and max_model_len > model_max_len and not allow_long:
        raise ValueError(f"{what}={max_model_len} is longer than {model}'s {model_max_len} positions ({how}): it was "
                         f"not trained for longer sequences" + (f"; {hint}" if hint else ""))
    return max_model_len


def check_request_len(request_id, prompt_len: int, output_len: int, max_model_len: int, *,
                      what: str = "max_seq_len") -> None:
    """Refuse a request that can never be served: ``prompt_len + output_len`` tokens (its final length)
    beyond the server's ``max_model_len`` (tokens). The one wording every system and the engine use.

    Raises:
        RequestTooLargeError: naming the request, its lengths and the limit.
    """
    total = prompt_len + output_len
    if total > max_model_len:
        raise RequestTooLargeError(
            f"request {request_id!r} needs {prompt_len} prompt + {output_len} output = {total} tokens, more than "
            f"the server's maximum sequence length {what}={max_model_len}: it can never be served")
