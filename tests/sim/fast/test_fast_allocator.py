"""The fast allocator's batched operations against the reference allocator, step for step (hypothesis).

``allocate_many(n)`` must hand out exactly what ``n`` calls of ``allocate`` would, and the fast
``incref_all`` / ``free_all`` must leave the same counts and the same free stack, and raise the same
error on the same bad input (a free block, an id out of range, a repeated id, a non-integer). The
unchecked ``incref_table`` / ``free_table`` of a table's blocks (distinct, held) must do what the
reference's ``incref_all`` / ``free_all`` do.
"""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from paged.block import BlockAllocator
from paged.sim.fast.manager import FastBlockAllocator

NUM_BLOCKS = 12
ids = st.one_of(st.integers(-2, NUM_BLOCKS + 1), st.just(1.5))
ops = st.lists(st.one_of(
    st.tuples(st.just("allocate"), st.integers(0, 6)),
    st.tuples(st.just("incref"), st.lists(ids, max_size=5), st.integers(1, 3)),
    st.tuples(st.just("free"), st.lists(ids, max_size=5)),
    st.tuples(st.just("free held"), st.randoms(use_true_random=False)),  # a table's distinct held blocks
    st.tuples(st.just("free table"), st.randoms(use_true_random=False)),
    st.tuples(st.just("fork table"), st.randoms(use_true_random=False)),
), max_size=30)


def outcome(call):
    try:
        return ("ok", call())
    except Exception as err:  # noqa: BLE001 - the same error class and message is what is compared
        return (type(err).__name__, str(err))


@settings(max_examples=300, deadline=None)
@given(ops)
def test_the_fast_allocator_does_what_the_reference_does(operations):
    ref, fast = BlockAllocator(NUM_BLOCKS, 4), FastBlockAllocator(NUM_BLOCKS, 4)
    for op, *args in operations:
        if op == "allocate":
            n = args[0]
            if n > ref.num_free_blocks:
                assert outcome(lambda: fast.allocate_many(n))[0] == "OutOfBlocksError"
            else:
                assert fast.allocate_many(n) == [ref.allocate() for _ in range(n)]
        elif op == "incref":
            blocks, times = args

            def ref_incref():
                for _ in range(times):
                    ref.incref_all(blocks)
            assert outcome(ref_incref) == outcome(lambda: fast.incref_all(blocks, times))
        elif op in ("free table", "fork table"):
            held = [b for b in range(NUM_BLOCKS) if ref.ref_count(b)]
            table = args[0].sample(held, args[0].randint(0, len(held)))
            if op == "free table":
                ref.free_all(table)
                fast.free_table(table)
            else:
                ref.incref_all(table)
                fast.incref_table(table)
        else:
            if op == "free held":
                held = [b for b in range(NUM_BLOCKS) if ref.ref_count(b)]
                args = [args[0].sample(held, args[0].randint(0, len(held)))]
            assert outcome(lambda: ref.free_all(args[0])) == outcome(lambda: fast.free_all(args[0]))
        assert [ref.ref_count(b) for b in range(NUM_BLOCKS)] == [fast.ref_count(b) for b in range(NUM_BLOCKS)]
        ref.check_invariants()
        fast.check_invariants()
    left = ref.num_free_blocks  # the free stacks, in the order they hand blocks out
    assert [ref.allocate() for _ in range(left)] == fast.allocate_many(fast.num_free_blocks)
