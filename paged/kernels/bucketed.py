"""Decode attention by length buckets: gathered blocks and one SDPA call per bucket, the engine's CPU path (§4.1).

On a CPU the fastest attention over ``[batch, kv_heads, tokens, head_size]`` keys and values is
PyTorch's fused ``scaled_dot_product_attention``; a paged cache does not have that layout, so this
path copies the blocks a step reads into it and calls SDPA on as few, as little padded, batches as
it can:

* :func:`plan_buckets` (once per step, shared by every layer) sorts the sequences by context
  length and cuts them into buckets: a sequence joins the current bucket while it is at most
  ``max_padding`` tokens shorter than the bucket's longest, so uniform lengths make one bucket and
  ShareGPT-like mixed lengths a few. It flattens the buckets' block tables into one list of block
  ids (a shorter sequence's table is padded with its own first block), and lists the gathered slots
  that hold no token of their sequence (the tail of a last block, the padding blocks) and the
  ``[rows, 1, 1, tokens]`` mask of each bucket whose lengths differ.
* :func:`paged_attention_bucketed` gathers those blocks of the layer's key and value caches with
  one ``index_select`` each (into a reused :class:`GatherWorkspace`, which saves allocating and
  page-faulting the copy every call), zeroes the listed slots (so whatever the cache holds there,
  NaN in the tests, never reaches the output), and runs SDPA per bucket on strided views of the
  copy. GQA costs nothing: the ``group`` query heads of one KV head become ``group`` query rows of
  that head (``[rows, kv_heads, group, head_size]``; a decode query attends to every key, so the
  rows are independent), which is also ~2× faster than ``enable_gqa`` on fp32 here.

Cost per layer: the gather copies every used block once (the paging tax over a contiguous cache;
a dense ``DynamicCache`` pays a comparable copy when it appends a token), plus 2–3 small ops per
bucket. ``make bench-cpu-attention`` prints this path against contiguous SDPA over a grid. Two
gather-free alternatives ran slower on this project's 2-core CPU (torch 2.13, one thread, fp32, the
shipped model's heads): FlexAttention compiled with a block mask over the physical blocks (the
whole cache as one key sequence) took 5 s to compile and 8× the time of contiguous SDPA at 8
sequences of 128 tokens, and its CPU template failed to compile for 64 sequences of 2,048; SDPA
with each physical block as a batch row on views of the cache, partial results combined by their
log-sum-exp, took 2.5-3.2× contiguous SDPA (a 4-query × 16-key problem per block and head is
mostly overhead). Half precision: SDPA's CPU kernel accumulates fp16 / bf16 scores, softmax and output in
fp32. Inputs are not checked (as in :mod:`paged.kernels.reference`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["DEFAULT_MAX_CHUNK_SLOTS", "DEFAULT_MAX_PADDING", "DecodeBuckets", "DecodeChunk", "GatherWorkspace", "plan_buckets", "paged_attention_bucketed"]

#: Tokens a sequence may be padded by to join a longer sequence's bucket. One more SDPA call (with
#: its query gather and output scatter) costs about as much as attending to 500-800 more tokens
#: per row for the shipped model (head size 32, 8 / 2 heads) on one core, measured by
#: ``python -m paged.bench.kernel``'s bucketed rows; 256 keeps the padding well under that.
DEFAULT_MAX_PADDING = 256
#: Token slots one SDPA call gathers at most (per cache: 4 MiB of fp32 keys for the shipped model's
#: 2 KV heads × 32 channels), so a chunk is still in the core's caches when SDPA reads it. One gather
#: of every block of 64 or 128 sequences of 2,048 tokens made the call 1.6× (fp32) to 2.0× (bf16)
#: contiguous SDPA's time, chunks of 16,384 slots 0.9-1.05× and 1.4× (medians of 3 interleaved
#: rounds, one core, load 1.1-1.6; 4,096 slots was slower on short contexts).
DEFAULT_MAX_CHUNK_SLOTS = 16384


@dataclass(slots=True)
class DecodeChunk:
    """One SDPA call of a decode step: rows of one length bucket whose gathered blocks fit the cap.

    Attributes:
        block_ids: ``[num_rows * width]`` int64 physical blocks to gather (row-major).
        empty_slots: ``[num_empty]`` int64 indices into the ``num_rows * width * block_size``
            gathered slots of those holding no token of their row (zeroed after the gather), or None.
        num_rows, width: rows (sequences) and blocks per row.
        max_len: the longest context of the rows (tokens); the SDPA reads that many slots per row.
        rows: ``[num_rows]`` int64 batch rows, or None when the chunk is the whole batch in order.
        mask: ``[num_rows, 1, 1, max_len]`` bool (True: attend), or None when every row has
            ``max_len`` tokens.
    """

    block_ids: torch.Tensor
    empty_slots: torch.Tensor | None
    num_rows: int
    width: int
    max_len: int
    rows: torch.Tensor | None
    mask: torch.Tensor | None


@dataclass(slots=True)
class DecodeBuckets:
    """The decode step's SDPA calls (built once per step by :func:`plan_buckets`, shared by all layers).

    Attributes:
        num_seqs: sequences in the step.
        chunks: the :class:`DecodeChunk` of each SDPA call.
        max_chunk_blocks: the most blocks one chunk gathers (the workspace size, blocks).
    """

    num_seqs: int
    chunks: list[DecodeChunk]
    max_chunk_blocks: int


def plan_buckets(block_tables: torch.Tensor, context_lens: list[int], block_size: int, *,
                 max_padding: int = DEFAULT_MAX_PADDING, max_chunk_slots: int = DEFAULT_MAX_CHUNK_SLOTS) -> DecodeBuckets:
    """Sort the step's sequences by context length and cut them into buckets and chunks (module docstring).

    Args:
        block_tables: ``[num_seqs, max_blocks_per_seq]`` integer physical block ids on the cache's
            device; entries past a sequence's ``ceil(context_len / block_size)`` blocks are padding
            and may hold any value (they are replaced by the sequence's first block).
        context_lens: per sequence the tokens it attends to (each ≥ 1, at most the table's capacity).
        block_size: tokens per block.
        max_padding: the most tokens a sequence is padded by in its bucket (≥ 0; 0: one bucket per
            distinct length).
        max_chunk_slots: the most token slots one chunk gathers (a row longer than that is a chunk
            of its own).

    Returns:
        :class:`DecodeBuckets`. Cost: a sort of ``num_seqs`` lengths in Python and a few small
        tensor ops per chunk.
    """
    num_seqs = len(context_lens)
    device = block_tables.device
    table = block_tables.to(torch.int64)
    order = sorted(range(num_seqs), key=context_lens.__getitem__, reverse=True)
    chunks = []
    most = 0
    i = 0
    while i < num_seqs:
        longest = context_lens[order[i]]
        width = -(-longest // block_size)
        cap = i + max(1, max_chunk_slots // (width * block_size))
        j = i + 1
        while j < num_seqs and j < cap and longest - context_lens[order[j]] <= max_padding:
            j += 1
        rows = order[i:j]
        whole = i == 0 and j == num_seqs and rows == list(range(num_seqs))
        row_t = None if whole else torch.tensor(rows, dtype=torch.int64, device=device)
        ids = (table if row_t is None else table.index_select(0, row_t))[:, :width]
        mask = empty = None
        shortest = context_lens[order[j - 1]]
        if -(-shortest // block_size) < width or shortest < longest:
            lens = torch.tensor([context_lens[r] for r in rows], device=device)
            column = torch.arange(width, device=device)[None, :]
            ids = torch.where(column < ((lens + block_size - 1) // block_size)[:, None], ids, ids[:, :1])
            if shortest < longest:
                held = torch.arange(longest, device=device)[None, :] < lens[:, None]  # [rows, longest]
                mask = held[:, None, None, :]
                row, slot = (~held).nonzero(as_tuple=True)
                empty = row * (width * block_size) + slot
        ids = ids.reshape(-1)
        chunks.append(DecodeChunk(ids, empty, len(rows), width, longest, row_t, mask))
        most = max(most, ids.numel())
        i = j
    return DecodeBuckets(num_seqs, chunks, most)


class GatherWorkspace:
    """Reused buffers for the gathered keys and values (grown on demand, never shrunk).

    A fresh multi-megabyte tensor every layer costs its page faults (at 128 sequences of 1,024
    tokens the gather took 5× longer into a new tensor than into a reused one, fp32, here).
    """

    __slots__ = ("_key", "_value")

    def __init__(self) -> None:
        self._key = self._value = torch.empty(0)

    def get(self, num_blocks: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Two ``[num_blocks, *like.shape[1:]]`` tensors of ``like``'s dtype and device (contents undefined)."""
        shape = (num_blocks, *like.shape[1:])
        need = like[:1].numel() * num_blocks
        if self._key.numel() < need or self._key.dtype != like.dtype or self._key.device != like.device:
            self._key = torch.empty(need, dtype=like.dtype, device=like.device)
            self._value = torch.empty(need, dtype=like.dtype, device=like.device)
        return self._key[:need].view(shape), self._value[:need].view(shape)


def paged_attention_bucketed(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                             plan: DecodeBuckets, scale: float,
                             workspace: GatherWorkspace | None = None) -> torch.Tensor:
    """Decode attention through the block tables, one SDPA call per length bucket (§4.1).

    Args:
        query: ``[num_seqs, num_heads, head_size]``.
        key_cache, value_cache: ``[num_blocks, block_size, num_kv_heads, head_size]``, the query's dtype.
        plan: the step's :class:`DecodeBuckets`.
        scale: softmax scale.
        workspace: buffers to gather into (a new copy each call when None).

    Returns:
        ``[num_seqs, num_heads, head_size]`` in the query's dtype.
    """
    num_seqs, num_heads, head_size = query.shape
    if num_seqs == 0:
        return torch.empty_like(query)
    _, block_size, num_kv_heads, _ = key_cache.shape
    group = num_heads // num_kv_heads
    if workspace is not None:
        key_buffer, value_buffer = workspace.get(plan.max_chunk_blocks, key_cache)
    out = None
    for chunk in plan.chunks:
        ids, num_rows, width, max_len, rows = chunk.block_ids, chunk.num_rows, chunk.width, chunk.max_len, chunk.rows
        if workspace is None:
            keys, values = key_cache.index_select(0, ids), value_cache.index_select(0, ids)
        else:
            keys, values = key_buffer[:ids.numel()], value_buffer[:ids.numel()]
            torch.index_select(key_cache, 0, ids, out=keys)
            torch.index_select(value_cache, 0, ids, out=values)
        if chunk.empty_slots is not None:
            for gathered in (keys, values):
                gathered.view(-1, num_kv_heads, head_size).index_fill_(0, chunk.empty_slots, 0)
        shape = (num_rows, width * block_size, num_kv_heads, head_size)
        k = keys.view(shape)[:, :max_len].transpose(1, 2)  # [rows, kv, max_len, d]
        v = values.view(shape)[:, :max_len].transpose(1, 2)
        q = query if rows is None else query.index_select(0, rows)
        o = F.scaled_dot_product_attention(q.view(num_rows, num_kv_heads, group, head_size), k, v,
                                           attn_mask=chunk.mask, scale=scale)  # [rows, kv, group, d]
        o = o.view(num_rows, num_heads, head_size)
        if rows is None:
            return o
        if out is None:
            out = query.new_empty(query.shape)
        out.index_copy_(0, rows, o)
    return out
