"""The paged KV cache manager: a block table for every sequence, blocks on demand (paper §4.2–§4.5).

:class:`PagedKVCacheManager` implements :class:`paged.core.KVCacheManager` with a :class:`~paged.block.BlockTable`
per sequence over a GPU and a CPU (swap) :class:`~paged.block.BlockAllocator`. A prefill takes
``ceil(tokens / block_size)`` blocks, a decode one per boundary crossed. Blocks are shared by forked sequences
(copy-on-write, §4.4); a new request's parallel samples (its prompt); a group preempted by recomputation (what it
shared before, so it fits again); swapping (each shared block moves once, §4.5); a reserved prefix
(``SequenceGroup.prefix_len``, pinned); and prefix caching (:mod:`paged.block.prefix_caching`).
:func:`paged.block.prefill_plan.plan_prefill` plans where a prefill's blocks come from.
"""

from __future__ import annotations

from collections import Counter

from paged.block import accounting
from paged.block.allocator import BlockAllocator, OutOfBlocksError
from paged.block.block_table import BlockTable
from paged.block.copy_on_write import copies_for_writers
from paged.block.prefill_plan import HIT, NEW, PREFIX, PrefillPlan, plan_prefill
from paged.block.prefix_caching import PrefixCachingBlockAllocator, hash_block_tokens
from paged.block.sequence_hashes import SequenceHashes
from paged.core.checks import as_positive_int
from paged.core.kv_cache_manager import AllocStatus, MemoryUsage
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus

