"""Contiguous KV cache baselines: the paper's Orca (Max / Pow2 / Oracle) systems (§6.1).

Each sequence gets one contiguous reservation of KV slots, sized by a reservation policy
(:mod:`paged.contiguous.reservation`) when it is admitted and held until it finishes. The
reservations come from a buddy allocator over the cache's slot space
(:mod:`paged.contiguous.buddy`), as in the paper's Orca baselines.

The buddy allocator rounds each reservation up to a power of two. That rounding slack is
allocator overhead, not the request's over-reservation, so the Fig. 2 accounting puts it under
"external fragmentation & other" (the paper's Oracle shows 0% internal fragmentation), and
:class:`ContiguousKVCacheManager` reports it separately as ``rounding_slots``.
"""

from __future__ import annotations

from paged.contiguous.buddy import BuddyAllocator
from paged.contiguous.reservation import POLICIES, reservation_size
from paged.core.kv_cache_manager import AllocStatus, MemoryUsage, split_reserved
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus

__all__ = ["ContiguousKVCacheManager"]


class ContiguousKVCacheManager:
    """Orca-style KV cache manager: one contiguous reservation per sequence (§6.1).

    Implements :class:`paged.core.KVCacheManager`, so the same scheduler drives it.

    Args:
        num_slots: KV slots in the cache (tokens).
        policy: ``"max"``, ``"pow2"`` or ``"oracle"`` (:mod:`paged.contiguous.reservation`).
        max_seq_len: the model's maximum sequence length (tokens).
        block_size: reservations are rounded up to whole blocks of this many slots (a power of
            two), so that a reservation can be read as consecutive blocks by the paged attention
            kernel (the real engine). 1, the paper's Orca and the simulator's: single slots.

    Raises:
        ValueError: on an unknown policy, non-positive sizes, or a block size that is not a power of two.
    """

    #: A fork copies the parent's KV into the child's own reservation: nothing can be shared (§4.4).
    fork_copies_kv = True

    def __init__(self, num_slots: int, policy: str = "max", *, max_seq_len: int = 2048, block_size: int = 1) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown reservation policy {policy!r}; choose one of {POLICIES}")
        if max_seq_len < 1:
            raise ValueError(f"max_seq_len must be ≥ 1, got {max_seq_len}")
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1 or block_size & (block_size - 1):
            raise ValueError(f"block_size must be a power of two ≥ 1, got {block_size!r}")
        self.policy = policy
        self.max_seq_len = max_seq_len
        self.block_size = block_size
        self.buddy = BuddyAllocator(num_slots)
        self.num_total_slots = num_slots
        self.reservations: dict[int, tuple[int, int]] = {}  # seq_id -> (start slot, slots)
        # Groups of several sequences (parallel samples, beam candidates) reserve their peak number of
        # sequences at admission; reservations not held by a sequence now are the group's spares.
        self._group_of: dict[int, int] = {}  # seq_id -> its group's key
        self._spares: dict[int, list[int]] = {}  # group key -> start slots of spare reservations
        self._live: dict[int, int] = {}  # group key -> sequences holding a reservation

    def _size(self, seq_group: SequenceGroup) -> int:
        """Slots one sequence of the group reserves: the policy's size in whole blocks (tokens)."""
        size = reservation_size(self.policy, seq_group.seqs[0].prompt_len, seq_group.output_len, self.max_seq_len)
        return -(-size // self.block_size) * self.block_size

    def never_reason(self, seq_group: SequenceGroup) -> str:
        """Why :meth:`can_allocate` says NEVER for ``seq_group``: the limit that binds."""
        size = self._size(seq_group)
        final_len = seq_group.prompt_len + seq_group.output_len
        if final_len > size:
            return (f"its sequences reach {final_len} tokens but the {self.policy!r} policy reserves at most "
                    f"max_seq_len={self.max_seq_len} slots per sequence")
        count = self._num_reservations(seq_group)
        if count * (1 << self.buddy.order_for(size)) > self.num_total_slots:
            return (f"its {count} sequences need {count} reservations of {1 << self.buddy.order_for(size)} slots, "
                    f"more than the {self.num_total_slots}-slot cache")
        return (f"its {size}-slot reservation per sequence needs a contiguous block of "
                f"{1 << self.buddy.order_for(size)} slots, larger than the largest the "
                f"{self.num_total_slots}-slot cache has ({self.buddy.largest_block()})")

    @staticmethod
    def _num_reservations(seq_group: SequenceGroup) -> int:
        """Reservations a prefill of the group takes: one per sequence it will run at once (§6.1). O(sequences)."""
        seqs = seq_group.seqs
        waiting = seq_group.num_seqs(SequenceStatus.WAITING)
        peak = len(seqs) if len(seqs) > seq_group.max_num_seqs else seq_group.max_num_seqs
        return waiting if waiting > peak else peak

    def can_allocate(self, seq_group: SequenceGroup) -> AllocStatus:
        """NEVER if the request outgrows its reservation, the largest block, or the cache (one reservation
        per sequence it will run at once); else OK/LATER. O(orders of the buddy allocator) (the admission's
        hot path: asked of the head of the queue at every iteration while it waits)."""
        size = self._size(seq_group)
        count = self._num_reservations(seq_group)
        buddy = self.buddy
        order = (size - 1).bit_length()  # the buddy block a reservation of size takes: 2**order slots
        need = count << order
        if seq_group.prompt_len + seq_group.output_len > size or order > buddy.max_order or need > self.num_total_slots:
            return AllocStatus.NEVER
        if need > buddy.num_free_slots:
            return AllocStatus.LATER
        # One block of the size, or as many one after another (what allocate will take).
        return AllocStatus.OK if buddy.num_allocatable(size, count) >= count else AllocStatus.LATER

    def prefill_tokens(self, seq_group: SequenceGroup) -> int:
        """Tokens the prefill computes: a new group's prompt once (then copied into each sample's
        reservation); a recomputed group's every sequence in full (nothing is shared). O(sequences)."""
        waiting = seq_group.get_seqs(SequenceStatus.WAITING)
        if all(seq.num_generated == 0 for seq in waiting):
            return waiting[0].num_tokens if waiting else 0
        return sum(seq.num_tokens for seq in waiting)

    def allocate(self, seq_group: SequenceGroup) -> list[int]:
        """One reservation per waiting sequence, plus spares up to the group's peak number of sequences
        (a beam group reserves its width at admission). Returns each sequence's first token to compute:
        a new group's samples take the first one's prompt (the engine copies it), a recomputed group
        computes everything. O(reservations).

        Raises:
            MemoryError: if called without a successful :meth:`can_allocate`.
        """
        size = self._size(seq_group)
        waiting = seq_group.get_seqs(SequenceStatus.WAITING)
        starts = [self.buddy.allocate(size) for _ in range(self._num_reservations(seq_group))]
        for seq, start in zip(waiting, starts):
            self.reservations[seq.seq_id] = (start, size)
        if len(starts) > 1:
            key = id(seq_group)
            self._spares[key] = starts[len(waiting):]
            self._live[key] = len(waiting)
            for seq in waiting:
                self._group_of[seq.seq_id] = key
        if all(seq.num_generated == 0 for seq in waiting):
            return [0] + [waiting[0].num_tokens] * (len(waiting) - 1)
        return [0] * len(waiting)

    def can_append_slots(self, seq_group: SequenceGroup) -> bool:
        """True while every running sequence stays inside its reservation."""
        return all(
            seq.num_tokens <= self.reservations[seq.seq_id][1]
            for seq in seq_group.seqs
            if seq.status is SequenceStatus.RUNNING
        )

    def append_slots(self, seq: Sequence) -> list[tuple[int, int]]:
        """Nothing to allocate: the reservation already covers the token. Returns ``[]``.

        Raises:
            RuntimeError: if the sequence outgrew its reservation.
        """
        if seq.num_tokens > self.reservations[seq.seq_id][1]:
            raise RuntimeError(
                f"sequence {seq.seq_id} has {seq.num_tokens} tokens, more than its "
                f"{self.reservations[seq.seq_id][1]}-slot reservation"
            )
        return []

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """A contiguous system cannot share: the child gets its own reservation (a copy of the parent's
        KV), one of its group's spares if it has one. O(1) with a spare.

        Raises:
            MemoryError: if there is no spare and no free block is large enough.
        """
        size = self.reservations[parent.seq_id][1]
        key = self._group_of.get(parent.seq_id)
        spares = self._spares.get(key) if key is not None else None
        self.reservations[child.seq_id] = (spares.pop() if spares else self.buddy.allocate(size), size)
        if key is not None:
            self._group_of[child.seq_id] = key
            self._live[key] += 1

    def free(self, seq: Sequence) -> None:
        """Release the sequence's reservation (to its group's spares while the group has other live
        sequences; the spares with the last one). Unknown sequences: no-op."""
        entry = self.reservations.pop(seq.seq_id, None)
        if entry is None:
            return
        key = self._group_of.pop(seq.seq_id, None)
        if key is None:
            self.buddy.free(entry[0])
            return
        self._live[key] -= 1
        if self._live[key]:
            self._spares[key].append(entry[0])
            return
        del self._live[key]
        for start in [entry[0], *self._spares.pop(key)]:
            self.buddy.free(start)

    def free_for_recompute(self, seq_group: SequenceGroup) -> None:
        """Release the group's reservations (spares too): nothing is shared to remember."""
        for seq in seq_group.seqs:
            if seq.status is SequenceStatus.RUNNING:
                self.free(seq)

    def commit_computed(self) -> None:
        """Nothing to commit: contiguous reservations cache no KV across requests."""

    def rollback_uncomputed(self) -> int:
        """After an interrupted iteration: rebuild the group bookkeeping and the buddy allocator from the
        reservations and spares held, which repairs an allocate, fork or free cut short (a reservation taken
        but not recorded is free again). Nothing to roll back otherwise (no prefix cache): 0. O(reservations)."""
        self._group_of = {seq_id: key for seq_id, key in self._group_of.items() if seq_id in self.reservations}
        live: dict[int, int] = {}
        for key in self._group_of.values():
            live[key] = live.get(key, 0) + 1
        self._live = live
        self._spares = {key: spares for key, spares in self._spares.items() if key in live}
        size_of = {self._group_of[seq_id]: size for seq_id, (_, size) in self.reservations.items()
                   if seq_id in self._group_of}
        held = {start: self.buddy.order_for(size) for start, size in self.reservations.values()}
        for key, spares in self._spares.items():
            held.update((start, self.buddy.order_for(size_of[key])) for start in spares)
        self.buddy.rebuild(held)
        return 0

    def reset_prefix_cache(self) -> bool:
        """True: a contiguous manager has no prefix cache to drop."""
        return True

    def check_invariants(self) -> None:
        """Raise AssertionError unless the buddy allocator's free slots equal the cache less every
        reservation held by a sequence or kept as a group's spare (each rounded to its buddy block), and
        the group bookkeeping agrees with the reservations. O(reservations)."""
        order_for = self.buddy.order_for
        sizes = {start: size for start, size in self.reservations.values()}
        assert len(sizes) == len(self.reservations), "two sequences share a reservation"
        held = sum(1 << order_for(size) for size in sizes.values())
        for key, spares in self._spares.items():
            size = next((self.reservations[s][1] for s, k in self._group_of.items() if k == key), None)
            assert size is not None or not spares, f"group {key} keeps spares but has no live sequence"
            held += sum(1 << order_for(size) for _ in spares) if spares else 0
        assert self.buddy.num_free_slots == self.num_total_slots - held, \
            f"buddy free slots {self.buddy.num_free_slots} != {self.num_total_slots} - {held} reserved"
        for key, live in self._live.items():
            assert live == sum(1 for k in self._group_of.values() if k == key) > 0, f"group {key}: live count wrong"

    def sharing_counts(self) -> tuple[int, int]:
        """``(blocks reserved, the same)``: reservations (spares included) are never shared. O(groups)."""
        held = (self.num_total_slots - self.buddy.num_free_slots) // self.block_size
        return held, held

    def get_block_table(self, seq: Sequence) -> list[int]:
        """The sequence's reservation seen as ``block_size``-slot blocks (for the paged kernel).

        A buddy reservation of ``2**k`` slots starts at a multiple of ``2**k``; reservations are whole
        blocks, so it covers blocks ``start // block_size, ...``; the real engine then reads a
        contiguous reservation through the same attention kernel as a paged sequence, and only memory
        management differs. O(reservation / block_size).

        Raises:
            KeyError: if the sequence holds no reservation.
        """
        start, size = self.reservations[seq.seq_id]
        first = start // self.block_size
        return list(range(first, first + size // self.block_size))

    @property
    def num_used_slots(self) -> int:
        """Slots reserved now, the buddy allocator's rounding included (tokens). O(1)."""
        return self.num_total_slots - self.buddy.num_free_slots

    def blocks_held(self, seqs: list[Sequence]) -> tuple[int, int]:
        """``(blocks reserved, the same)``: reservations are never shared. O(sequences)."""
        held = sum(self.reservations[s.seq_id][1] for s in seqs if s.seq_id in self.reservations) // self.block_size
        return held, held

    def can_swap_out(self, seq_group: SequenceGroup) -> bool:
        """Contiguous baselines do not swap (their reservations never need to grow)."""
        return False

    def swap_out(self, seq_group: SequenceGroup) -> list[tuple[int, int]]:
        """Not supported. Raises: NotImplementedError."""
        raise NotImplementedError("contiguous baselines do not swap")

    def can_swap_in(self, seq_group: SequenceGroup) -> AllocStatus:
        """Never: nothing is ever swapped out."""
        return AllocStatus.NEVER

    def swap_in(self, seq_group: SequenceGroup) -> list[tuple[int, int]]:
        """Not supported. Raises: NotImplementedError."""
        raise NotImplementedError("contiguous baselines do not swap")

    @property
    def rounding_slots(self) -> int:
        """Slots lost to the buddy allocator's power-of-two rounding now (tokens)."""
        return sum((1 << self.buddy.allocated[s]) - n for s, n in self.reservations.values())

    def memory_usage(self, seq_groups: list[SequenceGroup]) -> MemoryUsage:
        """Token states / reservation / internal / external slots (§3, Fig. 2).

        Per running sequence with a reservation of ``R`` slots and ``n`` tokens: ``n`` token
        states; of the other ``R - n``, those it will fill before reaching prompt + output
        tokens are reservation, the rest internal fragmentation. Free slots and the buddy
        rounding slack are external fragmentation & other.
        """
        used = reserved = internal = 0
        for group in seq_groups:
            final_len = group.prompt_len + group.output_len
            for seq in group.seqs:
                entry = self.reservations.get(seq.seq_id)
                if entry is None or seq.status is not SequenceStatus.RUNNING:
                    continue
                n = seq.num_tokens
                r, i = split_reserved(n, entry[1], final_len)
                used, reserved, internal = used + n, reserved + r, internal + i
        total = self.num_total_slots
        return MemoryUsage(used, reserved, internal, total - used - reserved - internal, total)
