"""A Hugging Face transformers causal LM running on the paged KV cache (paper §4.1, §5).

The model's own code runs unchanged; only its attention function is replaced, the supported way:
:data:`ATTN_IMPLEMENTATION` is registered with ``transformers.AttentionInterface`` and switched on
for the duration of one forward (:meth:`ModelRunner.execute`), so the same model object keeps
working with Hugging Face ``generate`` outside the engine.

All tokens of a step are packed into one row. Per layer, the attention function
(:func:`_paged_attention_forward`) writes the step's keys and values through the slot mapping.
**Prefill** then attends causally over the step's own keys and values or, for a sequence whose first
tokens' KV is already in the cache (a prefix-cache hit, §4.4), over its whole context read through its
block table. **Decode** reads keys and values through the block tables; nothing gathers the whole cache:

* on CUDA, :func:`paged.kernels.attention.paged_attention` runs the Triton kernel;
* on a CPU, the C kernel :func:`paged.kernels.cpu_kernel.paged_attention_cpu`, on one thread, reads
  them through a :class:`~paged.kernels.cpu_kernel.CPUDecodePlan` built once per step from the
  Python block tables and shared by all layers, when it built on this machine and was measured
  faster than the bucketed path on such a CPU (AVX-512 or AVX2;
  :meth:`~paged.kernels.cpu_kernel.CPUKernel.fast`; ``PAGED_CPU_KERNEL=0`` turns it off);
* otherwise :func:`paged.kernels.bucketed.paged_attention_bucketed`: the sequences are sorted into
  length buckets once per step (:func:`paged.kernels.bucketed.plan_buckets`), each bucket's blocks
  gathered into a reused workspace and attended by one fused SDPA call.

How a step passes through the model's code and what it costs outside the model is in
:meth:`ModelRunner.execute`; the CPU paths' measured speeds are in docs/benchmarks.md
(``make bench-cpu-attention``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

from paged.kernels.attention import SUPPORTED_BLOCK_SIZES, SUPPORTED_HEAD_SIZES, paged_attention
from paged.kernels.bucketed import DecodeBuckets, GatherWorkspace, paged_attention_bucketed, plan_buckets
from paged.kernels.cpu_kernel import CPUDecodePlan, CPUKernel, load_kernel, paged_attention_cpu, plan_cpu_decode
from paged.engine.kv_cache import PagedKVCache

__all__ = ["ATTN_IMPLEMENTATION", "StepMetadata", "ModelRunner", "model_kv_shape"]

#: Name under which the paged attention function is registered with transformers.
ATTN_IMPLEMENTATION = "paged_engine"


@dataclass(slots=True)
class StepMetadata:
    """Everything the attention function needs for one step (one forward).

    Attributes:
        kv_cache: the paged KV cache.
        is_prefill: prefill (every token of each sequence) or decode (one token per sequence).
        slot_mapping: ``[num_tokens]`` int64 cache slot of each token (block × block_size + offset),
            checked once per step (:meth:`PagedKVCache.check_slot_list`).
        seq_lens: prefill only: tokens each packed sequence computes in this step, in order (tokens).
        prefill_contexts: prefill only: per sequence, None when it computes all of its tokens, else
            ``(context_len, block_ids)``: the tokens it attends to (cached prefix + new, tokens) and
            ``[ceil(context_len / block_size)]`` int64 physical blocks holding them.
        prefill_runs: prefill only: ``(first_token, num_seqs, tokens_each, context)`` per run of
            consecutive sequences that compute all of their tokens and the same number of them
            (``context`` None; one attention call each), or per sequence with a cached prefix
            (``num_seqs`` 1, ``context`` its ``prefill_contexts`` entry).
        block_tables: CUDA decode only: ``[num_seqs, max_blocks]`` int32 physical block ids.
        context_lens: CUDA decode only: ``[num_seqs]`` int32 tokens each sequence attends to.
        max_context_len: decode only: the largest context length (tokens).
        use_reference: decode through a CPU path (module docstring).
        cpu_plan: CPU decode with the C kernel: the step's block tables and lengths, made once for all layers.
        buckets: CPU decode without it: the step's length buckets, planned once for all layers.
        workspace: CPU decode without it: the runner's reused gather buffers.
    """

    kv_cache: PagedKVCache
    is_prefill: bool
    slot_mapping: torch.Tensor
    seq_lens: list[int] | None = None
    prefill_contexts: list[tuple[int, torch.Tensor] | None] | None = None
    prefill_runs: list[tuple[int, int, int, tuple[int, torch.Tensor] | None]] | None = None
    block_tables: torch.Tensor | None = None
    context_lens: torch.Tensor | None = None
    max_context_len: int = 0
    use_reference: bool = False
    cpu_plan: CPUDecodePlan | None = None
    buckets: DecodeBuckets | None = None
    workspace: GatherWorkspace | None = None


def _paged_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The attention function transformers calls in every layer (registered as ``paged_engine``).

    It writes the step's keys and values through the slot mapping (checked once per step by
    :meth:`PagedKVCache.check_slot_list`, stored by :meth:`PagedKVCache.write_checked`). **Prefill**
    then attends causally: sequences whose every token is computed in this step attend over the
    step's own keys and values (``scaled_dot_product_attention`` with ``is_causal``), neighbours of
    equal length in one call over ``[num_seqs, heads, tokens, head_size]`` views of the packed row; a
    sequence whose first tokens' KV is already in the cache (a prefix-cache hit, blocks a sibling
    computes in the same step, §4.4) computes only its tail, and its queries read the whole context
    (cached prefix and new tokens, written just before) through its block table, with a causal mask
    aligned to the end of the context (:func:`_attend_context`). **Decode** reads keys and values
    through the block tables with the step's backend (module docstring).

    Args:
        module: the layer's attention module (``layer_idx``, ``head_dim``).
        query: ``[1, num_heads, num_tokens, head_size]``; key, value ``[1, num_kv_heads, num_tokens, head_size]``
            (RoPE already applied).
        attention_mask: ignored (``None``: no mask function is registered for this name).
        scaling: softmax scale.
        kwargs: must hold ``paged_step`` (:class:`StepMetadata`).

    Returns:
        ``([1, num_tokens, num_heads, head_size], None)``, the layout transformers expects.

    Raises:
        RuntimeError: if called outside :meth:`ModelRunner.execute` (no ``paged_step``).
    """
    meta: StepMetadata | None = kwargs.get("paged_step")
    if meta is None:
        raise RuntimeError(f"attention implementation {ATTN_IMPLEMENTATION!r} needs paged_step=StepMetadata(...)")
    layer = module.layer_idx
    q = query[0].transpose(0, 1)  # [num_tokens, num_heads, head_size]
    k = key[0].transpose(0, 1)  # [num_tokens, num_kv_heads, head_size]
    v = value[0].transpose(0, 1)
    cache = meta.kv_cache
    cache.write_checked(layer, meta.slot_mapping, k, v)
    if meta.is_prefill:
        outs = []
        gqa = query.shape[1] != key.shape[1]
        for start, count, n, context in meta.prefill_runs:
            end = start + count * n
            if context is None:  # ``count`` sequences of ``n`` tokens: one causal SDPA over [count, heads, n, d] views
                q_run, k_run, v_run = (t[0, :, start:end].unflatten(1, (count, n)).transpose(0, 1)
                                       for t in (query, key, value))
                o = F.scaled_dot_product_attention(q_run, k_run, v_run, is_causal=True, scale=scaling, enable_gqa=gqa)
                outs.append(o.transpose(1, 2).reshape(count * n, *o.shape[1::2]))  # [count * n, num_heads, head_size]
            else:
                o = _attend_context(query[:, :, start:end], cache, layer, context, scaling, gqa)
                outs.append(o[0].transpose(0, 1))  # [n, num_heads, head_size]
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=0)
    elif meta.cpu_plan is not None:
        out = paged_attention_cpu(q, cache.key_caches[layer], cache.value_caches[layer], meta.cpu_plan, scaling)
    elif meta.use_reference:
        out = paged_attention_bucketed(q, cache.key_caches[layer], cache.value_caches[layer], meta.buckets, scaling,
                                       meta.workspace)
    else:
        out = paged_attention(q, cache.key_caches[layer], cache.value_caches[layer], meta.block_tables,
                              meta.context_lens, scale=scaling)
    return out[None], None


