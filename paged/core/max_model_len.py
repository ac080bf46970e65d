"""The longest sequence a server serves (vLLM's ``max_model_len``): derived, verified, enforced.

A request's KV cache and positions grow to ``prompt + output`` tokens. Two limits bound that sum, checked
where vLLM checks them:

* **the model's positions** (:func:`derived_max_model_len`, :func:`verify_max_model_len`; vLLM's
  ``ModelConfig._get_and_verify_max_len``): the config's smallest length field times its RoPE scaling
  factor. A server length beyond it is refused unless the caller allows it (vLLM's ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``);
* **the server's length** (:func:`check_request_len`): a request whose prompt plus output exceeds it can
  never be served, whatever the memory. Every system refuses it at admission with the same message (vLLM
  when the request is added), so paged and Orca servers agree on what is servable.

Configs are read by attribute (a transformers ``PretrainedConfig`` or any object with the same names), so
nothing here imports transformers.
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
    """The config's ``rope_scaling`` or ``rope_parameters`` dict (Gemma 3's: its full-attention entry), or None."""
    scaling = getattr(config, "rope_scaling", None) or getattr(config, "rope_parameters", None)
    if isinstance(scaling, dict) and isinstance(scaling.get("full_attention"), dict):
        scaling = scaling["full_attention"]
    return scaling if isinstance(scaling, dict) else None


def derived_max_model_len(config) -> tuple[int | None, str]:
    """The longest sequence ``config``'s positions allow (tokens), and how it was derived (for messages).

    The smallest of :data:`POSITION_FIELDS`, times the RoPE scaling factor (YaRN's applied to its
    ``original_max_position_embeddings``) unless the config already states the extended length (Llama 3's
    ``llama3``, Phi-3's ``longrope`` / ``su``). ``(None, reason)`` without any such field (vLLM then assumes
    2,048 tokens; callers here ask for an explicit length).
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
    """The server's longest sequence (tokens): ``max_model_len`` if given, else ``model_max_len``, the model's
    (:func:`derived_max_model_len`). ``allow_long`` accepts a length beyond the model's, at positions it was not
    trained for (the caller records it). ``model``, ``how``, ``what`` and ``hint`` (how to allow a longer
    length; "" for none) word the messages.

    Raises:
        ValueError: for a ``max_model_len`` beyond the model's without ``allow_long`` (naming both), for no
            known length, and for a ``max_model_len`` that is not an integer ≥ 1.
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
    """Raise RequestTooLargeError (naming the request, its lengths and the limit) if a request's final length,
    ``prompt_len + output_len`` tokens, exceeds the server's ``max_model_len`` (tokens); one wording for all."""
    total = prompt_len + output_len
    if total > max_model_len:
        raise RequestTooLargeError(
            f"request {request_id!r} needs {prompt_len} prompt + {output_len} output = {total} tokens, more than "
            f"the server's maximum sequence length {what}={max_model_len}: it can never be served")
