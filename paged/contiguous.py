"""Contiguous KV cache baselines: the paper's Orca (Max / Pow2 / Oracle) systems (§6.1).

Each sequence gets one contiguous reservation of KV slots, sized by a policy when it is admitted
and held until it finishes. The reservations come from a buddy allocator over the cache's slot
space, as in the paper's Orca baselines.

How each policy sizes a reservation, for a request with prompt ``p`` and true output ``o``
tokens and maximum sequence length ``L`` (2048 in the paper):

* ``max``: ``L`` slots, whatever the request (the system cannot know ``o``).
* ``pow2``: ``p + 2**ceil(log2(o))`` slots, capped at ``L``: at most 2× over-reservation of the
  output (an output of 25 reserves 32).
* ``oracle``: exactly ``p + o`` slots (knows the future; an upper bound, infeasible in practice).

The buddy allocator then rounds each reservation up to a power of two. That rounding slack is
allocator overhead, not the request's over-reservation, so the Fig. 2 accounting puts it under
"external fragmentation & other" (the paper's Oracle shows 0% internal fragmentation), and
:class:`ContiguousKVCacheManager` reports it separately as ``rounding_slots``.
"""

from __future__ import annotations

from paged.kv_manager import AllocStatus, MemoryUsage, split_reserved
from paged.sequence import Sequence, SequenceGroup, SequenceStatus

__all__ = ["BuddyAllocator", "ContiguousKVCacheManager", "reservation_size", "POLICIES"]

POLICIES = ("max", "pow2", "oracle")


def reservation_size(policy: str, prompt_len: int, output_len: int, max_seq_len: int) -> int:
    """Slots a policy reserves for a request (tokens); see the module docstring.

    Raises:
        ValueError: for an unknown policy or non-positive lengths.
    """
    if prompt_len < 1 or output_len < 1:
        raise ValueError(f"prompt_len and output_len must be ≥ 1, got {prompt_len}, {output_len}")
    if policy == "max":
        return max_seq_len
    if policy == "pow2":
        return min(prompt_len + (1 << (output_len - 1).bit_length()), max_seq_len)
    if policy == "oracle":
        return prompt_len + output_len
    raise ValueError(f"unknown reservation policy {policy!r}; choose one of {POLICIES}")


class BuddyAllocator:
    """Binary buddy allocator over ``num_slots`` KV slots (Knuth's buddy system).

    A request of ``n`` slots takes a free block of ``2**ceil(log2 n)`` slots, splitting a larger
    block in halves as needed; a freed block merges with its buddy when that is free too. A
    slot space that is not a power of two starts as its maximal aligned power-of-two pieces.
    Cost: O(log num_slots) per allocate or free.

    Raises:
        ValueError: if ``num_slots`` < 1.
    """

    def __init__(self, num_slots: int) -> None:
        if num_slots < 1:
            raise ValueError(f"num_slots must be ≥ 1, got {num_slots}")
        self.num_slots = num_slots
        self.max_order = num_slots.bit_length() - 1
        self.free_lists: list[set[int]] = [set() for _ in range(self.max_order + 1)]
        self.allocated: dict[int, int] = {}  # start slot -> order
        start = 0
        for order in range(self.max_order, -1, -1):  # maximal aligned pieces, largest first
            if num_slots - start >= 1 << order:
                self.free_lists[order].add(start)
                start += 1 << order
        self.num_free_slots = num_slots

    @staticmethod
    def order_for(num_slots: int) -> int:
        """Smallest order k with 2**k ≥ num_slots."""
        return max(num_slots - 1, 0).bit_length()

    def can_allocate(self, num_slots: int) -> bool:
        """True if a free block of at least ``num_slots`` slots exists now."""
        order = self.order_for(num_slots)
        return any(self.free_lists[k] for k in range(order, self.max_order + 1))

    def largest_block(self) -> int:
        """Slots of the largest block this space could ever hand out."""
        return 1 << self.max_order

    def allocate(self, num_slots: int) -> int:
        """Reserve ``2**ceil(log2 num_slots)`` contiguous slots; return the first slot.

        Raises:
            MemoryError: if no free block is large enough (external fragmentation or full).
        """
        order = self.order_for(num_slots)
        for k in range(order, self.max_order + 1):
            if self.free_lists[k]:
                start = min(self.free_lists[k])  # lowest address first: deterministic
                self.free_lists[k].remove(start)
                while k > order:  # split, keeping the lower half
                    k -= 1
                    self.free_lists[k].add(start + (1 << k))
                self.allocated[start] = order
                self.num_free_slots -= 1 << order
                return start
        raise MemoryError(f"no contiguous free block of {1 << order} slots")

    def free(self, start: int) -> None:
        """Return a reservation; merge with free buddies.

        Raises:
            ValueError: if ``start`` is not the start of a live reservation (double free).
        """
        order = self.allocated.pop(start, None)
        if order is None:
            raise ValueError(f"double free: no reservation starts at slot {start}")
        self.num_free_slots += 1 << order
        while order < self.max_order:
            buddy = start ^ (1 << order)
            if buddy not in self.free_lists[order]:
                break
            self.free_lists[order].remove(buddy)
            start = min(start, buddy)
            order += 1
        self.free_lists[order].add(start)


