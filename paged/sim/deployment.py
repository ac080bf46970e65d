"""A model served on ``tp`` GPUs of one kind: its KV cache memory, or why it does not fit (§6.1).

Table 1's servers give their KV cache memory directly (:data:`paged.sim.cost_model.SERVERS`). For
any other (model, GPU, tensor-parallel degree) it follows the way vLLM sizes its cache: each GPU
may use :data:`GPU_MEMORY_UTILIZATION` of its memory; its share of the weights (``1/tp`` of every
matrix: tensor parallelism, §4.6) comes first, and the rest is KV cache::

    KV cache bytes = tp × (0.9 × memory per GPU − weight bytes / tp)

Activation memory is not subtracted (vLLM profiles it; it is well under a GiB per GPU for these
batch sizes at 2K-token prompts and is left out rather than guessed). On Table 1's own servers the
rule gives 12.1 GiB for OPT-13B on one A100-40GB, 21.6 GiB for OPT-66B on four and 251 GiB for
OPT-175B on eight A100-80GB, against Table 1's 12, 21 and 264 GB.

A deployment is named ``<model>@<tp>x<gpu>:<max_seq_len>``, e.g. ``llama-3.1-8b@2xh100-sxm:8192``
(the model a shipped config name, a Table 1 preset or a ``config.json`` path; the ``tp`` and the
``:max_seq_len`` parts optional: 1 and the model's own). A ``max_seq_len`` beyond the model's
positions is refused (:func:`paged.core.max_model_len.verify_max_model_len`) unless allowed
explicitly; the name of such a deployment ends in ``!`` (``opt-13b@1xa100-80gb:4096!``), so every
result that names the model records the override. That name is the served model's
:attr:`~paged.sim.model_spec.ModelSpec.name`, so every function that takes a model name (the
experiments' ``simulate_point``, ``sustained_rate``, worker processes) serves it on that server.

Refused by name: a tensor-parallel degree that does not divide the query and KV heads (vLLM would
replicate KV heads, not modelled here), and a model whose weights do not fit the GPUs' memory or
whose KV cache cannot hold one sequence of ``max_seq_len`` tokens (:class:`ModelDoesNotFitError`,
naming the bytes).
"""

from __future__ import annotations

import dataclasses
import numbers
import os
import re
from dataclasses import dataclass

from paged.sim.gpu_spec import GPUSpec, get_gpu
from paged.sim.model_config import get_config_model
from paged.sim.model_spec import ModelSpec, get_model, with_max_seq_len

__all__ = ["GPU_MEMORY_UTILIZATION", "LONG_MARK", "Deployment", "ModelDoesNotFitError", "deployment_name",
           "get_model_spec", "get_deployment"]

#: Fraction of each GPU's memory the serving system uses for weights and KV cache. Source: vLLM's
#: ``gpu_memory_utilization`` default (``EngineArgs``, 0.9 since its first releases).
GPU_MEMORY_UTILIZATION = 0.9

_NAME = re.compile(r"^(?:(?P<tp>\d+)x)?(?P<gpu>[a-z0-9][a-z0-9.\-]*?)(?::(?P<max_len>\d+)(?P<long>!)?)?$")
#: The mark of a ``max_seq_len`` beyond the model's positions, allowed explicitly (module docstring).
LONG_MARK = "!"


class ModelDoesNotFitError(ValueError):
    """The model's weights, or one sequence of its maximum length, do not fit the GPUs' memory."""


@dataclass(frozen=True, slots=True)
class Deployment:
    """``model`` served on ``tp`` GPUs ``gpu`` with tensor parallelism.

    Attributes:
        model: the served model; its ``name`` is this deployment's name (module docstring).
        gpu: the GPU.
        tp: GPUs, all used for tensor parallelism (count).
        kv_cache_bytes: KV cache memory of the whole server (bytes; module docstring).
    """

    model: ModelSpec
    gpu: GPUSpec
    tp: int
    kv_cache_bytes: int

    @property
    def server_name(self) -> str:
        """e.g. ``"2xH100 SXM 80GB"``."""
        return f"{self.tp}x{self.gpu.label}"


