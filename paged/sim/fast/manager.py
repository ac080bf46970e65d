"""KV cache managers and a scheduler with batched operations, for the simulator's hot paths (§4.2–§4.5).

Each class here is a subclass of a reference class (:class:`~paged.block.PagedKVCacheManager`,
:class:`~paged.contiguous.ContiguousKVCacheManager`, :class:`~paged.core.Scheduler`) that adds
operations doing many of the reference's steps in one call, with the same blocks taken and freed in the
same order:

* a decode step's appends for every running group (:meth:`FastPagedKVCacheManager.append_slots_in_order`,
  used by :meth:`FastScheduler.schedule_decodes`): a token that fits in its private last block changes a
  count and nothing else, and a group of samples none of which copies a shared block is counted and grown
  in one pass;
* a new request's prefill without a plan when nothing can be shared but its own prompt, and otherwise
  planned once for the admission's three questions (``keeping_plans``);
* a beam step's frees and forks (``free_and_fork``);
* the block limit and the memory breakdown of a run of ``k`` identical decode iterations, in closed form
  (``decode_run_limit``, ``decode_run_usage``; :mod:`paged.sim.fast.fast_forward`);
* blocks held for the calendars past the tables (``hold_blocks``, ``release_blocks``, ``replace_tables``;
  :mod:`paged.sim.fast.decode_calendar`, :mod:`paged.sim.fast.beam_calendar`), and the free blocks a
  swapped-out group needs to come back (``swap_in_blocks``).
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager, nullcontext
from operator import attrgetter

from paged.block.allocator import BlockAllocator, OutOfBlocksError
from paged.block.block_table import BlockTable
from paged.block.manager import PagedKVCacheManager
from paged.block.prefix_caching import PrefixCachingBlockAllocator
from paged.contiguous.manager import ContiguousKVCacheManager
from paged.core.kv_cache_manager import AllocStatus, MemoryUsage
from paged.core.scheduler import Scheduler, SchedulerOutputs
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus

__all__ = ["FastBlockAllocator", "FastBlockTable", "FastPagedKVCacheManager", "FastContiguousKVCacheManager", "FastScheduler", "ceil_sum"]

_RUNNING = SequenceStatus.RUNNING
_SEQS = attrgetter("seqs")
_MAX_NUM_SEQS = attrgetter("max_num_seqs")


def ceil_sum(x: int, block_size: int) -> int:
    """``sum(ceil(m / block_size) for m in 1..x)`` in O(1) (blocks), for ``x ≥ 0``."""
    q, r = divmod(x, block_size)
    return block_size * q * (q + 1) // 2 + r * (q + 1)


class FastBlockAllocator(BlockAllocator):
    """A :class:`~paged.block.BlockAllocator` that takes many blocks in one call: the calendars hold a group's
    blocks past its tables this way."""

    __slots__ = ()

    def allocate_many(self, num_blocks: int) -> list[int]:
        """``[allocate() for _ in range(num_blocks)]``: the same blocks in the same order, in two list
        operations. O(num_blocks). Raises OutOfBlocksError, taking nothing, if fewer blocks are free."""
        free = self._free
        if num_blocks > len(free):
            raise OutOfBlocksError(f"need {num_blocks} free KV blocks, {len(free)} are free")
        if num_blocks <= 0:
            return []
        taken = free[:-num_blocks - 1:-1]  # the top of the stack first, as allocate() pops it
        del free[-num_blocks:]
        counts = self._ref_counts
        for block in taken:
            counts[block] = 1
        return taken

    def _all_held(self, blocks: list[int]) -> bool:
        """True if ``blocks`` is not empty and every id is a held block (else the reference's path runs)."""
        counts = self._ref_counts
        try:
            return bool(blocks) and min(blocks) >= 0 and 0 not in map(counts.__getitem__, blocks)
        except (IndexError, TypeError):
            return False

    def incref_all(self, blocks: list[int], times: int = 1) -> None:
        """:meth:`~paged.block.BlockAllocator.incref_all` ``times`` times over (a prompt's samples forked at
        once), without the reference's undo bookkeeping once every id is known to be held. O(blocks)."""
        if not self._all_held(blocks):
            for _ in range(times):
                super().incref_all(blocks)
            return
        counts = self._ref_counts
        for block_id in blocks:
            counts[block_id] += times

    def free_all(self, blocks: list[int]) -> None:
        """:meth:`~paged.block.BlockAllocator.free_all` with the free stack pushed inline: the same counts,
        the same free order, the same errors (a bad id goes to the reference, which names it). O(blocks)."""
        if not self._all_held(blocks):
            return super().free_all(blocks)
        counts, free = self._ref_counts, self._free
        for block_id in reversed(blocks):
            count = counts[block_id]
            if count == 1:
                counts[block_id] = 0
                free.append(block_id)
            elif count:
                counts[block_id] = count - 1
            else:  # only an id listed twice gets here, as in the reference
                raise ValueError(f"double free: physical block {block_id} is already free")

    def incref_table(self, blocks: list[int]) -> None:
        """:meth:`incref_all` of a block table's blocks (a fork), which the table holds, each once: no id
        checks (the table's are held by construction). An interrupted loop is repaired like the reference's,
        from the tables (:meth:`~paged.block.PagedKVCacheManager.rollback_uncomputed`). O(blocks)."""
        counts = self._ref_counts
        for block_id in blocks:
            counts[block_id] += 1

    def free_table(self, blocks: list[int]) -> None:
        """:meth:`free_all` of a block table's blocks, which the table holds, each once: the same counts and
        free order, without the id checks (as :meth:`incref_table`). O(blocks)."""
        counts, free = self._ref_counts, self._free
        for block_id in reversed(blocks):
            count = counts[block_id]
            counts[block_id] = count - 1
            if count == 1:
                free.append(block_id)


def take_blocks(allocator: BlockAllocator, num_blocks: int) -> list[int]:
    """``num_blocks`` free blocks at count 1, those ``allocate()`` would hand out in its order: in one call from
    a :class:`FastBlockAllocator`, else one call each (a prefix-caching allocator evicting as it goes).
    O(num_blocks). Raises OutOfBlocksError, taking nothing, if fewer blocks are free."""
    if type(allocator) is FastBlockAllocator:
        return allocator.allocate_many(num_blocks)
    if num_blocks > allocator.num_free_blocks:
        raise OutOfBlocksError(f"need {num_blocks} free KV blocks, {allocator.num_free_blocks} are free")
    return [allocator.allocate() for _ in range(num_blocks)]


class FastBlockTable(BlockTable):
    """A :class:`~paged.block.BlockTable` that can grow to a token count in one call, checking first.

    Attributes:
        full_blocks_registered: full blocks of known token ids when the fast manager last had the prefix
            cache register this table's blocks (``min(tokens, known ids) // block_size``), or -1.
    """

    __slots__ = ("full_blocks_registered",)

    def __init__(self, allocator: BlockAllocator, blocks=(), num_tokens: int = 0, *, validate: bool = True) -> None:
        if validate:
            super().__init__(allocator, blocks, num_tokens)
        else:  # the reference's fields, set without its call: a fork's or a swap's table, made by the thousand
            self._allocator, self._block_size, self._ref_counts = allocator, allocator.block_size, allocator.ref_counts
            self._blocks, self._num_tokens = list(blocks), num_tokens
        self.full_blocks_registered = -1

    def fork(self) -> FastBlockTable:
        """:meth:`~paged.block.BlockTable.fork`, its blocks shared without the allocator's id checks. O(blocks)."""
        allocator = self._allocator
        if type(allocator) is not FastBlockAllocator:
            return super().fork()
        allocator.incref_table(self._blocks)
        return FastBlockTable(allocator, self._blocks, self._num_tokens, validate=False)

    def free(self) -> None:
        """:meth:`~paged.block.BlockTable.free` without the allocator's id checks: the same order. O(blocks)."""
        if type(self._allocator) is not FastBlockAllocator:
            return super().free()
        self._allocator.free_table(self._blocks)
        self._blocks = []
        self._num_tokens = 0

    def blocks_to_grow(self, num_tokens: int) -> int | None:
        """Free blocks that room for ``num_tokens`` tokens in all takes, or None if the next token would
        copy a shared, partly filled last block (:meth:`needs_copy_on_write`). O(1)."""
        have, blocks = self._num_tokens, self._blocks
        if num_tokens <= have:
            return 0
        if have % self._block_size and self._ref_counts[blocks[-1]] > 1:
            return None
        return max(0, -(-num_tokens // self._block_size) - len(blocks))

    def extend_to(self, num_tokens: int) -> None:
        """Room for ``num_tokens`` tokens in all, once :meth:`blocks_to_grow` found nothing to copy and the
        caller checked that the free blocks cover its count: new blocks past the end only, taken as
        ``append_tokens`` takes them. O(1) plus the new blocks."""
        if num_tokens <= self._num_tokens:
            return
        blocks = self._blocks
        new = -(-num_tokens // self._block_size) - len(blocks)
        if new > 0:
            blocks.extend(take_blocks(self._allocator, new))
        self._num_tokens = num_tokens

    def grow_to(self, num_tokens: int, copies: list[tuple[int, int]]) -> bool:
        """Room for ``num_tokens`` tokens in all (``append_tokens`` of the difference) if the free blocks
        cover it, its copy-on-write pair added to ``copies``; False, changing nothing, if they do not.
        A token inside a private last block changes the count alone. O(1) plus the new blocks."""
        have, blocks, allocator = self._num_tokens, self._blocks, self._allocator
        capacity = len(blocks) * self._block_size
        if have < num_tokens <= capacity and self._ref_counts[blocks[-1]] == 1:
            self._num_tokens = num_tokens
            return True
        # Past the last block, and nothing to copy (its last block is full, or private): new blocks only.
        if num_tokens > capacity and (have == capacity or self._ref_counts[blocks[-1]] == 1):
            new = -(-num_tokens // self._block_size) - len(blocks)
            if new > allocator.num_free_blocks:
                return False
            blocks.extend(take_blocks(allocator, new))  # the blocks append_tokens would take, in its order
            self._num_tokens = num_tokens
            return True
        if self.num_new_blocks(num_tokens - have) > allocator.num_free_blocks:
            return False
        copies.extend(self.append_tokens(num_tokens - have))
        return True


class FastPagedKVCacheManager(PagedKVCacheManager):
    """:class:`~paged.block.PagedKVCacheManager` with the batched operations of the module docstring."""

    block_table_class = FastBlockTable
    allocator_class = FastBlockAllocator
    #: A decode allocates a block when a token crosses a block boundary (the calendars read it).
    decode_allocates = True

    # -- one admission's prefill plans -----------------------------------------------------
    _keep_plans = False
    _kept_plan: tuple[SequenceGroup, object] | None = None

    @contextmanager
    def keeping_plans(self):
        """Within the block, the prefill plan of the group asked last answers the next question about
        that group (``prefill_tokens``, ``can_allocate``, ``allocate``) instead of being planned again.
        The caller asks about one group at a time and changes nothing in between but ``allocate``, which
        drops the kept plan once it has used it: the scheduler's admission loop. O(1)."""
        self._keep_plans = True
        try:
            yield
        finally:
            self._keep_plans, self._kept_plan = False, None

    def _plan(self, seq_group: SequenceGroup):
        kept = self._kept_plan
        if kept is not None and kept[0] is seq_group:
            return kept[1]
        plan = super()._plan(seq_group)
        if self._keep_plans:
            self._kept_plan = (seq_group, plan)
        return plan

    # -- a prefill with nothing to share but its own prompt -------------------------------
    def _simple(self, seq_group: SequenceGroup) -> bool:
        """One sequence, or the new samples of one prompt (all waiting, none generated), without a prefix
        to share and nothing shared before: the plan is ``ceil(tokens / block_size)`` new blocks for the
        first sequence, the others forks of it. O(sequences)."""
        seqs = seq_group.seqs
        if self.enable_prefix_caching or seq_group.prefix_len or seqs[0].seq_id in self._layouts:
            return False
        return len(seqs) == 1 or all(s.num_generated == 0 and s.status is SequenceStatus.WAITING for s in seqs)

    def prefill_tokens(self, seq_group: SequenceGroup) -> int:
        if self._simple(seq_group):
            return seq_group.seqs[0].num_tokens
        return super().prefill_tokens(seq_group)

    def can_allocate(self, seq_group: SequenceGroup) -> AllocStatus:
        if not self._simple(seq_group):
            return super().can_allocate(seq_group)
        usable = self.gpu_allocator.num_blocks - self.watermark_blocks
        needed = -(-seq_group.seqs[0].num_tokens // self.block_size)
        if needed > usable or self._worst_case_blocks(seq_group) > usable:
            return AllocStatus.NEVER
        return AllocStatus.OK if self.gpu_allocator.num_free_blocks - needed >= self.watermark_blocks else \
            AllocStatus.LATER

    def allocate(self, seq_group: SequenceGroup) -> list[int]:
        if not self._simple(seq_group):
            try:
                return super().allocate(seq_group)
            finally:
                self._kept_plan = None  # the cache has changed: no plan of before may answer again
        self._check_allocatable(seq_group)
        first, *samples = seq_group.seqs
        allocator = self.gpu_allocator  # a FastBlockAllocator: a simple group has no prefix cache
        num_tokens = first.num_tokens
        blocks = take_blocks(allocator, -(-num_tokens // self.block_size))  # as append_tokens would take them
        self.block_tables[first.seq_id] = FastBlockTable(allocator, blocks, num_tokens, validate=False)
        if samples:  # each a fork of the first: every block gains one reference per sample
            allocator.incref_all(blocks, len(samples))
            for sample in samples:
                self.block_tables[sample.seq_id] = FastBlockTable(allocator, blocks, num_tokens, validate=False)
        return [0] + [num_tokens] * len(samples)

    # -- a decode step ---------------------------------------------------------------------
    def append_slots_in_order(self, seq_groups: list[SequenceGroup]) -> tuple[int, list[tuple[int, int]]]:
        """``can_append_slots`` then ``append_slots`` of each running sequence, group by group in order,
        until a group does not fit: ``(groups done, copy-on-write pairs)``; that group and the later ones
        are unchanged. O(sequences)."""
        tables, chains, block_size = self.block_tables, self._chains, self.block_size
        copies: list[tuple[int, int]] = []
        for done, group in enumerate(seq_groups):
            seqs = group.seqs
            if len(seqs) == 1 and seqs[0].status is _RUNNING:  # the common case: one table, one call
                seq = seqs[0]
                table = tables[seq.seq_id]
                num_tokens = seq.prompt_len + seq.num_generated
                if not table.grow_to(num_tokens, copies):
                    return done, copies
                ids = seq.token_ids
                if chains is not None and ids is not None:  # without ids the chain registers nothing
                    full = min(num_tokens, len(ids)) // block_size
                    # The chain holds every full block up to the count at the last call: ask only past it.
                    if full != table.full_blocks_registered:
                        chains.register_full_blocks(seq, table)
                        table.full_blocks_registered = full
            elif chains is None and (grow := self._group_growth(group)) is not None:
                running, needed = grow  # the samples' last blocks are private: no copy to count
                if needed > self.gpu_allocator.num_free_blocks:
                    return done, copies
                for seq in running:  # each fits: together they take at most the free blocks
                    tables[seq.seq_id].extend_to(seq.prompt_len + seq.num_generated)
            elif self.can_append_slots(group):
                for seq in group.get_seqs(_RUNNING):
                    copies.extend(self.append_slots(seq))
            else:
                return done, copies
        return len(seq_groups), copies

    def _group_growth(self, seq_group: SequenceGroup) -> tuple[list[Sequence], int] | None:
        """The group's running sequences and the free blocks their appends take, or None if one of them
        would copy a shared last block (the reference then counts the copies). Without copies each table
        needs only the blocks past its end, as ``can_append_slots`` counts them. O(sequences)."""
        tables, needed = self.block_tables, 0
        running = [seq for seq in seq_group.seqs if seq.status is _RUNNING]
        for seq in running:
            blocks = tables[seq.seq_id].blocks_to_grow(seq.prompt_len + seq.num_generated)
            if blocks is None:
                return None
            needed += blocks
        return running, needed

    def free_and_fork(self, dropped: list[Sequence], forks: list[tuple[Sequence, Sequence]]) -> None:
        """``free`` each sequence of ``dropped``, then ``fork`` each ``(parent, child)``, in order: a beam
        step (§4.4) in one call. Allocates nothing. O(blocks of the sequences)."""
        if self._chains is not None:  # the prefix cache follows each free and fork: the reference's calls
            for seq in dropped:
                self.free(seq)
            for parent, child in forks:
                self.fork(parent, child)
            return
        tables, layouts = self.block_tables, self._layouts
        for seq in dropped:  # free(), without its method calls
            table = tables.pop(seq.seq_id, None)
            if table is not None:
                table.free()
            layouts.pop(seq.seq_id, None)
        for parent, child in forks:
            if child.seq_id in tables or parent.seq_id not in tables:
                self.fork(parent, child)  # the reference refuses it, naming the sequence
                continue
            tables[child.seq_id] = tables[parent.seq_id].fork()

    # -- runs of identical decode iterations (fast_forward.py) ------------------------------
    def decode_run_limit(self, seqs: list[Sequence], max_iterations: int) -> int:
        """Most decode iterations (≤ ``max_iterations``) whose block-boundary crossings the free blocks
        cover, each sequence gaining one token per iteration; each writes only into blocks it holds
        alone. A sequence with room for ``n`` tokens in whole blocks needs a block at iterations
        ``first, first + block_size, ...`` with ``first = ceil(n / bs) * bs - n + 1``. With prefix caching
        only free blocks that hold no cached KV count: the run's blocks are taken at its end, group by group,
        and an eviction then would pick another cached block than the reference's iteration-by-iteration
        order does. O(crossings)."""
        if max_iterations <= 1:
            return max_iterations
        bs = self.block_size
        events = []
        for seq in seqs:
            n = seq.num_tokens
            first = -(-n // bs) * bs - n + 1
            if first < max_iterations:
                events.extend(range(first, max_iterations, bs))
        free = self.gpu_allocator.num_free_blocks
        if self.enable_prefix_caching:  # the run's blocks are taken after it: evictions would pick other blocks
            free -= self.gpu_allocator.num_evictable_blocks
        if len(events) <= free:
            return max_iterations
        events.sort()
        return events[free]  # the iteration that would need block number free + 1: stop before it

    def decode_run_usage(self, seq_groups: list[SequenceGroup], num_tokens: list[int], k: int) -> MemoryUsage:
        """``memory_usage`` summed over ``k`` decode iterations in closed form (slot-iterations): every
        running sequence of group ``i`` holds ``n = num_tokens[i] + j`` tokens at iteration ``j`` in
        ``ceil(n / bs)`` blocks. A block several sequences share is full and stays so during the run (a
        sequence writes only into a block it holds alone), so each extra holder of one is ``block_size``
        token states too many per iteration, subtracted once. O(groups) without sharing."""
        used = reserved = internal = 0
        tri = k * (k - 1) // 2
        bs = self.block_size
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
                m = len(self._running_with_table(group))
                shared = True
            used += m * used_i
            reserved += m * (alloc_sum - excess - used_i)
            internal += m * excess
        if shared or self.shares_across_groups:
            tables = self.block_tables
            holders = Counter(b for g in seq_groups for s in self._running_with_table(g)
                              for b in tables[s.seq_id].physical_blocks)
            used -= k * bs * sum(c - 1 for c in holders.values())
        total = k * self.num_total_slots
        return MemoryUsage(used, reserved, internal, total - used - reserved - internal, total)

    def _running_with_table(self, group: SequenceGroup) -> list[Sequence]:
        return [s for s in group.seqs if s.status is _RUNNING and s.seq_id in self.block_tables]

    def swap_in_blocks(self, seq_group: SequenceGroup) -> int:
        """The free GPU blocks :meth:`can_swap_in` asks of a swapped-out group (its blocks, a shared one once,
        and the blocks its next tokens need): it fits exactly when that many are free, and the number stays
        the same while the group stays swapped out. O(blocks)."""
        seqs = seq_group.get_seqs(SequenceStatus.SWAPPED)
        return len(self._distinct_blocks(seqs)) + self._append_blocks_needed(seq_group, SequenceStatus.SWAPPED,
                                                                              self.cpu_allocator)

    # -- blocks held outside the tables (the calendars) -------------------------------------
    def hold_blocks(self, num_blocks: int) -> list[int]:
        """Take ``num_blocks`` free GPU blocks, one reference each, in no table: a calendar holds a group's
        blocks past its tables this way, so the free pool is the step-by-step loop's. O(num_blocks).

        Raises:
            OutOfBlocksError: if fewer blocks are free (nothing is taken).
        """
        return take_blocks(self.gpu_allocator, num_blocks)

    def release_blocks(self, blocks: list[int]) -> None:
        """Give back one reference to each block of ``blocks`` (taken with :meth:`hold_blocks`), in order."""
        self.gpu_allocator.free_all(blocks[::-1])  # free_all goes tail first: this frees them in order

    def replace_tables(self, tables: list[tuple[Sequence, list[int], int]], *, held: list[int] = (),
                       take: list[int] = ()) -> None:
        """Give each sequence of ``tables`` a new table ``(sequence, physical blocks in logical order,
        tokens)``. Each entry of a new table and each block of ``take`` take one reference (``take``'s are the
        caller's, given back with :meth:`release_blocks`); then each sequence's old table, if any, gives its
        references back, tail first, and each block of ``held`` gives back the reference the caller held.
        Nothing is allocated (§4.4: a calendar writing out or putting aside a replayed beam group's
        tables). O(blocks).

        Raises:
            ValueError: if a block is free, or a table's tokens do not need exactly its blocks (checked
                before anything changes).
        """
        bs = self.block_size
        for seq, blocks, num_tokens in tables:
            if -(-num_tokens // bs) != len(blocks):
                raise ValueError(f"sequence {seq.seq_id}: {num_tokens} tokens need {-(-num_tokens // bs)} blocks "
                                 f"of {bs}, got {len(blocks)}")
        allocator = self.gpu_allocator
        for block in take:
            allocator.incref(block)
        new = []
        for seq, blocks, num_tokens in tables:
            for block in blocks:
                allocator.incref(block)
            new.append((seq, FastBlockTable(allocator, blocks, num_tokens)))
        for seq, table in new:
            old = self.block_tables.get(seq.seq_id)
            self.block_tables[seq.seq_id] = table
            if old is not None:
                old.free()
        self.release_blocks(held)


class FastContiguousKVCacheManager(ContiguousKVCacheManager):
    """:class:`~paged.contiguous.ContiguousKVCacheManager` with the batched operations of the module
    docstring (a reservation already holds every token its request writes: a decode allocates nothing)."""

    decode_allocates = False

    def keeping_plans(self):
        """A contiguous manager plans nothing: a no-op block (:meth:`FastPagedKVCacheManager.keeping_plans`)."""
        return nullcontext()

    def append_slots_in_order(self, seq_groups: list[SequenceGroup]) -> tuple[int, list[tuple[int, int]]]:
        """``(groups done, [])``: the groups, in order, up to the first whose running sequences do not all
        stay inside their reservations. O(sequences)."""
        reservations = self.reservations
        for done, group in enumerate(seq_groups):
            for seq in group.seqs:
                if seq.status is _RUNNING and seq.prompt_len + seq.num_generated > reservations[seq.seq_id][1]:
                    return done, []
        return len(seq_groups), []

    def free_and_fork(self, dropped: list[Sequence], forks: list[tuple[Sequence, Sequence]]) -> None:
        """``free`` each sequence of ``dropped``, then ``fork`` each ``(parent, child)``, in order.

        Raises:
            MemoryError: as ``fork``.
        """
        for seq in dropped:
            self.free(seq)
        for parent, child in forks:
            self.fork(parent, child)

    def decode_run_limit(self, seqs: list[Sequence], max_iterations: int) -> int:
        """``max_iterations``: a reservation already covers every token its request will hold. O(1)."""
        return max_iterations

    def decode_run_usage(self, seq_groups: list[SequenceGroup], num_tokens: list[int], k: int) -> MemoryUsage:
        """``memory_usage`` summed over ``k`` decode iterations in closed form (slot-iterations): every
        running sequence of group ``i`` holds ``num_tokens[i] + j`` tokens at iteration ``j`` of its fixed
        reservation. O(sequences)."""
        used = reserved = internal = 0
        tri = k * (k - 1) // 2
        for group, n in zip(seq_groups, num_tokens):
            final_len = group.prompt_len + group.output_len
            used_i = k * n + tri
            for seq in group.seqs:
                if seq.status is not _RUNNING:
                    continue
                size = self.reservations[seq.seq_id][1]
                will_use = min(size, final_len)
                used, reserved = used + used_i, reserved + k * will_use - used_i
                internal += k * (size - will_use)
        total = k * self.num_total_slots
        return MemoryUsage(used, reserved, internal, total - used - reserved - internal, total)


class FastScheduler(Scheduler):
    """:class:`~paged.core.Scheduler` over a fast manager: a decode step's appends in one manager call,
    the reserved sequences counted in O(1) while every request holds one sequence (and without a Python
    step per group while every request holds a fixed set of sequences: parallel samples), and finished
    groups looked for among the candidates a caller names."""

    def __init__(self, kv_manager, **kwargs) -> None:
        super().__init__(kv_manager, **kwargs)
        self._single = True  # every group added held one sequence and never more: reserved = running groups
        # Every group added holds all the sequences it will run (none forked, no beam): reserved = Σ sequences.
        self._fixed = True

    def add_seq_group(self, seq_group: SequenceGroup) -> None:
        super().add_seq_group(seq_group)
        if len(seq_group.seqs) != 1 or seq_group.max_num_seqs > 1:
            self._single = False
        if seq_group.max_num_seqs > len(seq_group.seqs) or getattr(seq_group, "beam", None) is not None:
            self._fixed = False

    def fork_seq(self, group: SequenceGroup, parent: Sequence, child: Sequence) -> None:
        self._single = self._fixed = False
        super().fork_seq(group, parent, child)

    def num_reserved_seqs(self) -> int:
        if self._single:
            return len(self.running)
        running = self.running
        if self._fixed:  # each group's max(sequences, max_num_seqs) is its sequences
            return sum(map(len, map(_SEQS, running)))
        return sum(map(max, map(len, map(_SEQS, running)), map(_MAX_NUM_SEQS, running)))  # the reference's sum, in C

    def schedule_prefills(self) -> SchedulerOutputs:
        """:meth:`~paged.core.Scheduler.schedule_prefills` with each group's prefill planned once per question
        round (``keeping_plans``): the same groups admitted, the same blocks."""
        with self.kv_manager.keeping_plans():
            return super().schedule_prefills()

    def schedule_decodes(self) -> SchedulerOutputs:
        """:meth:`~paged.core.Scheduler.schedule_decodes` with the groups that fit appended in one manager
        call (``append_slots_in_order``): the same preemptions, the same blocks. O(sequences)."""
        outputs = SchedulerOutputs([], is_prefill=False)
        groups = self.running  # earliest arrival first
        kept: list[SequenceGroup] = []
        lo, hi = 0, len(groups)  # groups[lo:hi] are still to place; groups[hi:] were preempted
        while lo < hi:
            done, copies = self.kv_manager.append_slots_in_order(groups[lo:hi])
            outputs.blocks_to_copy.extend(copies)
            kept.extend(groups[lo:lo + done])
            lo += done
            if lo < hi:  # groups[lo] does not fit: preempt the latest arrival (itself when it is the last)
                hi = hi - 1 if hi - 1 > lo else lo
                self.preempt(groups[hi], outputs)
        self.running = kept
        if not outputs.preempted:
            self.schedule_swap_in(outputs)
        outputs.scheduled_seq_groups = list(self.running)
        return outputs

    def free_finished_seq_groups(self, candidates: list[SequenceGroup] | None = None) -> list[SequenceGroup]:
        """:meth:`~paged.core.Scheduler.free_finished_seq_groups`; given ``candidates`` (the running groups
        that may have finished), only they are checked: O(candidates × groups) in C (list removal)."""
        if candidates is None:
            return super().free_finished_seq_groups()
        finished = [g for g in candidates if g.is_finished()]
        if len(finished) > 1:
            finished.sort(key=self.running.index)
        for group in finished:
            self.running.remove(group)
            self._forget(group)
        return finished
