"""``paged_attention``: one decode-attention call over the paged KV cache (paper §4.1, §5.1).

Checks its inputs, then runs the Triton kernel (:mod:`paged.kernels.triton_paged_attention`) on CUDA
tensors or the torch reference (:mod:`paged.kernels.reference`) elsewhere. The checks copy the
context lengths and the used block-table entries to the host once per call; benchmarks that time
the kernel alone call :func:`paged.kernels.triton_paged_attention.paged_attention_triton` directly.
"""

from __future__ import annotations

import math

import torch

from paged.kernels.reference import paged_attention_reference

__all__ = ["paged_attention", "SUPPORTED_HEAD_SIZES", "SUPPORTED_BLOCK_SIZES", "SUPPORTED_DTYPES"]

#: Head sizes the Triton kernel is tested with (non-powers of two are padded and masked). The
#: reference backend takes any head size.
SUPPORTED_HEAD_SIZES = (32, 64, 80, 96, 128, 256)
#: Tokens per KV block the Triton kernel takes; the reference backend takes any block size.
SUPPORTED_BLOCK_SIZES = (8, 16, 32, 64, 128)
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_BACKENDS = ("auto", "triton", "reference")


def _check_inputs(query, key_cache, value_cache, block_tables, context_lens, backend: str) -> None:
    for name, t in (("query", query), ("key_cache", key_cache), ("value_cache", value_cache),
                    ("block_tables", block_tables), ("context_lens", context_lens)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if query.dim() != 3:
        raise ValueError(f"query must be [num_seqs, num_heads, head_size], got shape {tuple(query.shape)}")
    if key_cache.dim() != 4:
        raise ValueError("key_cache must be [num_blocks, block_size, num_kv_heads, head_size], "
                         f"got shape {tuple(key_cache.shape)}")
    if value_cache.shape != key_cache.shape:
        raise ValueError(f"value_cache shape {tuple(value_cache.shape)} != key_cache shape {tuple(key_cache.shape)}")
    if query.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"query dtype {query.dtype} not supported; use one of {SUPPORTED_DTYPES}")
    if key_cache.dtype != query.dtype or value_cache.dtype != query.dtype:
        raise TypeError(f"cache dtypes ({key_cache.dtype}, {value_cache.dtype}) must equal the query dtype {query.dtype}")
    if block_tables.dtype != torch.int32 or context_lens.dtype != torch.int32:
        raise TypeError(f"block_tables and context_lens must be int32, got {block_tables.dtype} and {context_lens.dtype}")
    devices = {t.device for t in (query, key_cache, value_cache, block_tables, context_lens)}
    if len(devices) != 1:
        raise ValueError(f"all inputs must be on one device, got {sorted(map(str, devices))}")

    num_seqs, num_heads, head_size = query.shape
    num_blocks, block_size, num_kv_heads, cache_head_size = key_cache.shape
    if cache_head_size != head_size:
        raise ValueError(f"query head_size {head_size} != cache head_size {cache_head_size}")
    if backend == "triton" and head_size not in SUPPORTED_HEAD_SIZES:
        raise ValueError(f"head_size {head_size} not supported by the Triton kernel; use one of "
                         f"{SUPPORTED_HEAD_SIZES} or backend='reference'")
    if backend == "triton" and block_size not in SUPPORTED_BLOCK_SIZES:
        raise ValueError(f"block_size {block_size} not supported by the Triton kernel; use one of "
                         f"{SUPPORTED_BLOCK_SIZES} or backend='reference'")
    if num_kv_heads < 1 or num_heads % num_kv_heads:
        raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
    if key_cache.stride(-1) != 1 or value_cache.stride(-1) != 1:
        raise ValueError("key_cache and value_cache must have a contiguous last (head_size) dimension")
    if block_tables.dim() != 2 or block_tables.shape[0] != num_seqs:
        raise ValueError(f"block_tables must be [num_seqs={num_seqs}, max_blocks_per_seq], got {tuple(block_tables.shape)}")
    if context_lens.shape != (num_seqs,):
        raise ValueError(f"context_lens must be [num_seqs={num_seqs}], got {tuple(context_lens.shape)}")
    if num_seqs == 0:
        return

    capacity = block_tables.shape[1] * block_size
    lens = context_lens.cpu()
    if int(lens.min()) < 1:
        raise ValueError(f"every context length must be ≥ 1, got min {int(lens.min())}")
    if int(lens.max()) > capacity:
        raise ValueError(f"context length {int(lens.max())} exceeds the block table's capacity "
                         f"({block_tables.shape[1]} blocks × {block_size} tokens = {capacity})")
    used = torch.arange(block_tables.shape[1])[None, :] < ((lens + block_size - 1) // block_size)[:, None]
    entries = block_tables.cpu()[used]
    if entries.numel() and (int(entries.min()) < 0 or int(entries.max()) >= num_blocks):
        raise ValueError(f"block table entries in use must be in [0, {num_blocks}), "
                         f"got range [{int(entries.min())}, {int(entries.max())}]")


def paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float | None = None,
    backend: str = "auto",
    *,
    split_k: bool | None = None,
) -> torch.Tensor:
    """Decode attention of one query token per sequence over the paged KV cache (§4.1).

    Args:
        query: ``[num_seqs, num_heads, head_size]``, fp32 / fp16 / bf16.
        key_cache, value_cache: ``[num_blocks, block_size, num_kv_heads, head_size]``, the query's
            dtype, last dimension contiguous.
        block_tables: ``[num_seqs, max_blocks_per_seq]`` int32 physical block ids; entries past a
            sequence's ``ceil(context_len / block_size)`` blocks are padding and never read.
        context_lens: ``[num_seqs]`` int32 tokens, each in ``[1, max_blocks_per_seq * block_size]``.
        scale: softmax scale; default ``1 / sqrt(head_size)``.
        backend: ``"auto"`` (Triton on CUDA tensors, the reference otherwise), ``"triton"`` (on
            CPU tensors only in Triton's interpreter: ``TRITON_INTERPRET=1``), or ``"reference"``.
        split_k: Triton only: force the split-K path on/off; ``None`` applies
            :func:`paged.kernels.launch_config.use_split_k`.

    Returns:
        ``[num_seqs, num_heads, head_size]`` in the query's dtype.

    Raises:
        TypeError: wrong tensor types or dtypes (block tables and lengths must be int32).
        ValueError: inconsistent shapes, ``num_heads`` not a multiple of ``num_kv_heads``, an
            unsupported head size (:data:`SUPPORTED_HEAD_SIZES`) or block size
            (:data:`SUPPORTED_BLOCK_SIZES`), a context length < 1 or past the table's capacity, a
            used block-table entry outside the cache, a bad ``scale`` or ``backend``.
        RuntimeError: ``backend="triton"`` on CPU tensors without ``TRITON_INTERPRET=1``.
        ImportError: ``backend="triton"`` without the ``triton`` package.
    """
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}, got {backend!r}")
    if backend == "auto":
        backend = "triton" if getattr(query, "is_cuda", False) else "reference"  # a non-tensor fails the checks
    _check_inputs(query, key_cache, value_cache, block_tables, context_lens, backend)
    head_size = query.shape[2]
    if scale is None:
        scale = 1.0 / math.sqrt(head_size)
    elif not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    if query.shape[0] == 0:
        return torch.empty_like(query)
    if backend == "reference":
        return paged_attention_reference(query, key_cache, value_cache, block_tables, context_lens, float(scale))

    try:
        from paged.kernels import triton_paged_attention as kernel  # imports triton
    except ModuleNotFoundError as err:
        if err.name != "triton":
            raise
        raise ImportError("backend='triton' needs the triton package (installed with paged on Linux only; "
                          "pip install 'triton>=3.9,<3.10'), or use backend='reference'") from None

    if not query.is_cuda and not kernel.INTERPRETED:
        raise RuntimeError(
            "backend='triton' on CPU tensors needs Triton's interpreter: start Python with "
            "TRITON_INTERPRET=1 in the environment (it is read when paged.kernels.triton_paged_attention "
            "is first imported), or use backend='reference'"
        )
    return kernel.paged_attention_triton(query, key_cache, value_cache, block_tables, context_lens,
                                         float(scale), split_k=split_k)
