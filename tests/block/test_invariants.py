"""Hypothesis stateful test: allocator and block-table invariants under random operations.

Invariants checked after every step:
* free blocks + distinct referenced blocks = total blocks;
* each block's reference count = the number of live tables holding it;
* a table never writes into a block whose count is above 1 (every block an append wrote into
  has count 1 right after the append);
* after every table is freed, every block is free.
"""

from collections import Counter

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from paged import BlockAllocator, BlockTable, OutOfBlocksError

NUM_BLOCKS = 12


class BlockTables(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.block_size = 4
        self.alloc = BlockAllocator(NUM_BLOCKS, self.block_size)
        self.tables: list[BlockTable] = []

    @rule(n=st.integers(0, 20))
    def new_table(self, n):
        table = BlockTable(self.alloc)
        try:
            table.append_tokens(n)
        except OutOfBlocksError:
            assert table.num_tokens == 0 and table.num_blocks == 0
        self.tables.append(table)

    @precondition(lambda self: self.tables)
    @rule(i=st.integers(0, 1000), n=st.integers(0, 13))
    def append(self, i, n):
        table = self.tables[i % len(self.tables)]
        before_tokens, before_blocks = table.num_tokens, table.physical_blocks
        before_free = self.alloc.num_free_blocks
        try:
            copies = table.append_tokens(n)
        except OutOfBlocksError:
            assert table.num_tokens == before_tokens
            assert table.physical_blocks == before_blocks
            assert self.alloc.num_free_blocks == before_free
            return
        assert table.num_tokens == before_tokens + n
        # blocks that received the new tokens: from the one holding token `before_tokens`
        first = before_tokens // self.block_size
        written = table.physical_blocks[first:] if n else []
        for block in written:
            assert self.alloc.ref_count(block) == 1, "wrote into a shared block"
        for src, dst in copies:
            assert src == before_blocks[-1] and dst == table.physical_blocks[first]

    @precondition(lambda self: self.tables)
    @rule(i=st.integers(0, 1000))
    def fork(self, i):
        parent = self.tables[i % len(self.tables)]
        free = self.alloc.num_free_blocks
        child = parent.fork()
        assert self.alloc.num_free_blocks == free
        assert child.physical_blocks == parent.physical_blocks
        self.tables.append(child)

    @precondition(lambda self: self.tables)
    @rule(i=st.integers(0, 1000))
    def free(self, i):
        table = self.tables.pop(i % len(self.tables))
        table.free()

    @invariant()
    def counts_match_tables(self):
        held = Counter(b for t in self.tables for b in t.physical_blocks)
        for block in range(NUM_BLOCKS):
            assert self.alloc.ref_count(block) == held.get(block, 0)
        assert self.alloc.num_free_blocks + len(held) == NUM_BLOCKS

    @invariant()
    def blocks_match_tokens(self):
        for t in self.tables:
            assert t.num_blocks == -(-t.num_tokens // self.block_size)

    def teardown(self):
        for t in self.tables:
            t.free()
        assert self.alloc.num_free_blocks == NUM_BLOCKS
        assert all(self.alloc.ref_count(b) == 0 for b in range(NUM_BLOCKS))


BlockTables.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestBlockTables = BlockTables.TestCase
