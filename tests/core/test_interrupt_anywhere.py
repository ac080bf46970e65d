"""Ctrl-C on any line of the block manager or the scheduler during an iteration loses nothing.

``sys.settrace`` raises ``KeyboardInterrupt`` at the k-th line executed in ``paged/block`` or
``paged/core`` below :meth:`ServingLoop.step`, for k spread over a whole serving run (prefills,
copy-on-write, preemption by swapping or recomputation, prefix-cache hits and evictions). After
each, the loop's clean-up must leave every GPU and CPU block free, the manager's invariants holding
and no request held, however far the interrupted operation had got.
"""

from __future__ import annotations

import random

import pytest

from paged.block import PagedKVCacheManager
from paged.core import Scheduler
from paged.core.sequence import Sequence, SequenceGroup
from paged.core.serving_loop import ServingLoop
from support import step_until_interrupted

from .test_interrupt_state_machine import BLOCK_SIZE, NUM_BLOCKS, NUM_CPU_BLOCKS, PREFIXES, VOCAB, FakeExecutor

STRIDE = 53  # interrupt at every 53rd line: every operation is hit at several points


def serve_until_interrupted(mode: str, caching: bool, k: int):
    """Serve eight random requests (1–3 samples each), interrupting at the k-th line; None if the run ends first."""
    manager = PagedKVCacheManager(NUM_BLOCKS, BLOCK_SIZE, num_cpu_blocks=NUM_CPU_BLOCKS, watermark=0.0,
                                  enable_prefix_caching=caching)
    scheduler = Scheduler(manager, max_num_seqs=8, max_num_batched_tokens=64, preemption_mode=mode)
    loop = ServingLoop(scheduler, FakeExecutor(manager), [])
    rng, next_id = random.Random(0), 0
    for request_id in range(8):
        prompt = list(rng.choice(PREFIXES)) + [rng.randrange(VOCAB) for _ in range(rng.randrange(5))]
        seqs = [Sequence(next_id + i, len(prompt), token_ids=list(prompt)) for i in range(rng.choice([1, 2, 3]))]
        next_id += len(seqs)
        scheduler.add_seq_group(SequenceGroup(request_id, 0.0, seqs, rng.randrange(1, 12)))
    return (manager, scheduler, loop) if step_until_interrupted(loop, scheduler, k, ("/paged/block/", "/paged/core/")) \
        else None


@pytest.mark.parametrize("caching", [False, True], ids=["plain", "prefix-caching"])
@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_an_interrupt_on_any_line_gives_every_block_back(mode, caching):
    interrupted = 0
    for k in range(1, 10**6, STRIDE):
        run = serve_until_interrupted(mode, caching, k)
        if run is None:  # k is past the last line of the run
            break
        manager, scheduler, loop = run
        interrupted += 1
        manager.check_invariants()
        assert manager.get_num_free_gpu_blocks() == NUM_BLOCKS, f"line {k}: GPU blocks still held"
        assert manager.cpu_allocator.num_free_blocks == NUM_CPU_BLOCKS, f"line {k}: CPU blocks still held"
        assert not scheduler.has_unfinished_seqs() and not loop.has_work
    assert interrupted > 100
