"""The paged KV cache manager: block tables for every sequence, on demand (paper §4.2–§4.5).

:class:`PagedKVCacheManager` implements :class:`paged.core.KVCacheManager` with one
:class:`BlockTable` per sequence over a GPU :class:`BlockAllocator`, and a second allocator for the
CPU swap space. A prefill takes ``ceil(num_tokens / block_size)`` blocks; a decode takes a new block
only when its token crosses a block boundary; forked sequences share blocks and copy-on-write the
shared last block, one copy per writer but the last (§4.4).

Sharing, in every path (§4.4, §4.5):

* **parallel samples** of a new request share every block of its prompt (the prompt is computed once);
* a group **preempted by recomputation** is prefilled again sharing exactly the full blocks it
  shared when it was preempted (its prompt, a beam tree), computed once, so a group that fitted
  before fits again in the same memory;
* **swapping** moves each shared block once and keeps its reference count;
* a **reserved prefix** (``SequenceGroup.prefix_len``, the provider-reserved shared prefix of §4.4):
  its full blocks are allocated once, pinned, and shared by every request that starts with it; its
  KV counts as computed in advance;
* **automatic prefix caching** (``enable_prefix_caching``, :mod:`paged.block.prefix_caching`): full
  blocks are named by their chained hash; a new prompt takes the longest run of cached blocks that
  leaves at least its last token to compute (so its logits exist), and freed cached blocks stay
  reusable until evicted (LRU).

The planning of a prefill (which block each logical block comes from) is
:func:`paged.block.prefill_plan.plan_prefill`, which changes nothing; :meth:`allocate` carries the
plan out. Per-sequence hash chains of the prefix cache: :mod:`paged.block.sequence_hashes`.
"""

from __future__ import annotations

from paged.block import accounting
from paged.block.accounting import ceil_sum
from paged.block.allocator import BlockAllocator, OutOfBlocksError
from paged.block.block_table import BlockTable
from paged.block.copy_on_write import copies_for_writers
from paged.block.prefill_plan import HIT, NEW, PREFIX, SIBLING, PrefillPlan, plan_prefill
from paged.block.prefix_caching import PrefixCachingBlockAllocator, hash_block_tokens
from paged.block.sequence_hashes import SequenceHashes
from paged.core.kv_cache_manager import AllocStatus, MemoryUsage
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus

__all__ = ["PagedKVCacheManager", "ceil_sum"]



_RUNNING = SequenceStatus.RUNNING


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _position(seq_groups: list[SequenceGroup], group: SequenceGroup) -> int:
    """Index of ``group`` (by identity) in ``seq_groups``. O(groups)."""
    return next(i for i, g in enumerate(seq_groups) if g is group)