def get_model_spec(model: str | os.PathLike | ModelSpec, max_seq_len: int | None = None, *,
                   allow_long_max_seq_len: bool = False) -> ModelSpec:
    """A Table 1 preset (``opt-13b`` …), a shipped config name (``llama-3.1-8b`` …) or a
    ``config.json`` path as a :class:`ModelSpec`; ``max_seq_len`` (tokens) replaces its own.

    Args:
        allow_long_max_seq_len: accept a ``max_seq_len`` beyond the model's positions (vLLM's
            ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``).

    Raises:
        ValueError: as :func:`paged.sim.model_config.get_config_model`; for a ``max_seq_len`` that is not
            an integer ≥ 1, or is beyond the model's positions without ``allow_long_max_seq_len``.
    """
    if isinstance(model, ModelSpec):
        spec = model
    else:
        try:
            spec = get_model(model) if isinstance(model, str) else None
        except ValueError:
            spec = None
        if spec is None:
            return get_config_model(model, max_seq_len, allow_long_max_seq_len=allow_long_max_seq_len)
    return with_max_seq_len(spec, max_seq_len, allow_long=allow_long_max_seq_len)


def deployment_name(model: str, gpu: str, tp: int = 1, max_seq_len: int | None = None, *,
                    long: bool = False) -> str:
    """The name of ``model`` on ``tp`` × ``gpu`` (module docstring), e.g. ``llama-3.1-8b@2xh100-sxm:8192``;
    ``long``: ``max_seq_len`` is beyond the model's positions, allowed explicitly (a trailing ``!``)."""
    if max_seq_len is None:
        return f"{model}@{tp}x{gpu}"
    return f"{model}@{tp}x{gpu}:{max_seq_len}{LONG_MARK if long else ''}"


def _parse(text: str) -> tuple[str, str, int | None, int | None, bool]:
    model, _, server = text.rpartition("@")
    match = _NAME.match(server.strip().lower())
    if not model or match is None:
        raise ValueError(f"a deployment is named <model>@<tp>x<gpu>[:<max_seq_len>[!]] (e.g. llama-3.1-8b@2xh100-sxm), "
                         f"got {text!r}")
    tp, max_len = match["tp"], match["max_len"]
    return (model, match["gpu"], None if tp is None else int(tp), None if max_len is None else int(max_len),
            bool(match["long"]))