class ContiguousKVCacheManager:
    """Orca-style KV cache manager: one contiguous reservation per sequence (§6.1).

    Implements :class:`paged.kv_manager.KVCacheManager`, so the same scheduler drives it.

    Args:
        num_slots: KV slots in the cache (tokens).
        policy: ``"max"``, ``"pow2"`` or ``"oracle"`` (module docstring).
        max_seq_len: the model's maximum sequence length (tokens).

    Raises:
        ValueError: on an unknown policy or non-positive sizes.
    """

    block_size = 1  # contiguous reservations are in slots

    def __init__(self, num_slots: int, policy: str = "max", *, max_seq_len: int = 2048) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown reservation policy {policy!r}; choose one of {POLICIES}")
        if max_seq_len < 1:
            raise ValueError(f"max_seq_len must be ≥ 1, got {max_seq_len}")
        self.policy = policy
        self.max_seq_len = max_seq_len
        self.buddy = BuddyAllocator(num_slots)
        self.num_total_slots = num_slots
        self.reservations: dict[int, tuple[int, int]] = {}  # seq_id -> (start slot, slots)

    def _size(self, seq_group: SequenceGroup) -> int:
        return reservation_size(self.policy, seq_group.prompt_len, seq_group.output_len, self.max_seq_len)

    def never_reason(self, seq_group: SequenceGroup) -> str:
        """Why :meth:`can_allocate` says NEVER for ``seq_group``: the limit that binds."""
        size = self._size(seq_group)
        final_len = seq_group.prompt_len + seq_group.output_len
        if final_len > size:
            return (f"its sequences reach {final_len} tokens but the {self.policy!r} policy reserves at most "
                    f"max_seq_len={self.max_seq_len} slots per sequence")
        return (f"its {size}-slot reservation per sequence needs a contiguous block of "
                f"{1 << self.buddy.order_for(size)} slots, larger than the largest the "
                f"{self.num_total_slots}-slot cache has ({self.buddy.largest_block()})")

    def can_allocate(self, seq_group: SequenceGroup) -> AllocStatus:
        """NEVER if the request outgrows its reservation or the largest block; else OK/LATER."""
        size = self._size(seq_group)
        waiting = seq_group.num_seqs(SequenceStatus.WAITING)
        final_len = seq_group.prompt_len + seq_group.output_len
        if final_len > size or size > self.buddy.largest_block():
            return AllocStatus.NEVER
        if waiting * (1 << self.buddy.order_for(size)) > self.buddy.num_free_slots:
            return AllocStatus.LATER
        if waiting == 1:
            return AllocStatus.OK if self.buddy.can_allocate(size) else AllocStatus.LATER
        # Several sequences: try them for real, then roll back.
        taken = []
        try:
            for _ in range(waiting):
                taken.append(self.buddy.allocate(size))
        except MemoryError:
            return AllocStatus.LATER
        finally:
            for start in taken:
                self.buddy.free(start)
        return AllocStatus.OK

    def allocate(self, seq_group: SequenceGroup) -> None:
        """One reservation per waiting sequence.

        Raises:
            MemoryError: if called without a successful :meth:`can_allocate`.
        """
        size = self._size(seq_group)
        for seq in seq_group.get_seqs(SequenceStatus.WAITING):
            self.reservations[seq.seq_id] = (self.buddy.allocate(size), size)

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
        """A contiguous system cannot share: the child gets its own reservation (a copy).

        Raises:
            MemoryError: if no free block is large enough.
        """
        size = self.reservations[parent.seq_id][1]
        self.reservations[child.seq_id] = (self.buddy.allocate(size), size)

    def free(self, seq: Sequence) -> None:
        """Release the sequence's reservation. Unknown sequences: no-op."""
        entry = self.reservations.pop(seq.seq_id, None)
        if entry is not None:
            self.buddy.free(entry[0])

    def get_block_table(self, seq: Sequence, block_size: int) -> list[int]:
        """The sequence's reservation seen as ``block_size``-slot blocks (for the paged kernel).

        A buddy reservation of ``2**k`` slots starts at a multiple of ``2**k``, so when it is at
        least ``block_size`` slots it covers whole blocks ``start // block_size, ...``; the real
        engine then reads a contiguous reservation through the same attention kernel as a paged
        sequence, and only memory management differs. O(reservation / block_size).

        Raises:
            KeyError: if the sequence holds no reservation.
            ValueError: if the reservation does not start on a block boundary.
        """
        start, size = self.reservations[seq.seq_id]
        if start % block_size:
            raise ValueError(f"reservation of sequence {seq.seq_id} starts at slot {start}, not a multiple of "
                             f"block_size={block_size} (reservations smaller than a block are not block-aligned)")
        first = start // block_size
        return list(range(first, first + -(-size // block_size)))

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
