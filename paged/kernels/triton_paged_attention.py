"""Triton paged-attention decode kernel and its launcher (paper §4.1, §5.1).

One query token per sequence (decode). Keys and values are read straight from the paged KV cache
``[num_blocks, block_size, num_kv_heads, head_size]`` through each sequence's block table: token
``t`` of sequence ``s`` lives in physical block ``block_tables[s, t // block_size]`` at offset
``t % block_size``. Nothing is gathered into a contiguous copy first.

Layout of the work (one Triton program per ``(sequence, KV head[, partition])``):

* **GQA / MQA.** A program owns one KV head and all ``num_heads // num_kv_heads`` query heads
  that read it, so every key and value is loaded once per KV head, not once per query head. The
  group of query heads is padded to a power of two ≥ 16 (``tl.dot``'s smallest tile) and masked,
  which also covers groups such as 5:1.
* **Tiles of tokens.** The program walks the context ``TILE`` tokens at a time. Each token's
  physical slot is looked up in the block table, so the tile size does not depend on the block
  size (8 to 128) and every block is read exactly once. Positions at or past the context length
  are masked in the block-table load *and* in the key/value loads: padding entries of the table
  and the unused tail of the last block are never read.
* **Head sizes** 64, 80, 96, 128, 256: the head dimension is padded to a power of two and masked.
* **Online softmax** in fp32 (running max ``m``, running sum ``l``, rescaled accumulator), so the
  scores of a sequence never need to fit in memory at once.
* **Split-K (flash-decoding).** With few sequences and long contexts the grid above has too few
  programs to fill the GPU. Then the context is cut into partitions of ``partition_size`` tokens
  (512 by default), each partition is one more program writing its partial ``(m, l, acc)``, and a
  second kernel merges the partitions with their log-sum-exp weights. See :func:`use_split_k`.

Importing this module needs ``triton``. Whether the kernels run compiled (CUDA) or in Triton's
interpreter is decided when this module is imported: set ``TRITON_INTERPRET=1`` in the
environment before the first import to run them on CPU tensors (slow; for tests).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

__all__ = ["paged_attention_triton", "use_split_k", "INTERPRETED", "DEFAULT_PARTITION_SIZE"]

#: Tokens per split-K partition (a multiple of every tile size used below).
DEFAULT_PARTITION_SIZE = 512


@triton.jit
def _paged_attention_decode_kernel(
    out_ptr,  # [num_seqs, num_heads, head_size], query dtype; written by the single-pass path
    part_out_ptr,  # [num_seqs, num_heads, max_num_partitions, head_size] fp32, split-K only
    part_max_ptr,  # [num_seqs, num_heads, max_num_partitions] fp32 (running max m), split-K only
    part_sum_ptr,  # [num_seqs, num_heads, max_num_partitions] fp32 (sum of exp l), split-K only
    query_ptr,  # [num_seqs, num_heads, head_size], last dim contiguous
    key_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_size], last dim contiguous
    value_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_size], last dim contiguous
    block_tables_ptr,  # [num_seqs, max_blocks_per_seq] int32, last dim contiguous
    context_lens_ptr,  # [num_seqs] int32
    scale,  # fp32 softmax scale
    stride_q_seq, stride_q_head,
    stride_k_block, stride_k_slot, stride_k_head,
    stride_v_block, stride_v_slot, stride_v_head,
    stride_bt_seq,
    stride_o_seq, stride_o_head,
    max_num_partitions,
    QUERIES_PER_KV: tl.constexpr,  # num_heads // num_kv_heads
    GROUP_PAD: tl.constexpr,  # QUERIES_PER_KV padded to a power of two >= 16
    HEAD_SIZE: tl.constexpr,
    HEAD_PAD: tl.constexpr,  # HEAD_SIZE padded to a power of two
    BLOCK_SIZE: tl.constexpr,  # tokens per KV block
    TILE: tl.constexpr,  # tokens per loop step (power of two >= 16)
    PARTITION_SIZE: tl.constexpr,  # tokens per partition (split-K only)
    USE_SPLIT_K: tl.constexpr,
    DOT_PRECISION: tl.constexpr,  # "ieee" for fp32 inputs (no TF32), else "tf32" (ignored)
    DOT_IN_FP32: tl.constexpr,  # upcast K, V, q, p before tl.dot (interpreter + bf16 only)
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    partition = tl.program_id(2)
    context_len = tl.load(context_lens_ptr + seq)
    if USE_SPLIT_K:
        start = partition * PARTITION_SIZE
        end = tl.minimum(start + PARTITION_SIZE, context_len)
    else:
        start = 0
        end = context_len

    group = tl.arange(0, GROUP_PAD)
    dims = tl.arange(0, HEAD_PAD)
    heads = kv_head * QUERIES_PER_KV + group  # the query heads served by this KV head
    group_mask = group < QUERIES_PER_KV
    dim_mask = dims < HEAD_SIZE

    q = tl.load(
        query_ptr + seq * stride_q_seq + heads[:, None] * stride_q_head + dims[None, :],
        mask=group_mask[:, None] & dim_mask[None, :],
        other=0.0,
    )  # [GROUP_PAD, HEAD_PAD]
    if DOT_IN_FP32:
        q = q.to(tl.float32)

    m_i = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)  # running max of the scores
    l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)  # running sum of exp(score - m_i)
    acc = tl.zeros([GROUP_PAD, HEAD_PAD], dtype=tl.float32)  # running sum of exp(...) * v

    tokens = tl.arange(0, TILE)
    block_table_row = block_tables_ptr + seq * stride_bt_seq
    for tile_start in range(start, end, TILE):
        pos = tile_start + tokens  # token positions in the sequence, [TILE]
        valid = pos < end
        # Physical block of each token; table entries past the context are never loaded.
        block = tl.load(block_table_row + pos // BLOCK_SIZE, mask=valid, other=0).to(tl.int64)
        offset = pos % BLOCK_SIZE
        kv_mask = valid[:, None] & dim_mask[None, :]
        k = tl.load(
            key_cache_ptr + block[:, None] * stride_k_block + offset[:, None] * stride_k_slot
            + kv_head * stride_k_head + dims[None, :],
            mask=kv_mask,
            other=0.0,
        )  # [TILE, HEAD_PAD]
        if DOT_IN_FP32:
            k = k.to(tl.float32)
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale  # [GROUP_PAD, TILE] fp32
        scores = tl.where(valid[None, :], scores, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        alpha = tl.exp(m_i - m_new)  # rescales what was summed under the old max
        p = tl.exp(scores - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(
            value_cache_ptr + block[:, None] * stride_v_block + offset[:, None] * stride_v_slot
            + kv_head * stride_v_head + dims[None, :],
            mask=kv_mask,
            other=0.0,
        )  # [TILE, HEAD_PAD]
        if DOT_IN_FP32:
            v = v.to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    out_mask = group_mask[:, None] & dim_mask[None, :]
    if USE_SPLIT_K:
        # Unnormalised partial results; an empty partition stores m=-inf, l=0, acc=0.
        row = (seq * tl.num_programs(1) * QUERIES_PER_KV + heads) * max_num_partitions + partition
        tl.store(part_max_ptr + row, m_i, mask=group_mask)
        tl.store(part_sum_ptr + row, l_i, mask=group_mask)
        tl.store(part_out_ptr + row[:, None] * HEAD_SIZE + dims[None, :], acc, mask=out_mask)
    else:
        out = acc / l_i[:, None]
        tl.store(
            out_ptr + seq * stride_o_seq + heads[:, None] * stride_o_head + dims[None, :],
            out.to(out_ptr.dtype.element_ty),
            mask=out_mask,
        )


@triton.jit
def _paged_attention_reduce_kernel(
    out_ptr,  # [num_seqs, num_heads, head_size], query dtype
    part_out_ptr,  # [num_seqs, num_heads, max_num_partitions, head_size] fp32
    part_max_ptr,  # [num_seqs, num_heads, max_num_partitions] fp32
    part_sum_ptr,  # [num_seqs, num_heads, max_num_partitions] fp32
    context_lens_ptr,  # [num_seqs] int32
    stride_o_seq, stride_o_head,
    max_num_partitions,
    HEAD_SIZE: tl.constexpr,
    HEAD_PAD: tl.constexpr,
    PARTITION_SIZE: tl.constexpr,
    PARTITIONS_PAD: tl.constexpr,  # max_num_partitions padded to a power of two
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    num_partitions = tl.cdiv(tl.load(context_lens_ptr + seq), PARTITION_SIZE)
    parts = tl.arange(0, PARTITIONS_PAD)
    dims = tl.arange(0, HEAD_PAD)
    part_mask = parts < num_partitions  # partitions past this sequence's context are ignored
    row = (seq * tl.num_programs(1) + head) * max_num_partitions + parts
    m = tl.load(part_max_ptr + row, mask=part_mask, other=float("-inf"))
    l = tl.load(part_sum_ptr + row, mask=part_mask, other=0.0)
    acc = tl.load(
        part_out_ptr + row[:, None] * HEAD_SIZE + dims[None, :],
        mask=part_mask[:, None] & (dims < HEAD_SIZE)[None, :],
        other=0.0,
    )  # [PARTITIONS_PAD, HEAD_PAD]
    weight = tl.exp(m - tl.max(m, axis=0))  # 0 for masked partitions
    out = tl.sum(acc * weight[:, None], axis=0) / tl.sum(l * weight, axis=0)
    tl.store(
        out_ptr + seq * stride_o_seq + head * stride_o_head + dims,
        out.to(out_ptr.dtype.element_ty),
        mask=dims < HEAD_SIZE,
    )


#: True when the kernels run in Triton's CPU interpreter (TRITON_INTERPRET=1 at import time).
INTERPRETED = isinstance(_paged_attention_decode_kernel, InterpretedFunction)


def use_split_k(num_seqs: int, num_kv_heads: int, max_context_len: int, num_sms: int,
                partition_size: int = DEFAULT_PARTITION_SIZE) -> bool:
    """The rule that picks the split-K (flash-decoding) path.

    Split-K is used when a sequence can span more than one partition
    (``max_context_len > partition_size``) **and** the single-pass grid of
    ``num_seqs * num_kv_heads`` programs is smaller than the number of streaming multiprocessors
    (``num_sms``), i.e. the single pass would leave SMs idle while a few programs walk long
    contexts. Otherwise one pass is cheaper: it skips the partial-result round trip through memory
    and the reduce launch.

    Args:
        num_seqs: sequences in the batch.
        num_kv_heads: KV heads (one program per KV head and sequence).
        max_context_len: an upper bound of the context lengths (tokens); the launcher passes
            ``max_blocks_per_seq * block_size`` so that choosing needs no device→host copy.
        num_sms: streaming multiprocessors of the device (e.g. 132 on an H100/H200, 108 on an A100).
        partition_size: tokens per partition.
    """
    return max_context_len > partition_size and num_seqs * num_kv_heads < num_sms


def _next_pow2(n: int) -> int:
    return 1 << (max(n, 1) - 1).bit_length()


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 108  # the interpreter has no SMs; use an A100's count so CPU runs pick like a GPU would


def paged_attention_triton(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    *,
    split_k: bool | None = None,
    partition_size: int = DEFAULT_PARTITION_SIZE,
    tile: int | None = None,
) -> torch.Tensor:
    """Launch the paged-attention decode kernel(s); no input checks (see ``paged.kernels.attention``).

    Args:
        query: ``[num_seqs, num_heads, head_size]`` fp32/fp16/bf16.
        key_cache, value_cache: ``[num_blocks, block_size, num_kv_heads, head_size]``, query dtype,
            last dimension contiguous.
        block_tables: ``[num_seqs, max_blocks_per_seq]`` int32, last dimension contiguous.
        context_lens: ``[num_seqs]`` int32, each in ``[1, max_blocks_per_seq * block_size]``.
        scale: softmax scale (usually ``head_size ** -0.5``).
        split_k: force the split-K path on (True) or off (False); ``None`` applies
            :func:`use_split_k`.
        partition_size: tokens per split-K partition; a power of two ≥ the tile size.
        tile: tokens per loop step (power of two ≥ 16); default 64 for head sizes ≤ 128, else 32.

    Returns:
        ``[num_seqs, num_heads, head_size]`` in the query's dtype.

    The caller (:func:`paged.kernels.attention.paged_attention`) validates shapes, dtypes and ranges;
    this function trusts them, so that benchmarks time the kernel and not the checks.
    """
    num_seqs, num_heads, head_size = query.shape
    _, block_size, num_kv_heads, _ = key_cache.shape
    queries_per_kv = num_heads // num_kv_heads
    head_pad = _next_pow2(head_size)
    if tile is None:
        tile = 64 if head_pad <= 128 else 32
    if split_k is None:
        split_k = use_split_k(num_seqs, num_kv_heads, block_tables.shape[1] * block_size,
                              _num_sms(query.device), partition_size)
    dot_in_fp32 = INTERPRETED and query.dtype == torch.bfloat16
    query = query.contiguous()
    block_tables = block_tables.contiguous()
    out = torch.empty_like(query)
    max_num_partitions = triton.cdiv(block_tables.shape[1] * block_size, partition_size) if split_k else 1
    if split_k:
        part_max = torch.empty(num_seqs, num_heads, max_num_partitions, dtype=torch.float32, device=query.device)
        part_sum = torch.empty_like(part_max)
        part_out = torch.empty(num_seqs, num_heads, max_num_partitions, head_size, dtype=torch.float32,
                               device=query.device)
    else:
        part_max = part_sum = part_out = out  # unused placeholders
    _paged_attention_decode_kernel[(num_seqs, num_kv_heads, max_num_partitions)](
        out, part_out, part_max, part_sum,
        query, key_cache, value_cache, block_tables, context_lens,
        scale,
        query.stride(0), query.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
        block_tables.stride(0),
        out.stride(0), out.stride(1),
        max_num_partitions,
        QUERIES_PER_KV=queries_per_kv,
        GROUP_PAD=max(16, _next_pow2(queries_per_kv)),
        HEAD_SIZE=head_size,
        HEAD_PAD=head_pad,
        BLOCK_SIZE=block_size,
        TILE=tile,
        PARTITION_SIZE=partition_size,
        USE_SPLIT_K=split_k,
        DOT_PRECISION="ieee" if query.dtype == torch.float32 or dot_in_fp32 else "tf32",
        # Triton 3.9's interpreter computes tl.dot on bf16 inputs wrongly; upcast there only.
        DOT_IN_FP32=dot_in_fp32,
    )
    if split_k:
        _paged_attention_reduce_kernel[(num_seqs, num_heads)](
            out, part_out, part_max, part_sum, context_lens,
            out.stride(0), out.stride(1),
            max_num_partitions,
            HEAD_SIZE=head_size,
            HEAD_PAD=head_pad,
            PARTITION_SIZE=partition_size,
            PARTITIONS_PAD=_next_pow2(max_num_partitions),
        )
    return out