def get_deployment(model: str | os.PathLike | ModelSpec, gpu: str | None = None, tp: int | None = None,
                   max_seq_len: int | None = None, *, allow_long_max_seq_len: bool = False) -> Deployment | None:
    """The :class:`Deployment` that ``model`` names (``<model>@<tp>x<gpu>[:<max_seq_len>]``) or that
    ``gpu``, ``tp`` and ``max_seq_len`` give it; None for a Table 1 preset named alone (its server
    is Table 1's).

    Args:
        model: a deployment name, a preset or shipped config name, a ``config.json`` path or a spec.
        gpu: a key of :data:`paged.sim.gpu_spec.GPUS` (``a100-40gb``, ``a100-80gb``, ``h100-sxm``,
            ``h200``, ``l4``); required unless ``model`` is a deployment name or a preset.
        tp: tensor-parallel degree (GPUs, default 1).
        max_seq_len: longest sequence served (tokens); default the model's own.
        allow_long_max_seq_len: accept a ``max_seq_len`` beyond the model's positions (the name then
            ends in ``!``; a name ending in ``!`` allows it too).

    Raises:
        ModelDoesNotFitError: naming the bytes, if the weights do not fit or the KV cache left cannot
            hold one ``max_seq_len``-token sequence.
        ValueError: for an unknown GPU or model, a name that gives the GPU, ``tp`` or ``max_seq_len``
            twice and differently, a ``tp`` that is not an integer ≥ 1 or does not divide the query
            and KV heads, a model that is not a preset given without a GPU, or a ``max_seq_len``
            beyond the model's positions not allowed explicitly.
    """
    named_gpu = None
    if isinstance(model, str) and "@" in model:
        name = model
        model, named_gpu, named_tp, named_len, named_long = _parse(model)
        allow_long_max_seq_len = allow_long_max_seq_len or named_long
        for what, given, named in (("gpu", gpu, named_gpu), ("tp", tp, named_tp), ("max_seq_len", max_seq_len, named_len)):
            if given is not None and named is not None and str(given).lower() != str(named):
                raise ValueError(f"{what} given twice: {given!r} and {named!r} in the deployment name {name!r}")
        gpu, tp, max_seq_len = gpu or named_gpu, tp if tp is not None else named_tp, max_seq_len or named_len
    if gpu is None:
        if tp is not None or max_seq_len is not None:
            given = "tp" if tp is not None else "max_seq_len"
            raise ValueError(f"{given} sets up a server of your own: name its gpu too (one of a100-40gb, a100-80gb, "
                             "h100-sxm, h200, l4); without a gpu a Table 1 model runs on the paper's server")
        if not isinstance(model, str):
            raise ValueError("name a gpu for a model outside Table 1's servers (one of a100-40gb, a100-80gb, "
                             "h100-sxm, h200, l4)")
        try:
            get_model(model)
        except ValueError:
            get_model_spec(model)  # an unknown name or a bad file is reported as such
            raise ValueError(f"{model!r} has no Table 1 server: name a gpu (a100-40gb, a100-80gb, h100-sxm, h200, "
                             "l4) and a tensor-parallel degree") from None
        return None
    try:
        gpu_spec = get_gpu(gpu)
    except ValueError as err:  # a GPU named inside a deployment name: say which name
        raise ValueError(f"{err} (in the deployment name {name!r})" if named_gpu else str(err)) from None
    tp = 1 if tp is None else tp
    if isinstance(tp, bool) or not isinstance(tp, numbers.Integral) or tp < 1:
        raise ValueError(f"tp must be an integer ≥ 1 (GPUs), got {tp!r}")
    tp = int(tp)
    spec = get_model_spec(model, max_seq_len, allow_long_max_seq_len=allow_long_max_seq_len)
    base = spec.name
    if spec.num_heads % tp or spec.num_kv_heads % tp:
        raise ValueError(f"tp={tp} does not divide {base}'s {spec.num_heads} query heads and {spec.num_kv_heads} KV "
                         "heads (replicating KV heads across GPUs is not modelled)")
    long = spec.model_max_len is not None and spec.max_seq_len > spec.model_max_len
    name = deployment_name(base, gpu_spec.name, tp, spec.max_seq_len, long=long)
    budget = int(GPU_MEMORY_UTILIZATION * gpu_spec.memory_bytes)
    weights = -(-spec.weight_bytes // tp)
    where = f"{tp}x {gpu_spec.label}"
    if weights >= budget:
        raise ModelDoesNotFitError(
            f"{base} does not fit on {where}: its weights take {spec.weight_bytes:,} bytes ({weights:,} per GPU at "
            f"tp={tp}), more than the {budget:,} bytes a GPU may use ({GPU_MEMORY_UTILIZATION} × "
            f"{gpu_spec.memory_bytes:,}); use more GPUs or a larger one")
    kv_bytes = tp * (budget - weights)
    need = spec.max_seq_len * spec.kv_bytes_per_token
    if kv_bytes < need:
        raise ModelDoesNotFitError(
            f"{base} on {where} leaves {kv_bytes:,} bytes of KV cache, less than one {spec.max_seq_len}-token "
            f"sequence needs ({need:,} bytes = {spec.max_seq_len} × {spec.kv_bytes_per_token:,} bytes per token); "
            "lower max_seq_len or use more GPUs")
    return Deployment(dataclasses.replace(spec, name=name), gpu_spec, tp, kv_bytes)
