"""Where the paged cache's slots are (paper §3, Fig. 2): token states, reservation, internal and external
fragmentation, each physical block counted once however many sequences share it (§4.4). Read-only.
"""

from __future__ import annotations

from typing import Any

from paged.core.kv_cache_manager import MemoryUsage, split_reserved
from paged.core.sequence import SequenceGroup, SequenceStatus

#: A :class:`paged.block.manager.PagedKVCacheManager`, typed loosely to avoid an import cycle.
PagedKVCacheManager = Any

__all__ = ["memory_usage"]


def _running(manager: PagedKVCacheManager, group: SequenceGroup):
    tables = manager.block_tables
    return [s for s in group.seqs if s.status is SequenceStatus.RUNNING and s.seq_id in tables]


def memory_usage(manager: PagedKVCacheManager, seq_groups: list[SequenceGroup]) -> MemoryUsage:
    """Token states / reservation / internal / external slots of the GPU cache (§3, Fig. 2). O(blocks held).
    Of a sequence's ``num_blocks × block_size`` slots, ``num_tokens`` hold tokens, those filled before
    ``prompt_len + output_len`` tokens are reservation, the others internal; other slots are external & other."""
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