class PagedKVCacheManager:
    """Paged KV cache manager (vLLM's ``BlockSpaceManager``), §4.2–§4.5 (module docstring).

    Args:
        num_gpu_blocks: physical blocks of GPU KV cache (blocks).
        block_size: token slots per block (tokens).
        num_cpu_blocks: blocks of CPU swap space (blocks); 0 disables swapping.
        watermark: fraction of GPU blocks kept free when admitting a new request, so running sequences
            can grow without an immediate preemption (vLLM's default 0.01). Swapped-out groups come back
            without it.
        enable_prefix_caching: automatic prefix caching over the token ids of the sequences
            (sequences without ids, as in the simulator, only share reserved prefixes).
        hash_fn: the prefix cache's block hash (:func:`paged.block.prefix_caching.hash_block_tokens`).

    Raises:
        ValueError: on a non-positive block count or block size, or a watermark outside [0, 1).
    """

    def __init__(self, num_gpu_blocks: int, block_size: int, *, num_cpu_blocks: int = 0, watermark: float = 0.01,
                 enable_prefix_caching: bool = False, hash_fn=hash_block_tokens) -> None:
        if not 0.0 <= watermark < 1.0:
            raise ValueError(f"watermark must be in [0, 1), got {watermark}")
        if enable_prefix_caching:
            self.gpu_allocator: BlockAllocator = PrefixCachingBlockAllocator(num_gpu_blocks, block_size, hash_fn=hash_fn)
        else:
            self.gpu_allocator = BlockAllocator(num_gpu_blocks, block_size)
        self.cpu_allocator = BlockAllocator(num_cpu_blocks, block_size) if num_cpu_blocks else None
        self.block_size = block_size
        self.num_total_slots = num_gpu_blocks * block_size
        self.watermark_blocks = int(watermark * num_gpu_blocks)
        self.enable_prefix_caching = enable_prefix_caching
        self.block_tables: dict[int, BlockTable] = {}
        self._layouts: dict[int, list[int]] = {}  # seq_id -> its full blocks when preempted by recomputation
        self._reserved: dict[int, list[int]] = {}  # prefix_len -> pinned blocks of that reserved prefix
        self._chains = SequenceHashes(self.gpu_allocator) if enable_prefix_caching else None
        self._next_full = self._chains.next_full if enable_prefix_caching else None
        self._memo: tuple | None = None  # the last prefill plan (see _plan)
        self._version = 0  # counts the changes to tables and cache (see _plan)

    @property
    def shares_across_groups(self) -> bool:
        """True if blocks may be shared between requests (prefix caching, a reserved prefix)."""
        return self.enable_prefix_caching or bool(self._reserved)

    # -- planning a prefill (changes nothing) ----------------------------------------------
    def _plan(self, seq_group: SequenceGroup) -> PrefillPlan:
        """The plan of a prefill of ``seq_group`` now. The scheduler asks three questions of the same
        group in a row (budget, fit, allocation); the plan is reused while nothing has changed (every
        method that changes a block table or the cache counts a new version)."""
        memo = self._memo
        # Keyed on the group object itself, not id(): the memo holds a reference, so a discarded
        # group's address cannot be reused by a new group that would then get the stale plan.
        if memo is not None and memo[0] is seq_group and memo[1] == self._version:
            return memo[2]
        plan = plan_prefill(seq_group, block_size=self.block_size, allocator=self.gpu_allocator,
                            layouts=self._layouts, reserved=self._reserved,
                            cache_hits=self._chains.cache_hits if self._chains else None)
        self._memo = (seq_group, self._version, plan)
        return plan

    # -- admission --------------------------------------------------------------------
    def _worst_case_blocks(self, seq_group: SequenceGroup) -> int:
        """Blocks the group holds at its final length if only full prompt blocks stay shared. The last
        generated token is never written to the cache (nothing reads its KV), so a sequence of
        ``prompt_len + output_len`` tokens holds at most ``prompt_len + output_len - 1`` slots."""
        shared = seq_group.prompt_len // self.block_size
        final_blocks = _cdiv(seq_group.prompt_len + seq_group.output_len - 1, self.block_size)
        return shared + seq_group.peak_num_seqs * (final_blocks - shared)

    def _simple(self, seq_group: SequenceGroup) -> bool:
        """No prefix to share and nothing shared before: one sequence, or the new samples of one prompt (all
        waiting, none generated yet). The plan is ``ceil(num_tokens / bs)`` new blocks for the first
        sequence, the others forks of it. O(sequences)."""
        seqs = seq_group.seqs
        if self.enable_prefix_caching or seq_group.prefix_len or seqs[0].seq_id in self._layouts:
            return False
        if len(seqs) == 1:
            return True
        waiting = SequenceStatus.WAITING
        return all(seq.num_generated == 0 and seq.status is waiting for seq in seqs)

    def never_reason(self, seq_group: SequenceGroup) -> str:
        """Why :meth:`can_allocate` says NEVER for ``seq_group``: the numbers that do not fit."""
        usable = self.gpu_allocator.num_blocks - self.watermark_blocks
        return (f"at its final length its {seq_group.peak_num_seqs} sequence(s) need up to "
                f"{max(self._worst_case_blocks(seq_group), self._plan(seq_group).total)} blocks of "
                f"{self.block_size} tokens, but the cache has {usable} usable blocks "
                f"({self.gpu_allocator.num_blocks} minus a watermark of {self.watermark_blocks})")

    def prefill_tokens(self, seq_group: SequenceGroup) -> int:
        """Tokens the prefill of the group's waiting sequences computes: a shared prompt once, blocks
        the group shared once, cached and reserved-prefix tokens not at all. O(prompt blocks)."""
        if self._simple(seq_group):
            return seq_group.seqs[0].num_tokens
        return self._plan(seq_group).tokens

    def can_allocate(self, seq_group: SequenceGroup) -> AllocStatus:
        """OK if the prefill fits above the watermark; LATER if it must wait for memory.

        NEVER if the request could not run even alone in an empty cache: its prefill, or its
        sequences at their final length (prompt + output; full prompt blocks shared; beam search:
        ``seq_group.peak_num_seqs`` candidates), need more blocks than the cache has above the
        watermark. O(prompt blocks).
        """
        usable = self.gpu_allocator.num_blocks - self.watermark_blocks
        if self._simple(seq_group):
            needed = total = _cdiv(seq_group.seqs[0].num_tokens, self.block_size)
        else:
            plan = self._plan(seq_group)
            needed, total = plan.needed, plan.total
        if total > usable or self._worst_case_blocks(seq_group) > usable:
            return AllocStatus.NEVER
        if self.gpu_allocator.num_free_blocks - needed >= self.watermark_blocks:
            return AllocStatus.OK
        return AllocStatus.LATER

    def allocate(self, seq_group: SequenceGroup) -> list[int]:
        """Block tables for the group's waiting sequences (module docstring): new samples fork the
        prompt's table, a recomputed group shares again what it shared, cached and reserved-prefix
        blocks are reused. Returns each waiting sequence's first token to compute
        (:meth:`paged.core.KVCacheManager.allocate`). O(blocks).

        Raises:
            OutOfBlocksError: if called without a successful :meth:`can_allocate`.
        """
        allocator = self.gpu_allocator
        if self._simple(seq_group):
            seqs = seq_group.seqs
            seq = seqs[0]
            table = BlockTable(allocator)
            table.append_tokens(seq.num_tokens)
            self.block_tables[seq.seq_id] = table
            self._version += 1
            if len(seqs) == 1:
                return [0]
            for sample in seqs[1:]:  # new samples share the first sequence's prompt
                self.fork(seq, sample)
            return [0] + [seq.num_tokens] * (len(seqs) - 1)
        plan = self._plan(seq_group)
        self._version += 1
        if plan.needed > allocator.num_free_blocks:
            raise OutOfBlocksError(f"the prefill needs {plan.needed} free blocks, {allocator.num_free_blocks} are free")
        if plan.reserve:
            self._reserved[seq_group.prefix_len] = [allocator.allocate() for _ in range(plan.reserve)]
        pinned = self._reserved.get(seq_group.prefix_len, [])
        chosen: list[list[int]] = []
        later = []  # (sequence, position, source) of the new blocks and those shared with a sibling
        pins = []  # reserved-prefix blocks taken (a reference each)
        for j, sources in enumerate(plan.sources):  # first take every reused block, so no allocation evicts one
            blocks = []
            for i, (kind, value) in enumerate(sources):
                if kind == PREFIX:
                    pins.append(pinned[value])
                    blocks.append(pinned[value])
                elif kind == HIT:
                    allocator.reuse(value)
                    blocks.append(value)
                else:
                    blocks.append(-1)
                    later.append((j, i, kind, value))
            chosen.append(blocks)
        allocator.incref_all(pins)
        # then new blocks (taken in one call, in the order of the plan), and blocks shared with a sibling
        fresh = iter(allocator.allocate_blocks(sum(kind == NEW for _, _, kind, _ in later)))
        for j, i, kind, value in later:
            if kind == NEW:
                chosen[j][i] = next(fresh)
            else:
                chosen[j][i] = block = chosen[value][i]
                allocator.incref(block)
        first = None
        for j, seq in enumerate(plan.seqs[:len(plan.sources)]):
            table = BlockTable.from_blocks(allocator, chosen[j], seq.num_tokens)
            self.block_tables[seq.seq_id] = table
            self._layouts.pop(seq.seq_id, None)
            if self._chains is not None and not seq_group.prefix_len:
                self._chains.start(seq, plan.hit_cids[j])
                self._chains.register_full_blocks(seq, table)
            first = first or seq
        for seq in plan.seqs[len(plan.sources):]:  # new samples share the first sequence's prompt
            self.fork(first, seq)
        return plan.starts

    # -- decode -----------------------------------------------------------------------
    def _append_blocks_needed(self, seqs: list[Sequence], allocator: BlockAllocator) -> int:
        """Free blocks that making room for every sequence's ``num_tokens`` takes: blocks past each
        table's end, plus the copy-on-write copies of shared, partly filled last blocks, one per writer
        but the last when the writers are all of a block's holders (§4.4). O(sequences)."""
        bs = self.block_size
        tables = self.block_tables
        needed = 0
        writers: dict[int, int] = {}
        for seq in seqs:
            table = tables[seq.seq_id]
            have = table.num_tokens
            if seq.num_tokens <= have:
                continue
            needed += _cdiv(seq.num_tokens, bs) - table.num_blocks
            if have % bs:
                last = table.last_block
                writers[last] = writers.get(last, 0) + 1
        for block, num_writers in writers.items():
            needed += copies_for_writers(allocator.ref_count(block), num_writers)
        return needed

    def can_append_slots(self, seq_group: SequenceGroup) -> bool:
        """True if every running sequence of the group can get its next slot, copy-on-write included
        (``n - 1`` copies for ``n`` writers of one shared block). O(sequences)."""
        seqs = seq_group.seqs
        if len(seqs) == 1:
            seq = seqs[0]
            table = self.block_tables[seq.seq_id]
            return table.num_new_blocks(seq.num_tokens - table.num_tokens) <= self.gpu_allocator.num_free_blocks
        running = [seq for seq in seqs if seq.status is SequenceStatus.RUNNING]
        return self._append_blocks_needed(running, self.gpu_allocator) <= self.gpu_allocator.num_free_blocks

    def append_slots_in_order(self, seq_groups: list[SequenceGroup]) -> tuple[int, list[tuple[int, int]]]:
        """:meth:`can_append_slots` then :meth:`append_slots` for each group in order, until a group
        does not fit: ``(groups done, copy-on-write pairs)`` (:class:`paged.core.KVCacheManager`; the
        decode step's hot path). O(sequences).

        A running one-sequence group whose token fits in its private last block costs a few attribute
        reads: the check of :meth:`~paged.block.BlockTable.grow_to`, inlined (the table is this
        manager's, in this package); any other growth is one ``grow_to`` call. With prefix caching,
        :meth:`~paged.block.sequence_hashes.SequenceHashes.register_full_blocks` runs only when a
        block fills (:attr:`~paged.block.sequence_hashes.SequenceHashes.next_full`). A token that fits
        in a private last block changes nothing a prefill plan reads, so only groups that take or
        register blocks count a new version (see :meth:`_plan`)."""
        tables = self.block_tables
        next_full = self._next_full
        copies: list[tuple[int, int]] = []
        for group in seq_groups:
            try:
                seq, = group.seqs  # the common case, one sequence (ValueError for several)
            except ValueError:
                if not self._append_group(group, copies):
                    return _position(seq_groups, group), copies
                continue
            if seq.status is not _RUNNING:
                if not self._append_group(group, copies):
                    return _position(seq_groups, group), copies
                continue
            n = seq.prompt_len + seq.num_generated
            table = tables[seq.seq_id]
            if table._num_tokens < n <= table._capacity and table._counts[table._last] == 1:
                table._num_tokens = n  # grow_to's fast path
            else:
                if table.grow_to(n, copies) < 0:
                    return _position(seq_groups, group), copies
                self._version += 1
            if next_full is not None and n >= next_full.get(seq.seq_id, n + 1):
                self._version += 1
                self._chains.register_full_blocks(seq, table)
        return len(seq_groups), copies

    def _append_group(self, group: SequenceGroup, copies: list[tuple[int, int]]) -> bool:
        """:meth:`append_slots_in_order` for a group of several sequences, or of one that is not running:
        False if it does not fit (nothing changed), else True, its copy-on-write pairs added to ``copies``.

        Several sequences: :meth:`can_append_slots` then :meth:`append_slots` of each running sequence in
        group order, the same blocks taken in the same order, in one pass over the tables (parallel
        samples, beam candidates; the check's count of :meth:`_append_blocks_needed`, inlined, skips
        sequences whose token fits in a private last block, which need nothing; a token that lands in a
        shared last block takes its copy-on-write copy inline, as ``BlockTable._grow`` does). O(sequences).

        Raises:
            ValueError: if a running sequence has fewer tokens than its table (as :meth:`append_slots`)."""
        seqs = group.seqs
        tables = self.block_tables
        if len(seqs) == 1:  # not running: nothing to append (but a group that could not is stopped at)
            seq = seqs[0]
            table = tables[seq.seq_id]
            grow = seq.num_tokens - table.num_tokens
            return not grow or table.num_new_blocks(grow) <= self.gpu_allocator.num_free_blocks
        self._version += 1
        bs = self.block_size
        allocator = self.gpu_allocator
        counts = allocator._ref_counts
        grows = []  # (sequence, its table, its tokens), running sequences in group order
        needed = 0
        writers: dict[int, int] | None = None  # shared, partly filled last block -> its writers
        for seq in seqs:
            if seq.status is not _RUNNING:
                continue
            table = tables[seq.seq_id]
            n = seq.prompt_len + seq.num_generated
            grows.append((seq, table, n))
            have = table._num_tokens
            if n <= have:
                continue
            if n <= table._capacity and counts[table._last] == 1:
                continue  # fits in a private last block: no block taken
            needed += -(-n // bs) - len(table._blocks)
            if have % bs:
                last = table._last
                if writers is None:
                    writers = {last: 1}
                else:
                    writers[last] = writers.get(last, 0) + 1
        if writers is not None:
            for block, num_writers in writers.items():
                needed += copies_for_writers(counts[block], num_writers)
        if needed > allocator.num_free_blocks:
            return False
        next_full = self._next_full
        for seq, table, n in grows:
            have = table._num_tokens
            if have < n <= table._capacity:
                last = table._last
                if counts[last] == 1:
                    table._num_tokens = n  # _grow's fast path
                else:  # _grow's copy-on-write of the shared, partly filled last block (copy_on_write)
                    dst = allocator.allocate()
                    allocator.free(last)
                    table._blocks[-1] = table._last = dst
                    table._num_tokens = n
                    copies.append((last, dst))
            else:
                added = table._grow(n - have, strict=True)
                if added:
                    copies.extend(added)
            if next_full is not None and table._num_tokens >= next_full.get(seq.seq_id, table._num_tokens + 1):
                self._chains.register_full_blocks(seq, table)
        return True

    def append_slots(self, seq: Sequence) -> list[tuple[int, int]]:
        """Room for ``seq.num_tokens`` tokens; copy-on-write pairs to apply (§4.4). With prefix caching,
        blocks that fill up are registered. O(new blocks).

        Raises:
            OutOfBlocksError: if called without a successful :meth:`can_append_slots`.
        """
        self._version += 1
        table = self.block_tables[seq.seq_id]
        copies = table.append_tokens(seq.num_tokens - table.num_tokens)
        if self._next_full is not None and table.num_tokens >= self._next_full.get(seq.seq_id, table.num_tokens + 1):
            self._chains.register_full_blocks(seq, table)
        return copies

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """The child shares every block of the parent (§4.4); allocates nothing. O(blocks)."""
        self._version += 1
        self.block_tables[child.seq_id] = self.block_tables[parent.seq_id].fork()
        if self._chains is not None:
            self._chains.fork(parent, child)

    def free_and_fork(self, dropped: list[Sequence], forks: list[tuple[Sequence, Sequence]]) -> None:
        """:meth:`free` each sequence of ``dropped`` in order, then :meth:`fork` each ``(parent, child)``
        of ``forks`` in order: a beam-search step (§4.4; the simulator's replay,
        :class:`paged.sim.executor.SimulatedExecutor`) in one call, the same block counts changed in
        the same order. Allocates nothing. O(blocks of the sequences)."""
        self._version += 1
        if self._chains is not None:
            for seq in dropped:
                self.free(seq)
            for parent, child in forks:
                self.fork(parent, child)
            return
        tables = self.block_tables
        layouts = self._layouts
        for seq in dropped:
            table = tables.pop(seq.seq_id, None)
            if table is not None:
                table.free()
            if layouts:
                layouts.pop(seq.seq_id, None)
        for parent, child in forks:
            tables[child.seq_id] = tables[parent.seq_id].fork()

    def free(self, seq: Sequence) -> None:
        """Drop the sequence's block table (each block's count −1, tail first). Unknown sequences: no-op."""
        self._version += 1
        table = self.block_tables.pop(seq.seq_id, None)
        if table is not None:
            table.free()
        if self._layouts:
            self._layouts.pop(seq.seq_id, None)
        if self._chains is not None:
            self._chains.drop(seq)

    def free_for_recompute(self, seq_group: SequenceGroup) -> None:
        """Free the group's running sequences' tables, preempted by recomputation (§4.5), remembering
        their full blocks so that :meth:`allocate` shares again exactly what they shared. O(blocks)."""
        self._version += 1
        bs = self.block_size
        for seq in seq_group.seqs:
            if seq.status is SequenceStatus.RUNNING:
                table = self.block_tables.pop(seq.seq_id)
                if len(seq_group.seqs) > 1:
                    self._layouts[seq.seq_id] = table.physical_blocks[: table.num_tokens // bs]
                table.free()

    def get_block_table(self, seq: Sequence) -> list[int]:
        """Physical block ids of the sequence, in logical order. O(blocks).

        Raises:
            KeyError: if the sequence holds no blocks.
        """
        return self.block_tables[seq.seq_id].physical_blocks

    def get_num_free_gpu_blocks(self) -> int:
        """Free GPU blocks, evictable cached ones included (blocks)."""
        return self.gpu_allocator.num_free_blocks

    # -- blocks held outside the tables (the simulator's beam calendar) -----------------------
    def hold_blocks(self, num_blocks: int) -> list[int]:
        """Take ``num_blocks`` free GPU blocks for the caller, one reference each, in no table: the
        simulator's beam calendar (:mod:`paged.sim.beam_calendar`) holds a replayed beam group's blocks
        past its prompt this way while it does not apply the group's steps to its tables, so the free pool
        is the one the step-by-step run has. Give them back with :meth:`release_blocks` or
        :meth:`replace_tables`. O(num_blocks).

        Raises:
            OutOfBlocksError: if fewer blocks are free (nothing is taken).
        """
        self._version += 1
        return self.gpu_allocator.allocate_blocks(num_blocks)

    def release_blocks(self, blocks: list[int]) -> None:
        """Give back one reference to each block of ``blocks`` (taken with :meth:`hold_blocks`). O(blocks).

        Raises:
            ValueError: if a block is already free.
        """
        self._version += 1
        self.gpu_allocator.free_blocks(blocks)

    def replace_tables(self, tables: list[tuple[Sequence, list[int], int]], *, held: list[int] = (),
                       take: list[int] = ()) -> None:
        """Give each sequence of ``tables`` a new block table: ``(sequence, physical blocks in logical
        order, tokens)``. Every entry of a new table and each block of ``take`` take one reference (the
        latter the caller's, given back later with :meth:`release_blocks`), then each sequence's old table
        (if any) gives its references back, tail first, and each block of ``held`` gives back the one
        reference the caller held (:meth:`hold_blocks`). Nothing is allocated: the caller lays out blocks
        it or the old tables hold (the simulator's beam calendar writing out or putting aside the tables of
        replayed beam groups, §4.4). O(blocks).

        Raises:
            ValueError: if a block is free, or a table's tokens do not need exactly its blocks (nothing
                changes then).
        """
        bs = self.block_size
        for seq, blocks, num_tokens in tables:  # checked before any count changes
            if -(-num_tokens // bs) != len(blocks):
                raise ValueError(f"sequence {seq.seq_id}: {num_tokens} tokens need {-(-num_tokens // bs)} blocks "
                                 f"of {bs}, got {len(blocks)}")
        self._version += 1
        allocator = self.gpu_allocator
        allocator.incref_all(take)
        new = []
        for seq, blocks, num_tokens in tables:
            allocator.incref_all(blocks)
            new.append((seq, BlockTable.from_blocks(allocator, blocks, num_tokens)))
        block_tables = self.block_tables
        for seq, table in new:
            old = block_tables.get(seq.seq_id)
            block_tables[seq.seq_id] = table
            if old is not None:
                old.free()
        allocator.free_blocks(held)

    @property
    def num_used_slots(self) -> int:
        """Slots of the GPU blocks in use now, reserved prefixes included (tokens). O(1)."""
        allocator = self.gpu_allocator
        return (allocator.num_blocks - allocator.num_free_blocks) * self.block_size

    def blocks_held(self, seqs: list[Sequence]) -> tuple[int, int]:
        """``(distinct physical blocks, blocks without sharing)`` of the sequences' tables (§4.4, Fig. 15).

        O(blocks held). Sequences without a table (finished, swapped out) count nothing.
        """
        tables = [self.block_tables[s.seq_id] for s in seqs if s.seq_id in self.block_tables]
        distinct = {b for table in tables for b in table.physical_blocks}
        return len(distinct), sum(table.num_blocks for table in tables)

    def sharing_counts(self) -> tuple[int, int]:
        """``(GPU blocks the sequences hold, blocks they would hold without sharing)`` (§4.4, Fig. 15):
        :meth:`blocks_in_use`, and the sum of the GPU block tables' lengths. O(sequences)."""
        allocator = self.gpu_allocator
        logical = sum(t.num_blocks for t in self.block_tables.values() if t.allocator is allocator)
        return self.blocks_in_use(), logical

    def blocks_in_use(self) -> int:
        """GPU blocks the sequences hold now, the first of :meth:`sharing_counts` (§4.4, Fig. 15): blocks in
        use (taken with :meth:`hold_blocks` too; a free cached block is free) minus the reserved-prefix blocks
        no sequence uses now. O(reserved-prefix blocks)."""
        allocator = self.gpu_allocator
        unused_prefix = sum(1 for blocks in self._reserved.values() for b in blocks if allocator.ref_count(b) == 1)
        return allocator.num_blocks - allocator.num_free_blocks - unused_prefix

    # -- interrupts, resets, invariants --------------------------------------------------
    def commit_computed(self) -> None:
        """The iteration scheduled last has run: the prefix-cache entries of the blocks it filled hold
        written KV from now on (:meth:`paged.block.PrefixCachingBlockAllocator.commit`). O(1)."""
        if self._chains is not None:
            self.gpu_allocator.commit()

    def rollback_uncomputed(self) -> int:
        """The iteration scheduled last did not complete: forget the prefix-cache entries of the blocks
        whose KV it was to write, so no later request hits them; returns how many. O(entries)."""
        self._version += 1
        return self.gpu_allocator.rollback() if self._chains is not None else 0

    def reset_prefix_cache(self) -> bool:
        """Drop every cached block (vLLM's ``reset_prefix_cache``): True if the cache is now empty
        (also without prefix caching, where there is nothing to drop); False, changing nothing, while a
        sequence or a reserved prefix holds GPU blocks, as vLLM refuses while blocks are in use. O(blocks)."""
        if self._chains is None:
            return True
        if self.block_tables or self._reserved or not self.gpu_allocator.reset():
            return False
        self._version += 1
        return True

    def check_invariants(self) -> None:
        """Raise AssertionError unless the manager and its allocators agree: every block's reference
        count equals the block-table entries pointing at it (plus one per reserved-prefix pin), each
        table covers its tokens with the fewest blocks (:meth:`~paged.block.BlockTable.check_invariants`),
        and each allocator's own invariants hold (``check_invariants`` of
        :class:`~paged.block.BlockAllocator` and the prefix-caching allocator). O(blocks)."""
        allocators = [self.gpu_allocator] + ([self.cpu_allocator] if self.cpu_allocator is not None else [])
        expected = {id(a): [0] * a.num_blocks for a in allocators}
        for seq_id, table in self.block_tables.items():
            assert id(table.allocator) in expected, f"sequence {seq_id}'s table uses an unknown allocator"
            table.check_invariants()
            counts = expected[id(table.allocator)]
            for block in table.physical_blocks:
                counts[block] += 1
        for blocks in self._reserved.values():
            for block in blocks:
                expected[id(self.gpu_allocator)][block] += 1
        for allocator in allocators:
            allocator.check_invariants()
            want = expected[id(allocator)]
            have = [allocator.ref_count(b) for b in range(allocator.num_blocks)]
            bad = [(b, h, w) for b, (h, w) in enumerate(zip(have, want)) if h != w]
            assert not bad, f"(block, reference count, table entries) differ: {bad[:5]}"

    # -- swapping (§4.5) ----------------------------------------------------------------
    def _distinct_blocks(self, seqs: list[Sequence]) -> set[int]:
        return {b for seq in seqs for b in self.block_tables[seq.seq_id].physical_blocks}

    def can_swap_out(self, seq_group: SequenceGroup) -> bool:
        """True if the CPU swap space holds the group's distinct blocks."""
        if self.cpu_allocator is None:
            return False
        blocks = self._distinct_blocks(seq_group.get_seqs(SequenceStatus.RUNNING))
        return len(blocks) <= self.cpu_allocator.num_free_blocks

    def swap_out(self, seq_group: SequenceGroup) -> list[tuple[int, int]]:
        """Move the group's running sequences to CPU blocks; shared blocks move once.

        Returns:
            ``(gpu_block, cpu_block)`` pairs, each GPU block listed once.

        Raises:
            OutOfBlocksError: if the swap space is full (call :meth:`can_swap_out` first).
            RuntimeError: if the manager has no swap space.
        """
        if self.cpu_allocator is None:
            raise RuntimeError("swap_out needs CPU swap space (num_cpu_blocks > 0)")
        return self._move(seq_group.get_seqs(SequenceStatus.RUNNING), self.cpu_allocator)

    def can_swap_in(self, seq_group: SequenceGroup) -> AllocStatus:
        """Whether the group's swapped blocks (each shared block once) plus the blocks its next tokens
        need (:meth:`_append_blocks_needed`) fit in the free GPU blocks. No watermark: the group was
        running, and one that used every block must be able to come back. O(blocks)."""
        seqs = seq_group.get_seqs(SequenceStatus.SWAPPED)
        needed = len(self._distinct_blocks(seqs)) + self._append_blocks_needed(seqs, self.cpu_allocator)
        if needed > self.gpu_allocator.num_blocks:
            return AllocStatus.NEVER
        return AllocStatus.OK if needed <= self.gpu_allocator.num_free_blocks else AllocStatus.LATER

    def swap_in(self, seq_group: SequenceGroup) -> list[tuple[int, int]]:
        """Move the group's swapped sequences back to GPU blocks; shared blocks move once.

        Returns:
            ``(cpu_block, gpu_block)`` pairs, each CPU block listed once.
        """
        return self._move(seq_group.get_seqs(SequenceStatus.SWAPPED), self.gpu_allocator)

    def _move(self, seqs: list[Sequence], dst_allocator: BlockAllocator) -> list[tuple[int, int]]:
        """Re-home the sequences' tables onto ``dst_allocator``, keeping sharing intact."""
        self._version += 1
        needed = len(self._distinct_blocks(seqs))
        if needed > dst_allocator.num_free_blocks:
            raise OutOfBlocksError(f"moving needs {needed} blocks, {dst_allocator.num_free_blocks} free")
        mapping: dict[int, int] = {}
        for seq in seqs:
            old = self.block_tables[seq.seq_id]
            new_blocks = []
            for src in old.physical_blocks:
                dst = mapping.get(src)
                if dst is None:
                    dst = mapping[src] = dst_allocator.allocate()
                else:
                    dst_allocator.incref(dst)
                new_blocks.append(dst)
            self.block_tables[seq.seq_id] = BlockTable.from_blocks(dst_allocator, new_blocks, old.num_tokens)
            old.free()
        return list(mapping.items())

    # -- runs of decode iterations (the simulator's fast-forward) -------------------------
    def decode_run_limit(self, seqs: list[Sequence], max_iterations: int) -> int:
        """Most decode iterations (≤ ``max_iterations``) whose block-boundary crossings the free
        pool covers, every sequence gaining one token per iteration.

        A sequence with room for ``n`` tokens in whole blocks needs a new block at iterations
        ``j = first, first + block_size, ...`` (``first = ceil(n / bs) * bs - n + 1``). Sequences must
        write only into last blocks they hold alone (shared blocks are full). O(crossings).
        """
        if max_iterations <= 1:
            return max_iterations
        block_size = self.block_size
        events = []
        for seq in seqs:
            n = seq.num_tokens
            first = -(-n // block_size) * block_size - n + 1
            if first < max_iterations:
                events.extend(range(first, max_iterations, block_size))
        free = self.gpu_allocator.num_free_blocks
        if len(events) <= free:
            return max_iterations
        events.sort()
        return events[free]  # the iteration that would need block number free + 1: stop before it

    def decode_run_usage(self, seq_groups: list[SequenceGroup], num_tokens: list[int], k: int) -> MemoryUsage:
        """:meth:`memory_usage` summed over ``k`` decode iterations in closed form
        (:func:`paged.block.accounting.decode_run_usage`)."""
        return accounting.decode_run_usage(self, seq_groups, num_tokens, k)

    def request_slot_iterations(self, prompt_len: int, output_len: int) -> int:
        """Slots a lone request holds over its life (:func:`paged.block.accounting.request_slot_iterations`). O(1)."""
        return accounting.request_slot_iterations(self.block_size, prompt_len, output_len)

    # -- accounting (§3, Fig. 2) ------------------------------------------------------
    def memory_usage(self, seq_groups: list[SequenceGroup]) -> MemoryUsage:
        """Token states / reservation / internal / external slots of the GPU cache, shared blocks once
        (:func:`paged.block.accounting.memory_usage`)."""
        return accounting.memory_usage(self, seq_groups)