def _prefill_runs(seq_lens: list[int], contexts: list | None) -> list[tuple[int, int, int, tuple | None]]:
    """:attr:`StepMetadata.prefill_runs` of a prefill step: equal-length neighbours without a cached prefix merge."""
    runs: list[list] = []
    start = 0
    for i, n in enumerate(seq_lens):
        context = None if contexts is None else contexts[i]
        last = runs[-1] if runs else None
        if context is None and last is not None and last[3] is None and last[2] == n:
            last[1] += 1
        else:
            runs.append([start, 1, n, context])
        start += n
    return [tuple(run) for run in runs]


def _attend_context(query: torch.Tensor, cache: PagedKVCache, layer: int, context: tuple[int, torch.Tensor],
                    scaling: float, gqa: bool) -> torch.Tensor:
    """Prefill attention of a sequence's last ``n`` tokens over its whole context, read from the cache.

    Args:
        query: ``[1, num_heads, n, head_size]``, the queries of positions ``context_len - n ..``.
        context: ``(context_len, block_ids)``: tokens attended to and the ``[num_blocks]`` int64 blocks
            holding them (this step's keys and values were written before).

    Returns:
        ``[1, num_heads, n, head_size]``. Query ``i`` sees keys ``0 .. context_len - n + i`` (causal,
        aligned to the end). Computed in fp32 when the cache holds half precision (no overflow).
    """
    context_len, blocks = context
    n = query.shape[2]
    kv_heads, head_size = cache.num_kv_heads, cache.head_size
    keys = cache.key_caches[layer].index_select(0, blocks).view(-1, kv_heads, head_size)[:context_len]
    values = cache.value_caches[layer].index_select(0, blocks).view(-1, kv_heads, head_size)[:context_len]
    keys, values = keys.transpose(0, 1)[None], values.transpose(0, 1)[None]  # [1, kv_heads, context_len, head_size]
    mask = (torch.arange(context_len, device=query.device)[None, :]
            <= torch.arange(context_len - n, context_len, device=query.device)[:, None])  # [n, context_len]
    dtype = query.dtype
    if dtype in (torch.float16, torch.bfloat16):
        query, keys, values = query.float(), keys.float(), values.float()
    out = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=scaling, enable_gqa=gqa)
    return out.to(dtype)


