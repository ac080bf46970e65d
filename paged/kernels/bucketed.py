"""Decode attention by length buckets: gathered blocks and one SDPA call per bucket, a CPU decode path (§4.1).

The engine runs it on a CPU where the C kernel (:mod:`paged.kernels.cpu_kernel`, which reads the
blocks in place) did not build or has no AVX-512 instance for the shape, or when
``PAGED_CPU_KERNEL=0``. On a CPU the fastest attention over keys and values laid out
``[batch, kv_heads, tokens, head_size]`` is PyTorch's fused ``scaled_dot_product_attention``; a
paged cache does not have that layout, so this path copies the blocks a step reads into it and
calls SDPA on as few, as little padded, batches as it can:

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
  rows are independent).

Cost per layer: the gather copies every used block once (the paging tax over a contiguous cache;
a dense ``DynamicCache`` pays a comparable copy when it appends a token), plus 2–3 small ops per
bucket, so this path stays above contiguous SDPA's time (``make bench-cpu-attention``;
docs/benchmarks.md has the figures and the gather-free torch alternatives measured slower).
"""

from __future__ import annotations

from collections.abc import Sequence
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


def plan_buckets(block_tables: torch.Tensor | Sequence[Sequence[int]], context_lens: list[int], block_size: int, *,
                 max_padding: int = DEFAULT_MAX_PADDING, max_chunk_slots: int = DEFAULT_MAX_CHUNK_SLOTS,
                 device: torch.device | str | None = None) -> DecodeBuckets:
    """Sort the step's sequences by context length and cut them into buckets and chunks (module docstring).

    Args:
        block_tables: the physical block ids of each sequence: a ``[num_seqs, max_blocks_per_seq]``
            integer tensor on the cache's device, or one list of ints per sequence (the engine's
            block tables as they are; no padded table tensor is built). Entries past a sequence's
            ``ceil(context_len / block_size)`` blocks are padding and may hold any value (they are
            replaced by the sequence's first block); a list may stop at its last used block.
        context_lens: per sequence the tokens it attends to (each ≥ 1, at most the table's capacity).
        block_size: tokens per block.
        max_padding: the most tokens a sequence is padded by in its bucket (≥ 0; 0: one bucket per
            distinct length).
        max_chunk_slots: the most token slots one chunk gathers (a row longer than that is a chunk
            of its own).
        device: where the plan's tensors go when ``block_tables`` are lists (default: the CPU); a
            tensor's own device otherwise.

    Returns:
        :class:`DecodeBuckets`, the same for a tensor and for lists of the same blocks. Cost: a sort
        of ``num_seqs`` lengths in Python and a few small tensor ops per chunk (from lists: one
        tensor per chunk for uniform lengths, the block ids copied once in Python).
    """
    num_seqs = len(context_lens)
    from_lists = not isinstance(block_tables, torch.Tensor)
    if from_lists:
        device = torch.device("cpu" if device is None else device)
        table = None
    else:
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
        shortest = context_lens[order[j - 1]]
        if from_lists:
            flat: list[int] = []
            for r in rows:
                blocks = block_tables[r]
                used = -(-context_lens[r] // block_size)
                flat += blocks[:used]
                if used < width:
                    flat += [blocks[0]] * (width - used)
            ids = torch.tensor(flat, dtype=torch.int64, device=device)
        else:
            ids = (table if row_t is None else table.index_select(0, row_t))[:, :width]
            if -(-shortest // block_size) < width:
                lens = torch.tensor([context_lens[r] for r in rows], device=device)
                column = torch.arange(width, device=device)[None, :]
                ids = torch.where(column < ((lens + block_size - 1) // block_size)[:, None], ids, ids[:, :1])
            ids = ids.reshape(-1)
        mask = empty = None
        if shortest < longest:
            lens = torch.tensor([context_lens[r] for r in rows], device=device)
            held = torch.arange(longest, device=device)[None, :] < lens[:, None]  # [rows, longest]
            mask = held[:, None, None, :]
            row, slot = (~held).nonzero(as_tuple=True)
            empty = row * (width * block_size) + slot
        chunks.append(DecodeChunk(ids, empty, len(rows), width, longest, row_t, mask))
        most = max(most, ids.numel())
        i = j
    return DecodeBuckets(num_seqs, chunks, most)


class GatherWorkspace:
    """Reused buffers for the gathered keys and values (grown on demand, never shrunk).

    A fresh multi-megabyte tensor every layer costs its page faults (at 128 sequences of 1,024
    tokens the gather took 5× longer into a new tensor than into a reused one, fp32, here).
    The views every layer of a step takes of them are made once per plan (:meth:`chunk_views`).
    """

    __slots__ = ("_key", "_value", "_plan", "_signature", "_views")

    def __init__(self) -> None:
        self._key = self._value = torch.empty(0)
        self._plan = self._signature = self._views = None

    def get(self, num_blocks: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Two ``[num_blocks, *like.shape[1:]]`` tensors of ``like``'s dtype and device (contents undefined)."""
        shape = (num_blocks, *like.shape[1:])
        need = like[:1].numel() * num_blocks
        if self._key.numel() < need or self._key.dtype != like.dtype or self._key.device != like.device:
            self._key = torch.empty(need, dtype=like.dtype, device=like.device)
            self._value = torch.empty(need, dtype=like.dtype, device=like.device)
        return self._key[:need].view(shape), self._value[:need].view(shape)

    def chunk_views(self, plan: DecodeBuckets, like: torch.Tensor) -> list[tuple[torch.Tensor, ...]]:
        """Per chunk of ``plan``, :func:`_chunk_views` of these buffers (``like``: a cache of the layer).

        Every layer of a step asks for the same views, so they are made on the first call for a
        plan and a cache shape, dtype and device, and returned as they are after that: O(1) per
        later call (the plan is held until the next one replaces it).
        """
        signature = (like.shape, like.dtype, like.device)
        if plan is self._plan and signature == self._signature:
            return self._views
        key_buffer, value_buffer = self.get(plan.max_chunk_blocks, like)
        views = []
        for chunk in plan.chunks:
            num = chunk.block_ids.numel()
            views.append(_chunk_views(key_buffer[:num], value_buffer[:num], chunk))
        self._plan, self._signature, self._views = plan, signature, views
        return views


def _chunk_views(keys: torch.Tensor, values: torch.Tensor, chunk: DecodeChunk) -> tuple[torch.Tensor, ...]:
    """``(keys, values, flat_keys, flat_values, k, v)`` of a chunk's gathered blocks.

    ``keys``, ``values``: ``[num_rows * width, block_size, kv_heads, head_size]``, the gather's
    output; ``flat_*``: the same as ``[slots, kv_heads, head_size]`` (to zero the empty slots);
    ``k``, ``v``: ``[num_rows, kv_heads, max_len, head_size]`` strided views, what SDPA reads.
    """
    _, block_size, num_kv_heads, head_size = keys.shape
    shape = (chunk.num_rows, chunk.width * block_size, num_kv_heads, head_size)
    flat = (-1, num_kv_heads, head_size)
    return (keys, values, keys.view(flat), values.view(flat),
            keys.view(shape)[:, :chunk.max_len].transpose(1, 2), values.view(shape)[:, :chunk.max_len].transpose(1, 2))


def paged_attention_bucketed(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                             plan: DecodeBuckets, scale: float,
                             workspace: GatherWorkspace | None = None) -> torch.Tensor:
    """Decode attention through the block tables, one SDPA call per length bucket (§4.1).

    Args:
        query: ``[num_seqs, num_heads, head_size]``.
        key_cache, value_cache: ``[num_blocks, block_size, num_kv_heads, head_size]``, the query's dtype.
        plan: the step's :class:`DecodeBuckets`.
        scale: softmax scale.
        workspace: buffers to gather into, their views made once per plan (a new copy each call when None).

    Returns:
        ``[num_seqs, num_heads, head_size]`` in the query's dtype. Half precision: SDPA's CPU kernel
        accumulates fp16 / bf16 scores, softmax and output in fp32. Inputs are not checked (as in
        :mod:`paged.kernels.reference`).
    """
    num_seqs, num_heads, head_size = query.shape
    if num_seqs == 0:
        return torch.empty_like(query)
    num_kv_heads = key_cache.shape[2]
    group = num_heads // num_kv_heads
    views = None if workspace is None else workspace.chunk_views(plan, key_cache)
    out = None
    for c, chunk in enumerate(plan.chunks):
        ids, num_rows, rows = chunk.block_ids, chunk.num_rows, chunk.rows
        if views is None:
            keys, values, flat_keys, flat_values, k, v = _chunk_views(
                key_cache.index_select(0, ids), value_cache.index_select(0, ids), chunk)
        else:
            keys, values, flat_keys, flat_values, k, v = views[c]
            torch.index_select(key_cache, 0, ids, out=keys)
            torch.index_select(value_cache, 0, ids, out=values)
        if chunk.empty_slots is not None:
            flat_keys.index_fill_(0, chunk.empty_slots, 0)
            flat_values.index_fill_(0, chunk.empty_slots, 0)
        q = query if rows is None else query.index_select(0, rows)
        # GQA as query rows of their KV head, not SDPA's enable_gqa (slower, docs/benchmarks.md)
        o = F.scaled_dot_product_attention(q.view(num_rows, num_kv_heads, group, head_size), k, v,
                                           attn_mask=chunk.mask, scale=scale)  # [rows, kv, group, d]
        o = o.view(num_rows, num_heads, head_size)
        if rows is None:
            return o
        if out is None:
            out = query.new_empty(query.shape)
        out.index_copy_(0, rows, o)
    return out
