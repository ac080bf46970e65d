"""The KV cache manager interface the scheduler drives (paper §4.2, §4.5, §6.1).

Two kinds of manager implement it: the paged one (:class:`paged.block.PagedKVCacheManager`, blocks allocated
on demand) and the contiguous baselines of the paper's Orca systems (:class:`paged.contiguous.ContiguousKVCacheManager`,
one buddy-allocated reservation per sequence). The scheduler, engine and simulator call only the methods
below, so none knows which manager it drives; ``tests/core/test_kv_cache_manager.py`` runs the same contract
against every manager. Method names follow vLLM v0's ``BlockSpaceManager``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from paged.core.sequence import Sequence, SequenceGroup

__all__ = ["AllocStatus", "MemoryUsage", "KVCacheManager", "RequestTooLargeError"]


class AllocStatus(enum.Enum):
    """Whether a sequence group can be placed in the KV cache."""

    OK = "ok"  # it fits now
    LATER = "later"  # it fits once other requests free memory
    NEVER = "never"  # it is larger than the whole cache: it can never run


class RequestTooLargeError(ValueError):
    """A request needs more KV memory than the whole cache holds, so it could never run."""


@dataclass(slots=True)
class MemoryUsage:
    """Where the KV cache's slots are at one moment (paper §3, Fig. 2), in token slots; the parts sum to ``total``."""

    token_states: int  #: holding a live token's K/V (or about to, in the running step)
    reservation: int  #: reserved for tokens their request will still generate
    internal: int  #: reserved, never to be used: over-reservation, allocator rounding, a paged last block's tail
    external: int  #: every other slot: free memory no waiting request could use, fragmentation, the watermark
    total: int  #: all slots of the cache

    def fractions(self) -> dict[str, float]:
        """The four parts as fractions of ``total`` (they sum to 1)."""
        total = self.total
        return {
            "token_states": self.token_states / total,
            "reservation": self.reservation / total,
            "internal": self.internal / total,
            "external": self.external / total,
        }


def split_reserved(used: int, allocated: int, final_len: int) -> tuple[int, int]:
    """Split a sequence's unused slots into ``(reservation, internal)``: those it will still fill and those it
    never will, given ``used`` slots holding tokens, ``allocated`` slots held, and ``final_len`` tokens when it
    finishes (prompt + output). All in tokens."""
    will_use = min(allocated, final_len)
    return max(will_use - used, 0), allocated - max(will_use, used)


class KVCacheManager(Protocol):
    """What the scheduler needs from a KV cache manager (paged or contiguous). Sizes are in tokens (slots)
    unless a name says blocks."""

    block_size: int  #: tokens per block of :meth:`get_block_table` (contiguous: a reservation's consecutive blocks)
    num_total_slots: int  #: KV slots of the whole (GPU) cache
    fork_copies_kv: bool  #: a fork copies the parent's KV (contiguous), rather than sharing its blocks (paged, §4.4)

    def can_allocate(self, seq_group: SequenceGroup) -> AllocStatus:
        """Whether the waiting sequences of ``seq_group`` can get KV space for a prefill."""
        ...

    def never_reason(self, seq_group: SequenceGroup) -> str:
        """When :meth:`can_allocate` says NEVER: the limit the request exceeds, in words with numbers."""
        ...

    def prefill_tokens(self, seq_group: SequenceGroup) -> int:
        """Tokens a prefill of the group's waiting sequences computes, for the token budget (§4.5): a shared
        prompt counts once, and so do the blocks a recomputed group shared."""
        ...

    def allocate(self, seq_group: SequenceGroup) -> list[int]:
        """Give every waiting sequence of the group room for its ``num_tokens`` tokens. Returns, per waiting
        sequence in group order, how many leading tokens already have KV in the cache at the prefill (prefix-cache
        hits, a reserved prefix, blocks an earlier sequence of the group computes); the prefill computes the rest.
        ``num_tokens`` means the sequence equals the group's first (a new request's parallel sample) and takes
        its logits."""
        ...

    def can_append_slots(self, seq_group: SequenceGroup) -> bool:
        """Whether every running sequence of the group can get a slot for its next token."""
        ...

    def append_slots(self, seq: Sequence) -> list[tuple[int, int]]:
        """Make room for ``seq.num_tokens`` tokens; return copy-on-write ``(src, dst)`` pairs."""
        ...

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Let ``child`` share (paged) or copy (contiguous) ``parent``'s KV space."""
        ...

    def free(self, seq: Sequence) -> None:
        """Release the sequence's KV space."""
        ...

    def free_for_recompute(self, seq_group: SequenceGroup) -> None:
        """Release the KV space of the group's running sequences, preempted by recomputation (§4.5),
        remembering which blocks they shared so that the next :meth:`allocate` shares them again."""
        ...

    def can_swap_out(self, seq_group: SequenceGroup) -> bool:
        """Whether the group's running sequences can be swapped to CPU memory."""
        ...

    def swap_out(self, seq_group: SequenceGroup) -> list[tuple[int, int]]:
        """Move the group's blocks to CPU memory; return ``(gpu_block, cpu_block)`` pairs."""
        ...

    def can_swap_in(self, seq_group: SequenceGroup) -> AllocStatus:
        """Whether the group's swapped sequences fit back in GPU memory."""
        ...

    def swap_in(self, seq_group: SequenceGroup) -> list[tuple[int, int]]:
        """Move the group's blocks back; return ``(cpu_block, gpu_block)`` pairs."""
        ...

    def get_block_table(self, seq: Sequence) -> list[int]:
        """Physical block ids (of ``block_size`` tokens) holding the sequence's KV, in logical order."""
        ...

    @property
    def num_used_slots(self) -> int:
        """Slots allocated (paged) or reserved (contiguous, allocator rounding included) now."""
        ...

    def blocks_held(self, seqs: list[Sequence]) -> tuple[int, int]:
        """``(distinct physical blocks the sequences hold, blocks they would hold with no sharing)``."""
        ...

    def sharing_counts(self) -> tuple[int, int]:
        """:meth:`blocks_held` of the GPU-resident sequences now, in blocks (§4.4, Fig. 15). O(sequences)."""
        ...

    def memory_usage(self, seq_groups: list[SequenceGroup]) -> MemoryUsage:
        """Where the cache's slots are, given the groups that hold KV space now."""
        ...

    def commit_computed(self) -> None:
        """The last scheduled iteration ran: later requests may find the KV it wrote (no-op without a prefix
        cache). O(1)."""
        ...

    def rollback_uncomputed(self) -> int:
        """The last scheduled iteration did not complete: repair the bookkeeping an interrupted operation left
        half-changed, and forget the cache entries of blocks whose KV it was to write, so no later request reads
        KV never computed; returns how many entries."""
        ...

    def reset_prefix_cache(self) -> bool:
        """Drop every cached block (vLLM's ``reset_prefix_cache``): True if done, False (changing nothing)
        while blocks are in use."""
        ...

    def check_invariants(self) -> None:
        """Raise AssertionError if the bookkeeping (reference counts, free pools, reservations) is inconsistent.
        O(blocks); for tests and after an interrupted run."""
        ...
