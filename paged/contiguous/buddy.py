"""Binary buddy allocator over a contiguous KV slot space (the Orca baselines' allocator, §6.1).

Knuth's buddy system: a request of ``n`` slots takes a free block of ``2**ceil(log2 n)`` slots,
splitting a larger block in halves as needed; a freed block merges with its buddy when that is
free too. The power-of-two rounding is allocator overhead, not the request's over-reservation.
"""

from __future__ import annotations

import bisect

__all__ = ["BuddyAllocator"]


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

    def num_allocatable(self, num_slots: int, enough: int | None = None) -> int:
        """How many reservations of ``num_slots`` slots (each ``2**ceil(log2 num_slots)``) could be taken
        one after another now: every free block of that order or above splits into ``2**(k - order)`` of
        them, and :meth:`allocate` succeeds exactly while one is left. Counting stops once it reaches
        ``enough`` (if given): the answer is then at least ``enough``. O(orders)."""
        order = self.order_for(num_slots)
        lists = self.free_lists
        count = 0
        for k in range(order, self.max_order + 1):
            if lists[k]:
                count += len(lists[k]) << (k - order)
                if enough is not None and count >= enough:
                    break
        return count

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

    def rebuild(self, held: dict[int, int]) -> None:
        """Set the allocator to hold exactly ``held`` (start slot -> order, each an aligned block this space can
        hand out) and nothing else: every other slot free, merged into the largest free blocks. Repairs the free
        lists after an interrupt cut an allocate or a free short. O(held × orders).

        Raises:
            ValueError: if a block is misaligned, out of range, or overlaps another (nothing changes then).
        """
        starts = sorted(held)
        for i, start in enumerate(starts):
            order = held[start]
            if not 0 <= order <= self.max_order or start % (1 << order) or start + (1 << order) > self.num_slots:
                raise ValueError(f"no block of order {order} can start at slot {start} in {self.num_slots} slots")
            if i + 1 < len(starts) and starts[i + 1] < start + (1 << order):
                raise ValueError(f"the blocks at slots {start} and {starts[i + 1]} overlap")
        free_lists: list[set[int]] = [set() for _ in range(self.max_order + 1)]

        def place(start: int, order: int) -> None:  # a piece of the space: free, held, or split in halves
            first = bisect.bisect_left(starts, start)
            if first == len(starts) or starts[first] >= start + (1 << order):
                free_lists[order].add(start)  # no held block inside: free as one
            elif not (starts[first] == start and held[start] == order):
                place(start, order - 1)
                place(start + (1 << (order - 1)), order - 1)

        start = 0
        for order in range(self.max_order, -1, -1):  # the maximal aligned pieces, as __init__ cuts them
            if self.num_slots - start >= 1 << order:
                place(start, order)
                start += 1 << order
        self.free_lists, self.allocated = free_lists, dict(held)
        self.num_free_slots = self.num_slots - sum(1 << order for order in held.values())