AttentionInterface.register(ATTN_IMPLEMENTATION, _paged_attention_forward)


def model_kv_shape(config) -> tuple[int, int, int]:
    """``(num_layers, num_kv_heads, head_size)`` of a transformers decoder config."""
    num_heads = config.num_attention_heads
    num_kv_heads = getattr(config, "num_key_value_heads", None) or num_heads
    head_size = getattr(config, "head_dim", None) or config.hidden_size // num_heads
    return config.num_hidden_layers, num_kv_heads, head_size


def _attention_name_setter(config) -> Callable[[str], None]:
    """A function that sets ``config``'s attention implementation name, the cheapest exact way.

    transformers' ``_attn_implementation`` property setter (attribute map, validated assignment,
    a walk over sub-configs) costs about 30 µs a call on this project's CPU, paid twice per step.
    For a config without sub-configs all it stores is ``_attn_implementation_internal``, the
    attribute ``PreTrainedModel.set_attn_implementation`` assigns too; storing that directly costs
    under 1 µs. The shortcut is taken only if this config has no sub-configs and, tried once here,
    the property then reads back what was stored; otherwise the property setter is returned.
    """
    def set_by_property(name: str) -> None:
        config._attn_implementation = name

    def set_internal(name: str) -> None:
        object.__setattr__(config, "_attn_implementation_internal", name)

    if getattr(config, "sub_configs", None) or not hasattr(config, "_attn_implementation_internal"):
        return set_by_property
    previous = config._attn_implementation
    try:
        set_internal(ATTN_IMPLEMENTATION)
        works = config._attn_implementation == ATTN_IMPLEMENTATION
    finally:
        set_by_property(previous)
    return set_internal if works else set_by_property


