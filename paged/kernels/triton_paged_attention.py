"""Triton paged-attention decode kernel and its launcher (paper §4.1, §5.1).

One query token per sequence (decode). Keys and values are read straight from the paged KV cache
``[num_blocks, block_size, num_kv_heads, head_size]`` through each sequence's block table: token
``t`` of sequence ``s`` lives in physical block ``block_tables[s, t // block_size]`` at offset
``t % block_size``. Nothing is gathered into a contiguous copy first.

Layout of the work (one Triton program per ``(sequence, KV head[, partition])``):

* **GQA / MQA.** A program owns one KV head and all ``num_heads // num_kv_heads`` query heads
  that read it, so every key and value is loaded once per KV head, not once per query head; the
  group is padded to a power of two ≥ 16 (``tl.dot``'s smallest tile) and masked (groups such as
  5:1 too). A group of **one** (no GQA, e.g. OPT-13B) takes an elementwise path (an fp32 product
  and sum over the head, no padding; :data:`~paged.kernels.launch_config.ELEMENTWISE_MAX_GROUP` says why).
* **Tiles of tokens.** The program walks the context ``TILE`` tokens at a time, looking each
  token's slot up in the block table, so the tile size does not depend on the block size (8 to
  128) and every block is read exactly once. Positions at or past the context length are masked
  in the table *and* the key/value loads: padding entries and a last block's unused tail are never read.
* **Head sizes** 32, 64, 80, 96, 128, 256: the head dimension is padded to a power of two and masked.
* **Online softmax** in fp32 (running max ``m``, running sum ``l``, rescaled accumulator), so the
  scores of a sequence never need to fit in memory at once.
* **Split-K (flash-decoding).** With few sequences and long contexts the grid above has too few
  programs to fill the GPU (:func:`~paged.kernels.launch_config.use_split_k`). Then the context is
  cut into partitions of ``partition_size`` tokens (512 by default), each one more program writing
  its partial ``(m, l, acc)``, merged by :func:`paged_attention_reduce_kernel`.
* **Launch parameters** (tile, warps, stages, group path): the table of :mod:`paged.kernels.launch_config`,
  which :mod:`paged.kernels.compile_check` verifies spill-free for sm_80 and sm_90.

Importing this module needs ``triton``; :data:`INTERPRETED` says how its kernels run on CPU tensors.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from paged.kernels.launch_config import (DEFAULT_PARTITION_SIZE, ELEMENTWISE_MAX_GROUP, REDUCE_CONFIG, LaunchConfig,
                                         decode_config, next_pow2, use_split_k)

__all__ = ["paged_attention_triton", "plan_paged_attention", "KernelLaunch", "use_split_k", "INTERPRETED",
           "DEFAULT_PARTITION_SIZE"]


# Integers that vary from call to call (group size, block-table stride, partition count) are not
# specialised on, so one compiled variant serves every batch of a shape.
@triton.jit(do_not_specialize=["queries_per_kv", "stride_bt_seq", "max_num_partitions"],
            do_not_specialize_on_alignment=["query_ptr", "block_tables_ptr", "context_lens_ptr"])
def paged_attention_decode_kernel(
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
    queries_per_kv,  # num_heads // num_kv_heads (≤ GROUP_PAD)
    max_num_partitions,
    partition_size,  # tokens per partition (split-K only); a runtime value, so the token loop is never unrolled
    GROUP_PAD: tl.constexpr,  # queries_per_kv padded: to a power of two >= 16 for tl.dot, else 1
    HEAD_SIZE: tl.constexpr,
    HEAD_PAD: tl.constexpr,  # HEAD_SIZE padded to a power of two
    BLOCK_SIZE: tl.constexpr,  # tokens per KV block
    TILE: tl.constexpr,  # tokens per loop step (power of two)
    USE_SPLIT_K: tl.constexpr,
    USE_DOT: tl.constexpr,  # tl.dot on the padded group, else an elementwise product and sum
    DOT_PRECISION: tl.constexpr,  # "ieee" for fp32 inputs (no TF32), else "tf32" (ignored)
    DOT_IN_FP32: tl.constexpr,  # upcast K, V, q, p before tl.dot (interpreter + bf16 only)
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    partition = tl.program_id(2)
    context_len = tl.load(context_lens_ptr + seq)
    if USE_SPLIT_K:
        start = partition * partition_size
        end = tl.minimum(start + partition_size, context_len)
    else:
        start = 0
        end = context_len

    group = tl.arange(0, GROUP_PAD)
    dims = tl.arange(0, HEAD_PAD)
    heads = kv_head * queries_per_kv + group  # the query heads served by this KV head
    group_mask = group < queries_per_kv
    dim_mask = dims < HEAD_SIZE

    q = tl.load(
        query_ptr + seq * stride_q_seq + heads[:, None] * stride_q_head + dims[None, :],
        mask=group_mask[:, None] & dim_mask[None, :],
        other=0.0,
    )  # [GROUP_PAD, HEAD_PAD]; padded rows are masked, never read
    if DOT_IN_FP32 or not USE_DOT:
        q = q.to(tl.float32)

    m_i = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)  # running max of the scores
    l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)  # running sum of exp(score - m_i)
    acc = tl.zeros([GROUP_PAD, HEAD_PAD], dtype=tl.float32)  # running sum of exp(...) * v

    tokens = tl.arange(0, TILE)
    block_table_row = block_tables_ptr + seq * stride_bt_seq
    for tile_start in range(0, end - start, TILE):
        pos = start + tile_start + tokens  # token positions in the sequence, [TILE]
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
        if USE_DOT:
            if DOT_IN_FP32:
                k = k.to(tl.float32)
            scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)  # [GROUP_PAD, TILE] fp32
        else:  # [GROUP_PAD, 1, HEAD_PAD] * [1, TILE, HEAD_PAD] summed over the head: fp32 throughout
            scores = tl.sum(q[:, None, :] * k.to(tl.float32)[None, :, :], axis=2)
        scores = tl.where(valid[None, :], scores * scale, float("-inf"))

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
        if USE_DOT:
            if DOT_IN_FP32:
                v = v.to(tl.float32)
            pv = tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        else:
            pv = tl.sum(p[:, :, None] * v.to(tl.float32)[None, :, :], axis=1)
        acc = acc * alpha[:, None] + pv
        m_i = m_new

    out_mask = group_mask[:, None] & dim_mask[None, :]
    if USE_SPLIT_K:
        # Unnormalised partial results; an empty partition stores m=-inf, l=0, acc=0.
        row = (seq * tl.num_programs(1) * queries_per_kv + heads) * max_num_partitions + partition
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


# Split-K's second kernel: merges a sequence's partitions with their log-sum-exp weights, launch_config.REDUCE_CHUNK
# (16) partitions per step, so its registers do not grow with the context.
@triton.jit(do_not_specialize=["max_num_partitions"], do_not_specialize_on_alignment=["context_lens_ptr"])
def paged_attention_reduce_kernel(
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
    CHUNK: tl.constexpr,  # partitions merged per loop step
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    num_partitions = tl.cdiv(tl.load(context_lens_ptr + seq), PARTITION_SIZE)  # each holds ≥ 1 token
    chunk = tl.arange(0, CHUNK)
    dims = tl.arange(0, HEAD_PAD)
    dim_mask = dims < HEAD_SIZE
    base = (seq * tl.num_programs(1) + head) * max_num_partitions
    m_run = tl.full([1], float("-inf"), dtype=tl.float32)  # running max over the partitions so far
    l_run = tl.zeros([1], dtype=tl.float32)
    acc = tl.zeros([HEAD_PAD], dtype=tl.float32)
    for first in range(0, num_partitions, CHUNK):  # online log-sum-exp merge, CHUNK partitions a step
        parts = first + chunk
        part_mask = parts < num_partitions  # partitions past this sequence's context are ignored
        m = tl.load(part_max_ptr + base + parts, mask=part_mask, other=float("-inf"))
        l = tl.load(part_sum_ptr + base + parts, mask=part_mask, other=0.0)
        part = tl.load(
            part_out_ptr + (base + parts)[:, None] * HEAD_SIZE + dims[None, :],
            mask=part_mask[:, None] & dim_mask[None, :],
            other=0.0,
        )  # [CHUNK, HEAD_PAD]
        m_new = tl.maximum(m_run, tl.max(m, axis=0))  # finite: partition 0 holds a token
        alpha = tl.exp(m_run - m_new)
        weight = tl.exp(m - m_new)  # 0 for masked partitions
        l_run = l_run * alpha + tl.sum(l * weight, axis=0)
        acc = acc * alpha + tl.sum(part * weight[:, None], axis=0)
        m_run = m_new
    out = acc / l_run
    tl.store(
        out_ptr + seq * stride_o_seq + head * stride_o_head + dims,
        out.to(out_ptr.dtype.element_ty),
        mask=dim_mask,
    )


#: True when the kernels run in Triton's CPU interpreter. Whether they run compiled (CUDA) or
#: interpreted is decided when this module is imported: ``TRITON_INTERPRET=1`` in the environment
#: before the first import runs them on CPU tensors (slow; for tests).
INTERPRETED = isinstance(paged_attention_decode_kernel, InterpretedFunction)


@functools.lru_cache(maxsize=None)
def _capability(device: torch.device) -> int:
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return 10 * major + minor
    return 80  # the interpreter: pick what an A100 would run


@functools.lru_cache(maxsize=None)
def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 108  # the interpreter has no SMs; use an A100's count so CPU runs pick like a GPU would


@dataclass(frozen=True)
class KernelLaunch:
    """One kernel launch, fully decided: what :meth:`run` launches, and what the compile check compiles.

    Attributes:
        kernel: the ``@triton.jit`` function.
        grid: programs along (sequences, heads, partitions).
        args: the runtime arguments in the kernel's order (tensors, ints, the fp32 scale).
        constexprs: the compile-time arguments by name.
        config: tile, ``num_warps``, ``num_stages`` and the group path (:mod:`paged.kernels.launch_config`).
    """

    kernel: object
    grid: tuple[int, int, int]
    args: tuple
    constexprs: dict
    config: LaunchConfig

    def run(self):
        """Launch (compiling on first use of these constexprs and options, as Triton's JIT does).

        Returns:
            Triton's compiled kernel (on a GPU: with ``n_regs`` and ``n_spills`` as the driver loaded
            it), or None in the interpreter.
        """
        return self.kernel[self.grid](*self.args, **self.constexprs, num_warps=self.config.num_warps,
                                      num_stages=self.config.num_stages)


def _check_alignment(key_cache: torch.Tensor, value_cache: torch.Tensor, query: torch.Tensor) -> None:
    """The compiled variant that the compile check verified assumes 16-byte-aligned K/V and strides
    that are multiples of 16 elements (Triton's JIT specialises on both; without them the default
    tile spills kilobytes per thread). Torch allocations and per-layer views always satisfy this."""
    for name, t in (("key_cache", key_cache), ("value_cache", value_cache)):
        if t.data_ptr() % 16:
            raise ValueError(f"{name} must start at a 16-byte-aligned address for the Triton kernel, got "
                             f"data_ptr() % 16 = {t.data_ptr() % 16}; pass a fresh tensor (.clone())")
    for name, t, dims in (("key_cache", key_cache, 3), ("value_cache", value_cache, 3), ("query", query, 2)):
        strides = t.stride()[:dims]
        if any(s % 16 for s in strides):
            raise ValueError(f"{name} strides {strides} must be multiples of 16 elements for the Triton kernel "
                             f"(head sizes that are multiples of 16, last dimension contiguous)")


def plan_paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    *,
    split_k: bool | None = None,
    partition_size: int = DEFAULT_PARTITION_SIZE,
    config: LaunchConfig | None = None,
    capability: int | None = None,
) -> tuple[torch.Tensor, list[KernelLaunch]]:
    """Decide the launches of one decode-attention call, and allocate its output; launch nothing.

    Same arguments as :func:`paged_attention_triton`, and ``capability`` (``10 * major + minor``;
    default: the query's device's, 80 on the CPU) to pick the launch parameters for. Returns the (uninitialised) output
    ``[num_seqs, num_heads, head_size]`` and the launches that fill it: the decode kernel, then
    the split-K reduce kernel when split-K is on. Allocates the split-K partials
    (``num_seqs × num_heads × partitions × (head_size + 2)`` fp32 values).

    Raises:
        ValueError: K/V not 16-byte aligned, strides not multiples of 16 elements, or a ``config``
            with ``padded_dot=False`` for a query group above :data:`ELEMENTWISE_MAX_GROUP`.
    """
    num_seqs, num_heads, head_size = query.shape
    _, block_size, num_kv_heads, _ = key_cache.shape
    queries_per_kv = num_heads // num_kv_heads
    head_pad = next_pow2(head_size)
    if config is None:
        capability = _capability(query.device) if capability is None else capability
        config = decode_config(head_size, queries_per_kv, query.element_size(), capability)
    if not config.padded_dot and queries_per_kv > ELEMENTWISE_MAX_GROUP:
        raise ValueError(f"the elementwise path serves query groups ≤ {ELEMENTWISE_MAX_GROUP}, got "
                         f"{queries_per_kv} query heads per KV head; use padded_dot=True")
    if split_k is None:
        split_k = use_split_k(num_seqs, num_kv_heads, block_tables.shape[1] * block_size,
                              _num_sms(query.device), partition_size)
    query = query.contiguous()
    block_tables = block_tables.contiguous()
    _check_alignment(key_cache, value_cache, query)
    dot_in_fp32 = INTERPRETED and query.dtype == torch.bfloat16
    out = torch.empty_like(query)
    max_num_partitions = triton.cdiv(block_tables.shape[1] * block_size, partition_size) if split_k else 1
    if split_k:
        part_max = torch.empty(num_seqs, num_heads, max_num_partitions, dtype=torch.float32, device=query.device)
        part_sum = torch.empty_like(part_max)
        part_out = torch.empty(num_seqs, num_heads, max_num_partitions, head_size, dtype=torch.float32,
                               device=query.device)
    else:
        part_max = part_sum = part_out = out  # unused placeholders
    decode = KernelLaunch(
        paged_attention_decode_kernel,
        (num_seqs, num_kv_heads, max_num_partitions),
        (out, part_out, part_max, part_sum,
         query, key_cache, value_cache, block_tables, context_lens,
         scale,
         query.stride(0), query.stride(1),
         key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
         value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
         block_tables.stride(0),
         out.stride(0), out.stride(1),
         queries_per_kv, max_num_partitions, partition_size),
        dict(
            GROUP_PAD=max(16, next_pow2(queries_per_kv)) if config.padded_dot else 1,
            HEAD_SIZE=head_size,
            HEAD_PAD=head_pad,
            BLOCK_SIZE=block_size,
            TILE=config.tile,
            USE_SPLIT_K=split_k,
            USE_DOT=config.padded_dot,
            DOT_PRECISION="ieee" if query.dtype == torch.float32 or dot_in_fp32 else "tf32",
            # Triton 3.9's interpreter computes tl.dot on bf16 inputs wrongly; upcast there only.
            DOT_IN_FP32=dot_in_fp32,
        ),
        config,
    )
    if not split_k:
        return out, [decode]
    reduce = KernelLaunch(
        paged_attention_reduce_kernel,
        (num_seqs, num_heads, 1),
        (out, part_out, part_max, part_sum, context_lens, out.stride(0), out.stride(1), max_num_partitions),
        dict(HEAD_SIZE=head_size, HEAD_PAD=head_pad, PARTITION_SIZE=partition_size, CHUNK=REDUCE_CONFIG.tile),
        REDUCE_CONFIG,
    )
    return out, [decode, reduce]


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
    config: LaunchConfig | None = None,
) -> torch.Tensor:
    """Launch the paged-attention decode kernel(s); no input checks (see ``paged.kernels.attention``).

    Args:
        query: ``[num_seqs, num_heads, head_size]`` fp32/fp16/bf16.
        key_cache, value_cache: ``[num_blocks, block_size, num_kv_heads, head_size]``, query dtype,
            last dimension contiguous, 16-byte aligned, strides multiples of 16 elements.
        block_tables: ``[num_seqs, max_blocks_per_seq]`` int32, last dimension contiguous.
        context_lens: ``[num_seqs]`` int32, each in ``[1, max_blocks_per_seq * block_size]``.
        scale: softmax scale (usually ``head_size ** -0.5``).
        split_k: force the split-K path on (True) or off (False); ``None`` applies
            :func:`use_split_k`.
        partition_size: tokens per split-K partition; a power of two ≥ the tile size.
        config: tile, warps, stages and group path; default
            :func:`paged.kernels.launch_config.decode_config` (the compile-checked table).

    Returns:
        ``[num_seqs, num_heads, head_size]`` in the query's dtype.

    Raises:
        ValueError: see :func:`plan_paged_attention` (alignment, or an elementwise ``config`` for a large group).

    The caller (:func:`paged.kernels.attention.paged_attention`) validates shapes, dtypes and ranges;
    this function trusts them, so that benchmarks time the kernel and not the checks. It reads each
    used key and value once: ``2 × context_len × num_kv_heads × head_size`` elements per sequence,
    plus its used block-table entries (int32).
    """
    out, launches = plan_paged_attention(query, key_cache, value_cache, block_tables, context_lens, scale,
                                         split_k=split_k, partition_size=partition_size, config=config)
    for launch in launches:
        launch.run()
    return out