__all__ = ["PagedKVCacheManager"]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class PagedKVCacheManager:
    """Paged KV cache manager (vLLM's ``BlockSpaceManager``), §4.2–§4.5 (module docstring).

    ``num_gpu_blocks`` of ``block_size`` token slots, ``num_cpu_blocks`` of swap space (0: none, and
    ``cpu_allocator`` None). ``watermark``: fraction of GPU blocks kept free when admitting a request, so running
    sequences can grow (swapped-out groups return without it). ``enable_prefix_caching`` needs token ids;
    ``hash_fn`` hashes its blocks. ``block_tables``: ``seq_id`` → :class:`~paged.block.BlockTable`. Raises
    ValueError on a bad block count, block size or watermark (not in [0, 1)).
    """

    def __init__(self, num_gpu_blocks: int, block_size: int, *, num_cpu_blocks: int = 0, watermark: float = 0.01,
                 enable_prefix_caching: bool = False, hash_fn=hash_block_tokens) -> None:
        if isinstance(watermark, bool) or not isinstance(watermark, (int, float)) or not 0.0 <= watermark < 1.0:
            raise ValueError(f"watermark must be a number in [0, 1), got {watermark!r}")
        num_gpu_blocks = as_positive_int(num_gpu_blocks, "num_gpu_blocks")
        if num_cpu_blocks != 0:  # 0: no swap space
            num_cpu_blocks = as_positive_int(num_cpu_blocks, "num_cpu_blocks (0 for no swap space)")
        if enable_prefix_caching:
            self.gpu_allocator: BlockAllocator = PrefixCachingBlockAllocator(num_gpu_blocks, block_size, hash_fn=hash_fn)
        else:
            self.gpu_allocator = self.allocator_class(num_gpu_blocks, block_size)
        self.cpu_allocator = self.allocator_class(num_cpu_blocks, block_size) if num_cpu_blocks else None
        self.block_size = block_size
        self.watermark_blocks = int(watermark * num_gpu_blocks)
        self.enable_prefix_caching = enable_prefix_caching
        self.block_tables: dict[int, BlockTable] = {}
        self._layouts: dict[int, list[int]] = {}  # seq_id -> its full blocks when preempted by recomputation
        self._reserved: dict[int, list[int]] = {}  # prefix_len -> pinned blocks of that reserved prefix
        self._chains = SequenceHashes(self.gpu_allocator) if enable_prefix_caching else None

    #: A fork shares the parent's blocks: no KV is copied (§4.4).
    fork_copies_kv = False
    #: The classes of the block tables and plain (not prefix-caching) allocators the manager makes (a subclass
    #: may make its own).
    block_table_class = BlockTable
    allocator_class = BlockAllocator

    @property
    def num_total_slots(self) -> int:
        """KV slots of the GPU cache (tokens)."""
        return self.gpu_allocator.num_blocks * self.block_size

    @property
    def shares_across_groups(self) -> bool:
        """True if blocks may be shared between requests (prefix caching, a reserved prefix)."""
        return self.enable_prefix_caching or bool(self._reserved)

    # -- admission (§4.5) ---------------------------------------------------------------
    def _plan(self, seq_group: SequenceGroup) -> PrefillPlan:
        return plan_prefill(seq_group, block_size=self.block_size, allocator=self.gpu_allocator,
                            layouts=self._layouts, reserved=self._reserved,
                            cache_hits=self._chains.cache_hits if self._chains else None)

    def _worst_case_blocks(self, seq_group: SequenceGroup) -> int:
        """Blocks the group holds at its final length, sharing only full prompt blocks. The last token's KV is
        never written (nothing reads it), so a sequence holds at most ``prompt_len + output_len - 1`` slots."""
        shared = seq_group.prompt_len // self.block_size
        final_blocks = _cdiv(seq_group.prompt_len + seq_group.output_len - 1, self.block_size)
        return shared + seq_group.peak_num_seqs * (final_blocks - shared)

    def _check_allocatable(self, seq_group: SequenceGroup) -> None:
        """Refuse, before anything changes, a group with no waiting sequence or whose waiting sequences
        already hold blocks (a second table would leak the first). O(sequences). Raises ValueError."""
        waiting = seq_group.get_seqs(SequenceStatus.WAITING)
        if not waiting:
            raise ValueError(f"request {seq_group.request_id} has no waiting sequence to allocate blocks for")
        held = [seq.seq_id for seq in waiting if seq.seq_id in self.block_tables]
        if held:
            raise ValueError(f"sequence(s) {held} of request {seq_group.request_id} already hold blocks: "
                             f"free them (or preempt the group) before allocating again")

    @staticmethod
    def _no_table_error(seq: Sequence) -> KeyError:
        return KeyError(f"sequence {seq.seq_id} holds no blocks: allocate its group first")

    def never_reason(self, seq_group: SequenceGroup) -> str:
        """Why :meth:`can_allocate` says NEVER for ``seq_group``: the numbers that do not fit."""
        usable = self.gpu_allocator.num_blocks - self.watermark_blocks
        return (f"at its final length its {seq_group.peak_num_seqs} sequence(s) need up to "
                f"{max(self._worst_case_blocks(seq_group), self._plan(seq_group).total)} blocks of "
                f"{self.block_size} tokens, but the cache has {usable} usable blocks "
                f"({self.gpu_allocator.num_blocks} minus a watermark of {self.watermark_blocks})")

    def prefill_tokens(self, seq_group: SequenceGroup) -> int:
        """Tokens the waiting sequences' prefill computes (shared blocks once, cached ones not). O(prompt blocks)."""
        return self._plan(seq_group).tokens

    def can_allocate(self, seq_group: SequenceGroup) -> AllocStatus:
        """OK if the prefill fits above the watermark, LATER if it must wait, NEVER if the request could not run
        alone in an empty cache (its prefill, or its ``peak_num_seqs`` sequences at final length sharing full
        prompt blocks, exceed the blocks above the watermark). O(prompt blocks)."""
        usable = self.gpu_allocator.num_blocks - self.watermark_blocks
        plan = self._plan(seq_group)
        if plan.total > usable or self._worst_case_blocks(seq_group) > usable:
            return AllocStatus.NEVER
        if self.gpu_allocator.num_free_blocks - plan.needed >= self.watermark_blocks:
            return AllocStatus.OK
        return AllocStatus.LATER

    def allocate(self, seq_group: SequenceGroup) -> list[int]:
        """Block tables for the group's waiting sequences, as planned: reused blocks first (so no allocation
        evicts one), then new and sibling-shared ones; new samples fork the first sequence. Returns each waiting
        sequence's first token to compute. O(blocks). Raises OutOfBlocksError without a successful
        :meth:`can_allocate`, ValueError if a waiting sequence already holds blocks."""
        self._check_allocatable(seq_group)
        allocator = self.gpu_allocator
        plan = self._plan(seq_group)
        if plan.needed > allocator.num_free_blocks:
            raise OutOfBlocksError(f"the prefill needs {plan.needed} free blocks, {allocator.num_free_blocks} are free")
        if plan.reserve:  # the reserved prefix's first use: its blocks are pinned from now on
            self._reserved[seq_group.prefix_len] = [allocator.allocate() for _ in range(plan.reserve)]
        pinned = self._reserved.get(seq_group.prefix_len, [])
        chosen: list[list[int]] = []
        for sources in plan.sources:  # the blocks reused from the prefix or the cache
            blocks = []
            for kind, value in sources:
                if kind == PREFIX:
                    allocator.incref(pinned[value])
                    blocks.append(pinned[value])
                elif kind == HIT:
                    allocator.reuse(value)
                    blocks.append(value)
                else:
                    blocks.append(None)
            chosen.append(blocks)
        for j, sources in enumerate(plan.sources):  # then the new ones, and those shared with a sibling
            for i, (kind, value) in enumerate(sources):
                if kind == NEW:
                    chosen[j][i] = allocator.allocate()
                elif chosen[j][i] is None:  # SIBLING: the block of sequence `value` at the same index
                    chosen[j][i] = chosen[value][i]
                    allocator.incref(chosen[j][i])
        computed = plan.seqs[:len(plan.sources)]
        for seq, blocks, hit_cids in zip(computed, chosen, plan.hit_cids):
            table = self.block_table_class(allocator, blocks, seq.num_tokens)
            self.block_tables[seq.seq_id] = table
            self._layouts.pop(seq.seq_id, None)
            if self._chains is not None and not seq_group.prefix_len:
                self._chains.start(seq, hit_cids)
                self._chains.register_full_blocks(seq, table)
        for sample in plan.seqs[len(plan.sources):]:  # new samples share the first sequence's prompt
            self.fork(computed[0], sample)
        return plan.starts

    # -- decode (§4.3, §4.4) --------------------------------------------------------------
    def _append_blocks_needed(self, seq_group: SequenceGroup, status: SequenceStatus, allocator: BlockAllocator) -> int:
        """Free blocks to grow the group's ``status`` sequences to ``num_tokens`` (a shared block's last writer needs
        no copy). O(sequences)."""
        tables, seqs = self.block_tables, seq_group.seqs
        needed = 0
        for seq in seqs:  # not get_seqs: this runs for every group on every step
            if seq.status is status:
                table = tables[seq.seq_id]
                needed += table.num_new_blocks(seq.num_tokens - table.num_tokens)
        if len(seqs) > 1:  # only forked sequences can share a last block with each other
            writers = Counter(tables[seq.seq_id].last_block for seq in seqs
                              if seq.status is status and seq.num_tokens > tables[seq.seq_id].num_tokens
                              and tables[seq.seq_id].needs_copy_on_write())
            for block, num_writers in writers.items():
                needed -= num_writers - copies_for_writers(allocator.ref_count(block), num_writers)
        return needed

    def can_append_slots(self, seq_group: SequenceGroup) -> bool:
        """True if every running sequence can get its next slot, copy-on-write included. O(sequences)."""
        needed = self._append_blocks_needed(seq_group, SequenceStatus.RUNNING, self.gpu_allocator)
        return needed == 0 or needed <= self.gpu_allocator.num_free_blocks  # most steps take no block

    def append_slots(self, seq: Sequence) -> list[tuple[int, int]]:
        """Room for ``seq.num_tokens`` tokens; returns the copy-on-write pairs (§4.4), registering filled blocks with
        prefix caching. O(new blocks). Raises OutOfBlocksError without a successful :meth:`can_append_slots`,
        KeyError if the sequence holds no blocks."""
        try:
            table = self.block_tables[seq.seq_id]
        except KeyError:
            raise self._no_table_error(seq) from None
        copies = table.append_tokens(seq.num_tokens - table.num_tokens)
        if self._chains is not None:
            self._chains.register_full_blocks(seq, table)
        return copies

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """The child shares every block of the parent (§4.4); allocates nothing. O(blocks). Raises KeyError if the
        parent holds no blocks, ValueError if the child already does (they would leak)."""
        if child.seq_id in self.block_tables:
            raise ValueError(f"sequence {child.seq_id} already holds blocks: free it before forking into it")
        try:
            parent_table = self.block_tables[parent.seq_id]
        except KeyError:
            raise self._no_table_error(parent) from None
        self.block_tables[child.seq_id] = parent_table.fork()
        if self._chains is not None:
            self._chains.fork(parent, child)

    def free(self, seq: Sequence) -> None:
        """Drop the sequence's block table (each block loses a reference, tail first). Unknown: no-op."""
        table = self.block_tables.pop(seq.seq_id, None)
        if table is not None:
            table.free()
        self._layouts.pop(seq.seq_id, None)
        if self._chains is not None:
            self._chains.drop(seq)

    def free_for_recompute(self, seq_group: SequenceGroup) -> None:
        """Free the running tables (recomputation, §4.5), noting what :meth:`allocate` must share again. O(blocks)."""
        for seq in seq_group.get_seqs(SequenceStatus.RUNNING):
            table = self.block_tables.pop(seq.seq_id)
            if len(seq_group.seqs) > 1:
                self._layouts[seq.seq_id] = table.physical_blocks[: table.num_tokens // self.block_size]
            table.free()

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
        """Move the group's running sequences to CPU blocks, each shared block once; returns ``(gpu, cpu)`` block
        pairs. Raises OutOfBlocksError if the swap space is full, RuntimeError if there is none."""
        if self.cpu_allocator is None:
            raise RuntimeError("swap_out needs CPU swap space (num_cpu_blocks > 0)")
        return self._move(seq_group.get_seqs(SequenceStatus.RUNNING), self.cpu_allocator)

    def can_swap_in(self, seq_group: SequenceGroup) -> AllocStatus:
        """OK if the swapped blocks plus the next tokens' blocks fit in the free GPU blocks; no watermark. O(blocks)."""
        seqs = seq_group.get_seqs(SequenceStatus.SWAPPED)
        needed = len(self._distinct_blocks(seqs)) + self._append_blocks_needed(seq_group, SequenceStatus.SWAPPED,
                                                                               self.cpu_allocator)
        if needed > self.gpu_allocator.num_blocks:
            return AllocStatus.NEVER
        return AllocStatus.OK if needed <= self.gpu_allocator.num_free_blocks else AllocStatus.LATER

    def swap_in(self, seq_group: SequenceGroup) -> list[tuple[int, int]]:
        """Move the group's swapped sequences back to GPU blocks, each shared one once; returns ``(cpu, gpu)`` pairs."""
        return self._move(seq_group.get_seqs(SequenceStatus.SWAPPED), self.gpu_allocator)

    def _move(self, seqs: list[Sequence], dst_allocator: BlockAllocator) -> list[tuple[int, int]]:
        """Re-home the sequences' tables onto ``dst_allocator``, keeping their sharing. O(blocks)."""
        needed = len(self._distinct_blocks(seqs))
        if needed > dst_allocator.num_free_blocks:
            raise OutOfBlocksError(f"moving needs {needed} blocks, {dst_allocator.num_free_blocks} free")
        mapping: dict[int, int] = {}  # source block -> its copy
        for seq in seqs:
            old = self.block_tables[seq.seq_id]
            new_blocks = []
            for src in old.physical_blocks:
                if src in mapping:
                    dst_allocator.incref(mapping[src])
                else:
                    mapping[src] = dst_allocator.allocate()
                new_blocks.append(mapping[src])
            # validate=False: each block was just taken or referenced, for as many tokens as before
            self.block_tables[seq.seq_id] = self.block_table_class(dst_allocator, new_blocks, old.num_tokens,
                                                                   validate=False)
            old.free()
        return list(mapping.items())

    # -- reading the cache ------------------------------------------------------------------
    def get_block_table(self, seq: Sequence) -> list[int]:
        """Physical block ids of the sequence, in logical order. O(blocks). Raises KeyError if it holds none."""
        try:
            return self.block_tables[seq.seq_id].physical_blocks
        except KeyError:
            raise self._no_table_error(seq) from None

    def get_num_free_gpu_blocks(self) -> int:
        """Free GPU blocks, evictable cached ones included (blocks)."""
        return self.gpu_allocator.num_free_blocks

    @property
    def num_used_slots(self) -> int:
        """Slots of the GPU blocks in use now, reserved prefixes included (tokens). O(1)."""
        return (self.gpu_allocator.num_blocks - self.gpu_allocator.num_free_blocks) * self.block_size

    def blocks_held(self, seqs: list[Sequence]) -> tuple[int, int]:
        """``(distinct blocks, blocks without sharing)`` of the sequences holding a table (§4.4, Fig. 15). O(blocks)."""
        tables = [self.block_tables[s.seq_id] for s in seqs if s.seq_id in self.block_tables]
        distinct = {b for table in tables for b in table.physical_blocks}
        return len(distinct), sum(table.num_blocks for table in tables)

    def blocks_in_use(self) -> int:
        """GPU blocks in use, less reserved-prefix blocks no sequence uses (Fig. 15). O(reserved-prefix blocks)."""
        allocator = self.gpu_allocator
        unused_prefix = sum(allocator.ref_count(b) == 1 for blocks in self._reserved.values() for b in blocks)
        return allocator.num_blocks - allocator.num_free_blocks - unused_prefix

    def sharing_counts(self) -> tuple[int, int]:
        """``(GPU blocks the sequences hold, blocks they would hold without sharing)`` (§4.4, Fig. 15). O(sequences)."""
        logical = sum(t.num_blocks for t in self.block_tables.values() if t.allocator is self.gpu_allocator)
        return self.blocks_in_use(), logical

    def memory_usage(self, seq_groups: list[SequenceGroup]) -> MemoryUsage:
        """Token states / reservation / internal / external slots (§3, Fig. 2; :mod:`paged.block.accounting`)."""
        return accounting.memory_usage(self, seq_groups)

    # -- interrupts, resets, invariants --------------------------------------------------
    def commit_computed(self) -> None:
        """The last scheduled iteration ran: the prefix-cache entries of the blocks it filled hold KV. O(1)."""
        if self._chains is not None:
            self.gpu_allocator.commit()

    def rollback_uncomputed(self) -> int:
        """The last scheduled iteration did not complete: recount every block from the tables held and forget the
        prefix-cache entries of blocks it was to write; returns how many entries were forgotten. O(blocks)."""
        for allocator, counts in self._table_counts().items():
            allocator.recount(counts)  # an interrupted free, fork or growth leaves its counts half-changed
        return self.gpu_allocator.rollback() if self._chains is not None else 0

    def _table_counts(self) -> dict[BlockAllocator, list[int]]:
        """Per allocator, each block's table entries plus reserved-prefix pins. O(blocks)."""
        allocators = [self.gpu_allocator] + ([self.cpu_allocator] if self.cpu_allocator is not None else [])
        counts = {allocator: [0] * allocator.num_blocks for allocator in allocators}
        for seq_id, table in self.block_tables.items():
            assert table.allocator in counts, f"sequence {seq_id}'s table uses an unknown allocator"
            held = counts[table.allocator]
            for block in table.physical_blocks:
                held[block] += 1
        for blocks in self._reserved.values():
            for block in blocks:
                counts[self.gpu_allocator][block] += 1
        return counts

    def reset_prefix_cache(self) -> bool:
        """Drop every cached block (vLLM's ``reset_prefix_cache``): True if the cache is now empty; False, changing
        nothing, while a sequence or a reserved prefix holds GPU blocks. O(blocks)."""
        if self._chains is None:
            return True
        return not self.block_tables and not self._reserved and self.gpu_allocator.reset()

    def check_invariants(self) -> None:
        """Assert that each count equals its table entries plus reserved-prefix pins, and every table's and
        allocator's own invariants hold. O(blocks)."""
        for table in self.block_tables.values():
            table.check_invariants()
        for allocator, expected in self._table_counts().items():
            allocator.check_invariants()
            have = [allocator.ref_count(b) for b in range(allocator.num_blocks)]
            bad = [(b, h, w) for b, (h, w) in enumerate(zip(have, expected)) if h != w]
            assert not bad, f"(block, reference count, table entries) differ: {bad[:5]}"
