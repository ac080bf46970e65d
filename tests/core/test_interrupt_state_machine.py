"""Interrupts, aborts and resets against the paged manager with prefix caching: a hypothesis state machine.

A fake executor "writes" each computed token into a fake KV store (one list of token ids per
physical block, GPU and CPU), applies copy-on-write and swap copies, and samples deterministic
tokens. After every rule: the manager's invariants hold, the blocks held are exactly those of the
live requests, and every block the prefix cache can hand out holds the tokens its key names (no
request can ever hit KV that was not written). An interrupt raises ``KeyboardInterrupt`` in the
middle of an iteration, after some of its KV was written; everything must be back afterwards.
"""

from __future__ import annotations

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from paged.block import PagedKVCacheManager
from paged.core import Scheduler
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus
from paged.core.serving_loop import ServingLoop
from support import TokenExecutor

BLOCK_SIZE = 4
NUM_BLOCKS = 24
NUM_CPU_BLOCKS = 24
VOCAB = 11
PREFIXES = ([1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 9, 9, 9, 9], [5, 5, 5, 5])


class Interrupted(KeyboardInterrupt):
    """What the fake executor raises mid-iteration."""


class FakeExecutor(TokenExecutor):
    """Writes computed tokens into a fake KV store, then samples as :class:`support.TokenExecutor` does."""

    def __init__(self, manager: PagedKVCacheManager) -> None:
        super().__init__(VOCAB)
        self.manager = manager
        self.gpu = [[None] * BLOCK_SIZE for _ in range(NUM_BLOCKS)]
        self.cpu = [[None] * BLOCK_SIZE for _ in range(NUM_CPU_BLOCKS)]
        self.fail_after: int | None = None  # raise after writing this many sequences' KV

    def _write(self, seq: Sequence, start: int) -> None:
        table = self.manager.get_block_table(seq)
        for pos in range(start, seq.num_tokens):
            self.gpu[table[pos // BLOCK_SIZE]][pos % BLOCK_SIZE] = seq.token_ids[pos]

    def execute(self, scheduler, outputs) -> bool:
        for src, dst in outputs.blocks_to_swap_out:
            self.cpu[dst] = list(self.gpu[src])
        for src, dst in outputs.blocks_to_swap_in:
            self.gpu[dst] = list(self.cpu[src])
        for src, dst in outputs.blocks_to_copy:
            self.gpu[dst] = list(self.gpu[src])
        if outputs.is_prefill:
            todo = [(seq, start) for seq, start in outputs.prefill_seqs if start < seq.num_tokens]
        else:
            todo = [(seq, seq.num_tokens - 1) for g in outputs.scheduled_seq_groups for seq in g.seqs
                    if seq.status is SequenceStatus.RUNNING]
        for i, (seq, start) in enumerate(todo):
            if self.fail_after is not None and i >= self.fail_after:
                self.fail_after = None
                raise Interrupted
            self._write(seq, start)
        if self.fail_after is not None:
            self.fail_after = None
            raise Interrupted
        return super().execute(scheduler, outputs)


class ServingMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.manager = PagedKVCacheManager(NUM_BLOCKS, BLOCK_SIZE, num_cpu_blocks=NUM_CPU_BLOCKS, watermark=0.0,
                                           enable_prefix_caching=True)
        self.executor = FakeExecutor(self.manager)
        self.next_id = 0
        self.preemption = "recompute"
        self._new_loop()

    def _new_loop(self) -> None:
        self.scheduler = Scheduler(self.manager, max_num_seqs=8, max_num_batched_tokens=64,
                                   preemption_mode=self.preemption)
        self.loop = ServingLoop(self.scheduler, self.executor, [])

    @rule(prefix=st.sampled_from(PREFIXES), tail=st.lists(st.integers(0, VOCAB - 1), max_size=5),
          output_len=st.integers(1, 9), n=st.sampled_from([1, 1, 2]))
    def add(self, prefix, tail, output_len, n):
        prompt = list(prefix) + tail
        seqs = []
        for _ in range(n):
            seqs.append(Sequence(self.next_id, len(prompt), token_ids=list(prompt)))
            self.next_id += 1
        self.scheduler.add_seq_group(SequenceGroup(self.next_id, self.executor.now, seqs, output_len))

    @precondition(lambda self: self.scheduler.has_unfinished_seqs())
    @rule()
    def step(self):
        self.loop.step()

    @precondition(lambda self: self.scheduler.has_unfinished_seqs())
    @rule(after=st.integers(0, 3))
    def interrupt(self, after):
        self.executor.fail_after = after
        try:
            self.loop.step()
        except Interrupted:
            pass
        self.executor.fail_after = None
        # Everything is back: no block in use on the GPU or in the swap space.
        assert self.manager.get_num_free_gpu_blocks() == NUM_BLOCKS
        assert self.manager.cpu_allocator.num_free_blocks == NUM_CPU_BLOCKS
        assert not self.scheduler.has_unfinished_seqs() and not self.loop.has_work
        self._new_loop()

    @precondition(lambda self: self.scheduler.has_unfinished_seqs())
    @rule(data=st.data())
    def abort(self, data):
        live = [g.request_id for g in (*self.scheduler.waiting, *self.scheduler.running, *self.scheduler.swapped)]
        request_id = data.draw(st.sampled_from(live))
        assert self.loop.abort_request(request_id)
        assert not self.loop.abort_request(request_id)  # a second abort is a no-op

    @rule()
    def reset(self):
        in_use = self.manager.get_num_free_gpu_blocks() < NUM_BLOCKS
        assert self.manager.reset_prefix_cache() is not in_use
        if not in_use:
            assert self.manager.gpu_allocator.num_cached_blocks == 0

    @precondition(lambda self: not self.scheduler.has_unfinished_seqs())
    @rule(mode=st.sampled_from(["recompute", "swap"]))
    def switch_preemption(self, mode):
        self.preemption = mode
        self._new_loop()

    @invariant()
    def consistent(self):
        self.manager.check_invariants()

    @invariant()
    def blocks_held_by_live_requests_only(self):
        live = [s for g in (*self.scheduler.waiting, *self.scheduler.running, *self.scheduler.swapped)
                for s in g.seqs if s.status is not SequenceStatus.FINISHED]
        assert set(self.manager.block_tables) <= {s.seq_id for s in live}

    @invariant()
    def cache_holds_written_kv_only(self):
        allocator = self.manager.gpu_allocator
        for bucket in allocator._cached.values():
            for block in bucket:
                tokens = allocator._key[block][1]
                assert tuple(self.executor.gpu[block]) == tokens, (
                    f"cached block {block} claims {tokens} but holds {self.executor.gpu[block]}")


ServingMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestServingMachine = ServingMachine.TestCase
