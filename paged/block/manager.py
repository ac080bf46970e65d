"""The paged KV cache manager: block tables for every sequence, on demand (paper §4.2–§4.5).

:class:`PagedKVCacheManager` implements :class:`paged.core.KVCacheManager` with one
:class:`BlockTable` per running sequence over a GPU :class:`BlockAllocator`, and a second allocator
for the CPU swap space. A prefill takes ``ceil(num_tokens / block_size)`` blocks; a decode takes a
new block only when its token crosses a block boundary; forked sequences share blocks and
copy-on-write the shared last block.
"""

from __future__ import annotations

from paged.block.allocator import BlockAllocator, OutOfBlocksError
from paged.block.block_table import BlockTable
from paged.core.kv_cache_manager import AllocStatus, MemoryUsage, split_reserved
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus

__all__ = ["PagedKVCacheManager"]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def ceil_sum(x: int, block_size: int) -> int:
    """``sum(ceil(m / block_size) for m in 1..x)`` in O(1) (blocks), for ``x ≥ 0``."""
    q, r = divmod(x, block_size)
    return block_size * q * (q + 1) // 2 + r * (q + 1)


class PagedKVCacheManager:
    """Paged KV cache manager (vLLM's ``BlockSpaceManager``), §4.2–§4.5.

    Args:
        num_gpu_blocks: physical blocks of GPU KV cache (blocks).
        block_size: token slots per block (tokens).
        num_cpu_blocks: blocks of CPU swap space (blocks); 0 disables swapping.
        watermark: fraction of GPU blocks kept free at admission so running sequences can grow
            without an immediate preemption (vLLM's default is 0.01).

    Raises:
        ValueError: on a non-positive block count or block size, or a watermark outside [0, 1).
    """

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        *,
        num_cpu_blocks: int = 0,
        watermark: float = 0.01,
    ) -> None:
        if not 0.0 <= watermark < 1.0:
            raise ValueError(f"watermark must be in [0, 1), got {watermark}")
        self.gpu_allocator = BlockAllocator(num_gpu_blocks, block_size)
        self.cpu_allocator = BlockAllocator(num_cpu_blocks, block_size) if num_cpu_blocks else None
        self.block_size = block_size
        self.num_total_slots = num_gpu_blocks * block_size
        self.watermark_blocks = int(watermark * num_gpu_blocks)
        self.block_tables: dict[int, BlockTable] = {}

    # -- admission --------------------------------------------------------------------
    def _worst_case_blocks(self, seq_group: SequenceGroup) -> int:
        """Blocks the group holds at its final length if only full prompt blocks stay shared."""
        shared = seq_group.prompt_len // self.block_size
        final_blocks = _cdiv(seq_group.prompt_len + seq_group.output_len, self.block_size)
        return shared + seq_group.peak_num_seqs * (final_blocks - shared)

    def never_reason(self, seq_group: SequenceGroup) -> str:
        """Why :meth:`can_allocate` says NEVER for ``seq_group``: the numbers that do not fit."""
        usable = self.gpu_allocator.num_blocks - self.watermark_blocks
        return (f"at its final length its {seq_group.peak_num_seqs} sequence(s) need up to "
                f"{max(self._worst_case_blocks(seq_group), self._prefill_blocks(seq_group))} blocks of "
                f"{self.block_size} tokens, but the cache has {usable} usable blocks "
                f"({self.gpu_allocator.num_blocks} minus a watermark of {self.watermark_blocks})")

    def _prefill_blocks(self, seq_group: SequenceGroup) -> int:
        """Blocks a prefill of the group's waiting sequences takes (a shared prompt once)."""
        waiting = seq_group.get_seqs(SequenceStatus.WAITING)
        if all(seq.num_generated == 0 for seq in waiting):
            return _cdiv(waiting[0].num_tokens, self.block_size) if waiting else 0
        return sum(_cdiv(seq.num_tokens, self.block_size) for seq in waiting)

    def can_allocate(self, seq_group: SequenceGroup) -> AllocStatus:
        """OK if the prefill fits above the watermark; LATER if it must wait for memory.

        NEVER if the request could not run even alone in an empty cache: its prefill, or its
        sequences at their final length (prompt + output; full prompt blocks shared; beam search:
        ``seq_group.peak_num_seqs`` candidates), need more blocks than the cache has above the
        watermark.
        """
        needed = self._prefill_blocks(seq_group)
        usable = self.gpu_allocator.num_blocks - self.watermark_blocks
        if needed > usable or self._worst_case_blocks(seq_group) > usable:
            return AllocStatus.NEVER
        if self.gpu_allocator.num_free_blocks - needed >= self.watermark_blocks:
            return AllocStatus.OK
        return AllocStatus.LATER

    def allocate(self, seq_group: SequenceGroup) -> None:
        """Block tables for the group's waiting sequences; samples of one prompt share it.

        Raises:
            OutOfBlocksError: if called without a successful :meth:`can_allocate`.
        """
        waiting = seq_group.get_seqs(SequenceStatus.WAITING)
        if waiting and all(seq.num_generated == 0 for seq in waiting):
            table = BlockTable(self.gpu_allocator)
            table.append_tokens(waiting[0].num_tokens)
            self.block_tables[waiting[0].seq_id] = table
            for seq in waiting[1:]:
                self.block_tables[seq.seq_id] = table.fork()
            return
        for seq in waiting:  # recomputation of sequences that already diverged
            table = BlockTable(self.gpu_allocator)
            table.append_tokens(seq.num_tokens)
            self.block_tables[seq.seq_id] = table

    # -- decode -----------------------------------------------------------------------
    def can_append_slots(self, seq_group: SequenceGroup) -> bool:
        """True if every running sequence of the group can get its next slot (incl. CoW)."""
        needed = 0
        for seq in seq_group.seqs:
            if seq.status is SequenceStatus.RUNNING:
                table = self.block_tables[seq.seq_id]
                needed += table.num_new_blocks(seq.num_tokens - table.num_tokens)
        return needed <= self.gpu_allocator.num_free_blocks

    def append_slots(self, seq: Sequence) -> list[tuple[int, int]]:
        """Room for ``seq.num_tokens`` tokens; copy-on-write pairs to apply (§4.4).

        Raises:
            OutOfBlocksError: if called without a successful :meth:`can_append_slots`.
        """
        table = self.block_tables[seq.seq_id]
        return table.append_tokens(seq.num_tokens - table.num_tokens)

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """The child shares every block of the parent (§4.4); allocates nothing."""
        self.block_tables[child.seq_id] = self.block_tables[parent.seq_id].fork()

    def free(self, seq: Sequence) -> None:
        """Drop the sequence's block table (each block's count −1). Unknown sequences: no-op."""
        table = self.block_tables.pop(seq.seq_id, None)
        if table is not None:
            table.free()

    def get_block_table(self, seq: Sequence) -> list[int]:
        """Physical block ids of the sequence, in logical order. O(blocks).

        Raises:
            KeyError: if the sequence holds no blocks.
        """
        return self.block_tables[seq.seq_id].physical_blocks

    def get_num_free_gpu_blocks(self) -> int:
        """Free GPU blocks (blocks)."""
        return self.gpu_allocator.num_free_blocks

    @property
    def num_used_slots(self) -> int:
        """Slots of the GPU blocks in use now (tokens). O(1)."""
        allocator = self.gpu_allocator
        return (allocator.num_blocks - allocator.num_free_blocks) * self.block_size

    def blocks_held(self, seqs: list[Sequence]) -> tuple[int, int]:
        """``(distinct physical blocks, blocks without sharing)`` of the sequences' tables (§4.4, Fig. 15).

        O(blocks held). Sequences without a table (finished, swapped out) count nothing.
        """
        tables = [self.block_tables[s.seq_id] for s in seqs if s.seq_id in self.block_tables]
        distinct = {b for table in tables for b in table.physical_blocks}
        return len(distinct), sum(table.num_blocks for table in tables)

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
        """Whether the group's swapped blocks (plus one to grow each) fit on the GPU."""
        seqs = seq_group.get_seqs(SequenceStatus.SWAPPED)
        needed = len(self._distinct_blocks(seqs)) + len(seqs)
        if needed > self.gpu_allocator.num_blocks:
            return AllocStatus.NEVER
        if self.gpu_allocator.num_free_blocks - needed >= self.watermark_blocks:
            return AllocStatus.OK
        return AllocStatus.LATER

    def swap_in(self, seq_group: SequenceGroup) -> list[tuple[int, int]]:
        """Move the group's swapped sequences back to GPU blocks; shared blocks move once.

        Returns:
            ``(cpu_block, gpu_block)`` pairs, each CPU block listed once.
        """
        return self._move(seq_group.get_seqs(SequenceStatus.SWAPPED), self.gpu_allocator)

    def _move(self, seqs: list[Sequence], dst_allocator: BlockAllocator) -> list[tuple[int, int]]:
        """Re-home the sequences' tables onto ``dst_allocator``, keeping sharing intact."""
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
        hold private last blocks (one running sequence per group). O(crossings).
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
        """:meth:`memory_usage` summed over ``k`` decode iterations in closed form (slot-iterations).

        Group ``i`` has one running sequence holding ``n = num_tokens[i] + j`` tokens at iteration
        ``j`` in ``ceil(n / bs)`` blocks. O(groups).
        """
        used = reserved = internal = 0
        tri = k * (k - 1) // 2
        bs = self.block_size
        for group, n in zip(seq_groups, num_tokens):
            final_len = group.prompt_len + group.output_len
            used_i = k * n + tri
            alloc_sum = bs * (ceil_sum(n + k - 1, bs) - ceil_sum(n - 1, bs))
            last_alloc = -(-final_len // bs) * bs  # slots once the final block is allocated
            count = max(0, n + k - 1 - max(n - 1, last_alloc - bs))  # iterations in that block
            excess = count * (last_alloc - final_len)  # allocated slots beyond final_len
            used, reserved, internal = used + used_i, reserved + alloc_sum - excess - used_i, internal + excess
        total = k * self.num_total_slots
        return MemoryUsage(used, reserved, internal, total - used - reserved - internal, total)

    def request_slot_iterations(self, prompt_len: int, output_len: int) -> int:
        """Slots a lone request holds over the ``output_len`` iterations that generate its tokens:
        ``ceil((prompt_len + j) / bs) × bs`` at the iteration that produces token ``j + 1``. O(1)."""
        bs = self.block_size
        return bs * (ceil_sum(prompt_len + output_len - 1, bs) - ceil_sum(prompt_len - 1, bs))

    # -- accounting (§3, Fig. 2) ------------------------------------------------------
    def memory_usage(self, seq_groups: list[SequenceGroup]) -> MemoryUsage:
        """Token states / reservation / internal / external slots of the GPU cache.

        Per sequence: it holds ``num_blocks × block_size`` slots, ``num_tokens`` of them hold
        tokens; of the rest, those it will fill before reaching ``prompt_len + output_len``
        tokens are reservation, the others internal fragmentation. Blocks shared by a group's
        sequences are counted once. Everything else (free blocks) is external & other.
        """
        block_size = self.block_size
        used = reserved = internal = 0
        for group in seq_groups:
            final_len = group.prompt_len + group.output_len
            seqs = [s for s in group.seqs if s.seq_id in self.block_tables and s.status is SequenceStatus.RUNNING]
            if len(seqs) == 1:
                table = self.block_tables[seqs[0].seq_id]
                n = table.num_tokens
                r, i = split_reserved(n, table.num_blocks * block_size, final_len)
                used, reserved, internal = used + n, reserved + r, internal + i
                continue
            filled: dict[int, tuple[int, int]] = {}  # block -> (tokens in it, slots to be filled)
            for seq in seqs:
                table = self.block_tables[seq.seq_id]
                n = table.num_tokens
                for idx, block in enumerate(table.physical_blocks):
                    start = idx * block_size
                    now = min(block_size, n - start)
                    later = min(block_size, max(final_len - start, 0))
                    old = filled.get(block, (0, 0))
                    filled[block] = (max(old[0], now), max(old[1], later))
            for now, later in filled.values():
                used += now
                reserved += max(later - now, 0)
                internal += block_size - max(later, now)
        total = self.num_total_slots
        return MemoryUsage(used, reserved, internal, total - used - reserved - internal, total)
