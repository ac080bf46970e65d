"""Ctrl-C on any line of the Orca (contiguous) manager or the scheduler during an iteration loses no slot.

As ``tests/core/test_interrupt_anywhere.py`` does for the paged manager: ``sys.settrace`` raises
``KeyboardInterrupt`` at the k-th line executed in ``paged/contiguous`` or ``paged/core`` below
:meth:`ServingLoop.step`, for k spread over a run of requests with one to three samples (spare
reservations, forks into them, recomputation). After each, the loop's clean-up must leave every slot
free, the manager's bookkeeping empty and its invariants holding.
"""

from __future__ import annotations

import random

import pytest

from paged.contiguous.buddy import BuddyAllocator
from paged.contiguous.manager import ContiguousKVCacheManager
from paged.core import Scheduler
from paged.core.sequence import Sequence, SequenceGroup
from paged.core.serving_loop import ServingLoop
from support import TokenExecutor, step_until_interrupted

SLOTS = 256
STRIDE = 11
VOCAB = 50


def serve_until_interrupted(policy: str, k: int):
    manager = ContiguousKVCacheManager(SLOTS, policy, max_seq_len=24)
    scheduler = Scheduler(manager, max_num_seqs=8, max_num_batched_tokens=64)
    loop = ServingLoop(scheduler, TokenExecutor(VOCAB), [])
    rng, next_id = random.Random(0), 0
    for request_id in range(8):
        prompt = [rng.randrange(VOCAB) for _ in range(rng.randrange(2, 8))]
        seqs = [Sequence(next_id + i, len(prompt), token_ids=list(prompt)) for i in range(rng.choice([1, 2, 3]))]
        next_id += len(seqs)
        scheduler.add_seq_group(SequenceGroup(request_id, 0.0, seqs, rng.randrange(1, 12)))
    return (manager, scheduler, loop) if step_until_interrupted(loop, scheduler, k, ("/paged/contiguous/", "/paged/core/")) \
        else None


@pytest.mark.parametrize("policy", ["max", "pow2", "oracle"])
def test_an_interrupt_on_any_line_gives_every_slot_back(policy):
    interrupted = 0
    for k in range(1, 10**6, STRIDE):
        run = serve_until_interrupted(policy, k)
        if run is None:  # k is past the last line of the run
            break
        manager, scheduler, loop = run
        interrupted += 1
        manager.check_invariants()
        assert manager.buddy.num_free_slots == SLOTS, f"line {k}: {SLOTS - manager.buddy.num_free_slots} slots held"
        assert not manager.reservations
        assert not scheduler.has_unfinished_seqs() and not loop.has_work
    assert interrupted > 300


def test_a_rebuilt_buddy_allocator_is_the_one_its_operations_left():
    rng = random.Random(1)
    for _ in range(200):
        buddy = BuddyAllocator(rng.choice([64, 100, 256]))
        for _ in range(rng.randrange(30)):
            if buddy.allocated and rng.random() < 0.4:
                buddy.free(rng.choice(sorted(buddy.allocated)))
            elif buddy.can_allocate(size := rng.randrange(1, 40)):
                buddy.allocate(size)
        rebuilt = BuddyAllocator(buddy.num_slots)
        rebuilt.rebuild(buddy.allocated)
        assert rebuilt.free_lists == buddy.free_lists and rebuilt.allocated == buddy.allocated
        assert rebuilt.num_free_slots == buddy.num_free_slots


def test_a_rebuild_refuses_blocks_no_buddy_allocator_could_hold():
    buddy = BuddyAllocator(64)
    start = buddy.allocate(8)
    for held, message in (({4: 3}, "no block of order 3 can start at slot 4"), ({60: 3}, "no block of order 3"),
                          ({0: 4, 8: 3}, "the blocks at slots 0 and 8 overlap"), ({0: 7}, "no block of order 7")):
        with pytest.raises(ValueError, match=message):
            buddy.rebuild(held)
        assert buddy.allocated == {start: 3}  # unchanged
