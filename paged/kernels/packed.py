"""Padding-free paged decode attention in torch, a CPU decode path (paper §4.1).

:func:`paged_attention_torch` gathers every sequence into a ``[num_seqs, max_context_len, ...]``
buffer padded to the *longest* context, so on a batch of ShareGPT requests (one long context, many
short ones) most of the bytes it copies, masks and reads are padding. This path instead works on
the blocks the sequences really hold, all sequences at once:

* :func:`pack_block_tables` flattens the block tables once per step (shared by every layer): the
  ``num_used`` physical blocks, sequence after sequence, each block's sequence index, and which of
  its slots hold a token (only a sequence's last block can be partly empty).
* :func:`paged_attention_packed` gathers those blocks' keys and values (one ``index_select`` per
  cache), scores each block against the query of its own sequence (GQA by a view: the query heads
  of one KV head form a group, nothing is repeated), takes a softmax over each sequence's blocks
  (per-sequence max by ``scatter_reduce``, sums and the weighted values by ``index_add_``) and
  divides once at the end.

Memory traffic is proportional to the tokens held (rounded up to whole blocks), not to
``num_seqs × max_context_len``. Empty slots of a last block are zeroed in the gathered keys and
values and get a −inf score, so whatever the cache holds there (NaN in the tests) never reaches
the output. Inputs are not checked (as in :mod:`paged.kernels.reference`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["PackedBlocks", "pack_block_tables", "paged_attention_packed"]


@dataclass(slots=True)
class PackedBlocks:
    """The blocks a decode step reads, flattened (built once per step by :func:`pack_block_tables`).

    Attributes:
        num_seqs: sequences in the step.
        block_ids: ``[num_used]`` int64 physical block ids, each sequence's in logical order,
            sequences in batch order.
        block_seq: ``[num_used]`` int64 the sequence (batch row) each block belongs to.
        empty_slots: ``[num_empty]`` int64 indices, into the ``num_used × block_size`` gathered
            slots, of those past their sequence's context length (only in last blocks).
        score_bias: ``[num_used, 1, 1, block_size]`` float32, 0 for a slot holding a token and
            −inf for an empty one (added to the scores).
    """

    num_seqs: int
    block_ids: torch.Tensor
    block_seq: torch.Tensor
    empty_slots: torch.Tensor
    score_bias: torch.Tensor


def pack_block_tables(block_tables: torch.Tensor, context_lens: torch.Tensor, block_size: int) -> PackedBlocks:
    """Flatten block tables to the blocks the contexts use (§4.1); entries past them are ignored.

    Args:
        block_tables: ``[num_seqs, max_blocks_per_seq]`` integer; entries past a sequence's
            ``ceil(context_len / block_size)`` blocks are padding and may hold any value.
        context_lens: ``[num_seqs]`` integer, each ≥ 1 (tokens).
        block_size: tokens per block.

    Returns:
        :class:`PackedBlocks` on the tables' device.
    """
    device = block_tables.device
    num_seqs, width = block_tables.shape
    lens = context_lens.to(device=device, dtype=torch.int64)
    num_blocks = (lens + block_size - 1) // block_size  # [num_seqs]
    column = torch.arange(width, device=device)
    used = column[None, :] < num_blocks[:, None]  # [num_seqs, width]
    block_ids = block_tables.to(torch.int64)[used]
    block_seq = torch.arange(num_seqs, device=device).repeat_interleave(num_blocks)
    first_slot = column.expand(num_seqs, width)[used] * block_size  # [num_used] logical slot of each slot 0
    held = lens.index_select(0, block_seq) - first_slot  # tokens each block holds (≥ 1)
    empty = torch.arange(block_size, device=device)[None, :] >= held[:, None]  # [num_used, block_size]
    score_bias = torch.zeros(empty.shape, device=device).masked_fill_(empty, float("-inf"))
    empty_slots = empty.view(-1).nonzero()[:, 0]
    return PackedBlocks(num_seqs, block_ids, block_seq, empty_slots, score_bias[:, None, None, :])


def paged_attention_packed(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                           packed: PackedBlocks, scale: float) -> torch.Tensor:
    """Decode attention over the used blocks only, no padding to the longest context (§4.1).

    The queries are scaled before the dot product, and for half-precision inputs (fp16, bf16) the
    gathered keys and values, the scores and the softmax are fp32, so large scores cannot overflow
    fp16's 65504 (the output is cast back); fp32 inputs are computed in fp32. A softmax over each
    sequence's blocks: ``exp(score - max)`` per block, per-sequence sums with ``index_add_``, one
    division at the end.

    Args:
        query: ``[num_seqs, num_heads, head_size]``.
        key_cache, value_cache: ``[num_blocks, block_size, num_kv_heads, head_size]``, the query's dtype.
        packed: the step's :class:`PackedBlocks` (``num_seqs`` rows, each with ≥ 1 token).
        scale: softmax scale.

    Returns:
        ``[num_seqs, num_heads, head_size]`` in the query's dtype.
    """
    num_seqs, num_heads, head_size = query.shape
    num_kv_heads = key_cache.shape[2]
    group = num_heads // num_kv_heads
    ids, seq = packed.block_ids, packed.block_seq
    dtype = query.dtype
    keys = key_cache.index_select(0, ids)  # [num_used, block_size, num_kv_heads, head_size]
    values = value_cache.index_select(0, ids)
    if dtype in (torch.float16, torch.bfloat16):  # accumulate in fp32
        keys, values, query = keys.float(), values.float(), query.float()
    for gathered in (keys, values):  # whatever empty slots hold (NaN in the tests) must not reach the output
        gathered.view(-1, num_kv_heads, head_size).index_fill_(0, packed.empty_slots, 0)
    q = (query * scale).view(num_seqs, num_kv_heads, group, head_size).index_select(0, seq)  # [num_used, kv, group, d]
    # One batched product per KV head on strided views (a 4-d matmul would copy keys and values).
    scores = torch.stack([torch.bmm(q[:, h], keys[:, :, h].transpose(1, 2)) for h in range(num_kv_heads)], dim=1)
    scores.add_(packed.score_bias)  # [num_used, kv, group, block_size]
    block_max = scores.amax(dim=-1)  # [num_used, kv, group]
    seq_max = block_max.new_full((num_seqs, num_kv_heads, group), float("-inf"))
    seq_max.scatter_reduce_(0, seq[:, None, None].expand_as(block_max), block_max, "amax")
    probs = scores.sub_(seq_max.index_select(0, seq)[..., None]).exp_()
    denom = block_max.new_zeros(num_seqs, num_kv_heads, group).index_add_(0, seq, probs.sum(dim=-1))
    partial = torch.stack([torch.bmm(probs[:, h], values[:, :, h]) for h in range(num_kv_heads)], dim=1)
    out = partial.new_zeros(num_seqs, num_kv_heads, group, head_size).index_add_(0, seq, partial)
    return out.div_(denom[..., None]).view(num_seqs, num_heads, head_size).to(dtype)
