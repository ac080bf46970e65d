"""Torch references for paged attention: the kernel's oracle and the contiguous baseline (§4.1, §7.1).

* :func:`gather_kv` copies each sequence's keys and values out of the paged cache into a padded
  contiguous ``[num_seqs, max_context_len, num_kv_heads, head_size]`` tensor by following its
  block table; slots past a sequence's context are zeroed (never used, whatever the cache holds
  there: NaN in the tests).
* :func:`paged_attention_reference` is the oracle the Triton kernel is tested against: gather,
  then attention in fp32 with a plain (not online) softmax; GQA by ``repeat_interleave``.
* :func:`contiguous_attention` is the FasterTransformer-like baseline of Fig. 18a: the same
  attention over a contiguous padded cache with ``torch.nn.functional.scaled_dot_product_attention``.
  :func:`paged_attention_torch` (gather + the same SDPA) is the paged path that differs from the
  baseline only by the block-table gather; on CPU it is what the Fig. 18a notebook times.

None of these check their inputs; :func:`paged.kernels.attention.paged_attention` does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["gather_kv", "paged_attention_reference", "contiguous_attention", "paged_attention_torch"]


def _length_mask(context_lens: torch.Tensor, max_len: int) -> torch.Tensor:
    """``[num_seqs, max_len]`` bool: True where position < context length."""
    positions = torch.arange(max_len, device=context_lens.device)
    return positions[None, :] < context_lens.to(torch.int64)[:, None]


def gather_kv(
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    max_context_len: int | None = None,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Follow the block tables: paged cache → padded contiguous K and V (§4.1).

    One row gather per cache (every block of every sequence at once), then the slots past each
    context length are zeroed in place; when every sequence fills ``max_context_len`` nothing is
    zeroed (this check copies one scalar to the host).

    Args:
        key_cache, value_cache: ``[num_blocks, block_size, num_kv_heads, head_size]``.
        block_tables: ``[num_seqs, max_blocks_per_seq]`` integer; entries past a sequence's
            ``ceil(context_len / block_size)`` blocks are padding and may hold any value.
        context_lens: ``[num_seqs]`` integer (tokens).
        max_context_len: length of the padded output (tokens); default
            ``max_blocks_per_seq * block_size``. Must cover every context length.
        out: optional preallocated ``(key, value)`` workspace, each
            ``[num_seqs, ceil(max_context_len / block_size) * block_size, num_kv_heads, head_size]``
            contiguous in the cache dtype (saves allocating ~2 × the K/V bytes on every call).

    Returns:
        ``(key, value)``, each ``[num_seqs, max_context_len, num_kv_heads, head_size]`` in the
        cache dtype (views of ``out`` when given), zero past each context length.
    """
    num_blocks, block_size, num_kv_heads, head_size = key_cache.shape
    num_seqs, max_blocks = block_tables.shape
    if max_context_len is None:
        max_context_len = max_blocks * block_size
    used_blocks = -(-max_context_len // block_size)
    padded_len = used_blocks * block_size
    lens = context_lens.to(torch.int64)
    table = block_tables[:, :used_blocks].to(torch.int64)
    # Padding entries may be out of range: point them at block 0; what they fetch is zeroed below.
    table = torch.where(_length_mask((lens + block_size - 1) // block_size, used_blocks), table, 0)
    if out is None:
        shape = (num_seqs, padded_len, num_kv_heads, head_size)
        out = (key_cache.new_empty(shape), value_cache.new_empty(shape))
    for cache, buf in zip((key_cache, value_cache), out):
        # Each row is one whole block (block_size × num_kv_heads × head_size elements).
        # aten's index with out= gathers into the workspace without a temporary (index_select
        # with out= is much slower on CPU in torch 2.13).
        torch.ops.aten.index.Tensor_out(cache.reshape(num_blocks, -1), [table.reshape(-1)],
                                        out=buf.view(num_seqs * used_blocks, -1))
        if num_seqs and int(lens.min()) < padded_len:
            buf.masked_fill_(~_length_mask(lens, padded_len)[:, :, None, None], 0)
    return out[0][:, :max_context_len], out[1][:, :max_context_len]


def paged_attention_reference(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Decode attention through block tables, computed in fp32 with a plain softmax (§4.1).

    Args:
        query: ``[num_seqs, num_heads, head_size]``.
        key_cache, value_cache: ``[num_blocks, block_size, num_kv_heads, head_size]``.
        block_tables: ``[num_seqs, max_blocks_per_seq]`` integer.
        context_lens: ``[num_seqs]`` integer, each ≥ 1 (tokens).
        scale: softmax scale.

    Returns:
        ``[num_seqs, num_heads, head_size]`` in the query's dtype.
    """
    num_heads = query.shape[1]
    num_kv_heads = key_cache.shape[2]
    key, value = gather_kv(key_cache, value_cache, block_tables, context_lens)
    group = num_heads // num_kv_heads
    key = key.float().repeat_interleave(group, dim=2)  # [num_seqs, max_len, num_heads, head_size]
    value = value.float().repeat_interleave(group, dim=2)
    scores = torch.einsum("shd,slhd->shl", query.float(), key) * scale
    mask = _length_mask(context_lens, key.shape[1])[:, None, :]
    probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return torch.einsum("shl,slhd->shd", probs, value).to(query.dtype)


def contiguous_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    context_lens: torch.Tensor | None,
    scale: float,
) -> torch.Tensor:
    """Decode attention over a contiguous padded KV cache (the Fig. 18a baseline).

    Args:
        query: ``[num_seqs, num_heads, head_size]``.
        key, value: ``[num_seqs, max_len, num_kv_heads, head_size]``, the query dtype.
        context_lens: ``[num_seqs]`` integer (tokens), or ``None`` when every sequence fills
            ``max_len`` (no mask: the fastest SDPA kernels apply).
        scale: softmax scale.

    Returns:
        ``[num_seqs, num_heads, head_size]`` in the query's dtype (SDPA's own precision: fp32
        accumulation inside its kernels).
    """
    num_heads = query.shape[1]
    num_kv_heads = key.shape[2]
    mask = None
    if context_lens is not None:
        mask = _length_mask(context_lens, key.shape[1])[:, None, None, :]
    out = F.scaled_dot_product_attention(
        query[:, :, None, :],  # [num_seqs, num_heads, 1, head_size]
        key.transpose(1, 2),  # [num_seqs, num_kv_heads, max_len, head_size] (a strided view)
        value.transpose(1, 2),
        attn_mask=mask,
        scale=scale,
        enable_gqa=num_heads != num_kv_heads,
    )
    return out[:, :, 0, :]


def paged_attention_torch(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    max_context_len: int | None = None,
    workspace: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Paged attention in torch: :func:`gather_kv` then :func:`contiguous_attention`.

    Differs from the contiguous baseline only by the block-table gather, so the ratio of the two
    is the cost of paging in a torch implementation. Shapes as in :func:`paged_attention_reference`;
    ``max_context_len`` (tokens) trims the gather (default: the table's capacity); ``workspace``
    is :func:`gather_kv`'s ``out``. No length mask is built when every sequence fills
    ``max_context_len`` (one scalar copied to the host decides).
    """
    key, value = gather_kv(key_cache, value_cache, block_tables, context_lens, max_context_len, workspace)
    full = int(context_lens.min()) == key.shape[1] if context_lens.numel() else True
    return contiguous_attention(query, key, value, None if full else context_lens, scale)
