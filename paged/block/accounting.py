"""Where the paged cache's slots are (paper §3, Fig. 2), step by step and over runs of decode steps.

:func:`memory_usage` splits the GPU cache's slots into token states, reservation, internal and
external fragmentation, counting each physical block once however many sequences share it (§4.4);
:func:`decode_run_usage` gives the same split summed over ``k`` decode iterations in closed form (the
simulator's fast-forward); :func:`request_slot_iterations` is one request's KV footprint over its
life. They read the manager's block tables and change nothing.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from paged.core.kv_cache_manager import MemoryUsage, split_reserved
from paged.core.sequence import SequenceGroup, SequenceStatus

#: The functions read a :class:`paged.block.manager.PagedKVCacheManager` (its ``block_tables``,
#: ``block_size``, ``num_total_slots``, ``shares_across_groups``); typed loosely to avoid an import cycle.
PagedKVCacheManager = Any

__all__ = ["ceil_sum", "memory_usage", "decode_run_usage", "request_slot_iterations"]


def ceil_sum(x: int, block_size: int) -> int:
    """``sum(ceil(m / block_size) for m in 1..x)`` in O(1) (blocks), for ``x ≥ 0``."""
    q, r = divmod(x, block_size)
    return block_size * q * (q + 1) // 2 + r * (q + 1)


def _running(manager: PagedKVCacheManager, group: SequenceGroup):
    tables = manager.block_tables
    return [s for s in group.seqs if s.status is SequenceStatus.RUNNING and s.seq_id in tables]


def memory_usage(manager: PagedKVCacheManager, seq_groups: list[SequenceGroup]) -> MemoryUsage:
    """Token states / reservation / internal / external slots of the GPU cache (§3, Fig. 2).

    Per sequence: it holds ``num_blocks × block_size`` slots, ``num_tokens`` of them hold tokens; of
    the rest, those it will fill before reaching ``prompt_len + output_len`` tokens are reservation,
    the others internal fragmentation. A block shared by several sequences (of one group, or across
    groups: a shared prefix, a prefix-cache hit) is counted once. Everything else is external &
    other. O(blocks held) (O(groups) when no block is shared).
    """
    block_size = manager.block_size
    tables = manager.block_tables
    used = reserved = internal = 0
    filled: dict[int, tuple[int, int]] = {}  # block -> (tokens in it, slots to be filled)
    across = manager.shares_across_groups
    for group in seq_groups:
        final_len = group.prompt_len + group.output_len
        seqs = _running(manager, group)
        if len(seqs) == 1 and not across:
            table = tables[seqs[0].seq_id]
            n = table.num_tokens
            r, i = split_reserved(n, table.num_blocks * block_size, final_len)
            used, reserved, internal = used + n, reserved + r, internal + i
            continue
        if not across:
            filled = {}
        for seq in seqs:
            table = tables[seq.seq_id]
            n = table.num_tokens
            for idx, block in enumerate(table.physical_blocks):
                start = idx * block_size
                now = min(block_size, n - start)
                later = min(block_size, max(final_len - start, 0))
                old = filled.get(block, (0, 0))
                filled[block] = (max(old[0], now), max(old[1], later))
        if not across:
            used, reserved, internal = _add_filled(filled, block_size, used, reserved, internal)
    if across:
        used, reserved, internal = _add_filled(filled, block_size, used, reserved, internal)
    total = manager.num_total_slots
    return MemoryUsage(used, reserved, internal, total - used - reserved - internal, total)


def _add_filled(filled, block_size, used, reserved, internal):
    for now, later in filled.values():
        used += now
        reserved += max(later - now, 0)
        internal += block_size - max(later, now)
    return used, reserved, internal


def decode_run_usage(manager: PagedKVCacheManager, seq_groups: list[SequenceGroup], num_tokens: list[int],
                     k: int) -> MemoryUsage:
    """:func:`memory_usage` summed over ``k`` decode iterations in closed form (slot-iterations).

    Every running sequence of group ``i`` holds ``n = num_tokens[i] + j`` tokens at iteration ``j`` in
    ``ceil(n / bs)`` blocks. Blocks several of these sequences share are full and stay so during the
    run (a sequence writes only into a block it holds alone), so each extra holder of one is
    ``block_size`` token states too many per iteration, subtracted once. O(groups) without sharing,
    O(blocks held) with it.
    """
    used = reserved = internal = 0
    tri = k * (k - 1) // 2
    bs = manager.block_size
    shared = False
    for group, n in zip(seq_groups, num_tokens):
        final_len = group.prompt_len + group.output_len
        used_i = k * n + tri
        alloc_sum = bs * (ceil_sum(n + k - 1, bs) - ceil_sum(n - 1, bs))
        last_alloc = -(-final_len // bs) * bs  # slots once the final block is allocated
        count = max(0, n + k - 1 - max(n - 1, last_alloc - bs))  # iterations in that block
        excess = count * (last_alloc - final_len)  # allocated slots beyond final_len
        m = len(group.seqs)
        if m > 1:
            m = len(_running(manager, group))
            shared = True
        used += m * used_i
        reserved += m * (alloc_sum - excess - used_i)
        internal += m * excess
    if shared or manager.shares_across_groups:
        tables = manager.block_tables
        holders = Counter(b for g in seq_groups for s in _running(manager, g) for b in tables[s.seq_id].physical_blocks)
        used -= k * bs * sum(c - 1 for c in holders.values())
    total = k * manager.num_total_slots
    return MemoryUsage(used, reserved, internal, total - used - reserved - internal, total)


def request_slot_iterations(block_size: int, prompt_len: int, output_len: int) -> int:
    """Slots a lone request holds over the ``output_len`` iterations that generate its tokens:
    ``ceil((prompt_len + j) / bs) × bs`` at the iteration that produces token ``j + 1``. O(1)."""
    bs = block_size
    return bs * (ceil_sum(prompt_len + output_len - 1, bs) - ceil_sum(prompt_len - 1, bs))