@contextmanager
def _using_attention(config, set_name: Callable[[str], None], name: str):
    previous = config._attn_implementation
    set_name(name)
    try:
        yield
    finally:
        set_name(previous)


def _fast_cpu_kernel(kv_cache: PagedKVCache) -> CPUKernel | None:
    """The C decode kernel when it built here and was measured faster than the bucketed torch path for
    the cache's dtype and head size on such a CPU (:meth:`~paged.kernels.cpu_kernel.CPUKernel.fast`),
    else None."""
    kernel = load_kernel()
    return kernel if kernel is not None and kernel.fast(kv_cache.dtype, kv_cache.head_size) else None


class ModelRunner:
    """Runs one packed prefill or decode step of a causal LM on a :class:`PagedKVCache` (§4.1).

    Args:
        model: a transformers causal LM whose attention goes through ``AttentionInterface``
            (Llama, Mistral, Qwen2, ... — models written the "functional" way).
        kv_cache: the paged cache; its layers, KV heads and head size must match the model.

    Attributes:
        use_reference: decode through a CPU path (the cache is not on CUDA).
        cpu_kernel: the C decode kernel the CPU decode runs (loaded, and compiled on a machine's first
            use, here), or None when the bucketed torch path runs (module docstring).

    Raises:
        ValueError: cache and model shapes differ, or (on CUDA) a head/block size the Triton kernel
            does not support.
    """

    def __init__(self, model, kv_cache: PagedKVCache) -> None:
        layers, kv_heads, head_size = model_kv_shape(model.config)
        got = (kv_cache.num_layers, kv_cache.num_kv_heads, kv_cache.head_size)
        if got != (layers, kv_heads, head_size):
            raise ValueError(f"KV cache shape (layers, kv heads, head size) {got} != model's {(layers, kv_heads, head_size)}")
        self.model = model
        self.kv_cache = kv_cache
        self.device = kv_cache.device
        if kv_cache.device.type == "cuda" and (
            head_size not in SUPPORTED_HEAD_SIZES or kv_cache.block_size not in SUPPORTED_BLOCK_SIZES
        ):
            raise ValueError(f"head size {head_size} / block size {kv_cache.block_size} not supported by the "
                             f"Triton kernel (head sizes {SUPPORTED_HEAD_SIZES}, block sizes {SUPPORTED_BLOCK_SIZES})")
        self.use_reference = kv_cache.device.type != "cuda"
        self.cpu_kernel = _fast_cpu_kernel(kv_cache) if self.use_reference else None
        self._workspace = GatherWorkspace()
        self._set_attention_name = _attention_name_setter(model.config)

    @torch.inference_mode()
    def execute(self, input_ids: list[int], positions: list[int], slot_mapping: list[int], *, is_prefill: bool,
                seq_lens: list[int] | None = None, block_tables: list[list[int]] | None = None,
                context_lens: list[int] | None = None) -> torch.Tensor:
        """One forward over the packed tokens of a step; logits of each sequence's last token.

        Args:
            input_ids, positions, slot_mapping: one entry per token (``num_tokens``), sequences
                packed one after the other.
            is_prefill: prefill (``seq_lens`` given) or decode (one token per sequence; ``block_tables``
                and ``context_lens`` given, context lengths counting the new token).
            seq_lens: prefill: tokens each sequence computes in this step (tokens).
            block_tables: decode: physical blocks of each sequence. Prefill: the blocks of each
                sequence (``[]`` allowed for one that computes all its tokens), read for sequences
                whose context is longer than what they compute.
            context_lens: decode: tokens each sequence attends to (tokens). Prefill: the same, or None
                when every sequence computes all of its tokens (no cached prefix).

        Returns:
            ``[num_seqs, vocab_size]`` float32 logits.

        How the step meets transformers' model code (checked against the transformers version that
        docs/benchmarks.md names):

        * All tokens are packed into one row: ``input_ids`` ``[1, num_tokens]`` and ``position_ids``
          ``[1, num_tokens]`` (each sequence's own positions, so RoPE is right).
        * Extra keyword arguments of ``model.forward`` flow untouched through the decoder layers into
          the attention function; the step's :class:`StepMetadata` travels as ``paged_step=...``.
        * A custom attention name that is not registered with ``AttentionMaskInterface`` makes
          ``create_causal_mask`` return ``None``: no dense ``[num_tokens, num_tokens]`` mask is built.
          Causality is applied inside the attention function (per sequence).
        * ``logits_to_keep`` (a tensor of row indices) makes the LM head run only on each sequence's
          last token, so a prefill never computes logits for every prompt token.

        Per-step cost outside the model (what a dense Hugging Face decode step does not pay): the
        step's token ids, positions and slots become one ``[3, num_tokens]`` tensor, the slots are
        checked in Python, the CPU plan is built from the Python block tables (no padded table
        tensor), a decode keeps every row's logits (``logits_to_keep=0``, no gather) and the
        attention name is switched by the cheapest exact setter (:func:`_attention_name_setter`).
        """
        dev = self.device
        cache = self.kv_cache
        cache.check_slot_list(slot_mapping)  # in Python, once for every layer's write
        step = torch.tensor([input_ids, positions, slot_mapping], dtype=torch.int64, device=dev)  # one copy for all three
        ids, pos, slots = step[0:1], step[1:2], step[2]
        if is_prefill:
            contexts = None
            if context_lens is not None and any(c != q for c, q in zip(context_lens, seq_lens)):
                contexts = [None if c == q else (c, torch.tensor(t, dtype=torch.int64, device=dev))
                            for c, q, t in zip(context_lens, seq_lens, block_tables)]
            meta = StepMetadata(cache, True, slots, seq_lens=seq_lens, prefill_contexts=contexts,
                                prefill_runs=_prefill_runs(seq_lens, contexts))
            last = torch.tensor(seq_lens, device=dev).cumsum(0) - 1
        else:
            if self.cpu_kernel is not None:  # the plan copies the Python block tables' used entries once
                meta = StepMetadata(cache, False, slots, max_context_len=max(context_lens), use_reference=True,
                                    cpu_plan=plan_cpu_decode(self.cpu_kernel, block_tables, context_lens,
                                                             cache.block_size))
            elif self.use_reference:  # the plan reads the Python block tables; no padded table tensor
                meta = StepMetadata(cache, False, slots, max_context_len=max(context_lens), use_reference=True,
                                    buckets=plan_buckets(block_tables, context_lens, cache.block_size, device=dev),
                                    workspace=self._workspace)
            else:
                width = max(len(t) for t in block_tables)
                table = torch.tensor([t + [0] * (width - len(t)) for t in block_tables], dtype=torch.int32, device=dev)
                lens = torch.tensor(context_lens, dtype=torch.int32, device=dev)
                meta = StepMetadata(cache, False, slots, block_tables=table, context_lens=lens,
                                    max_context_len=max(context_lens))
            last = 0  # every token is its sequence's last: logits of all rows, no gather
        with _using_attention(self.model.config, self._set_attention_name, ATTN_IMPLEMENTATION):
            out = self.model(input_ids=ids, position_ids=pos, use_cache=False, logits_to_keep=last, paged_step=meta)
        return out.logits[0].float()
