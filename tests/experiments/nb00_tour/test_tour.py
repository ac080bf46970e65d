"""The tour's views (paged.experiments.nb00_tour.tour) give the worked examples and agree with the simulator."""

import numpy as np
import pytest

from paged.experiments.nb00_tour import tour
from paged.sim.simulator import simulate
from paged.systems import make_kv_manager


def test_reservation_is_the_seeds_example():
    view = tour.reservation(3, 4, "max", 16)
    assert (view["used"], view["allocated"], view["wasted"]) == (7, 16, 9)
    assert round(view["wasted_share"], 2) == 0.56
    assert view["slots"].count("reserved, never used") == 9


@pytest.mark.parametrize("policy, reserved, allocated", [("pow2", 7, 8), ("oracle", 7, 8), ("max", 20, 32)])
def test_reservation_policies_and_buddy_rounding(policy, reserved, allocated):
    view = tour.reservation(3, 4, policy, 20)
    assert (view["reserved"], view["allocated"]) == (reserved, allocated)
    assert view["slots"].count("buddy rounding") == allocated - reserved


def test_reservation_too_long_is_named():
    with pytest.raises(ValueError, match="do not fit a 16-token"):
        tour.reservation(10, 7, "max", 16)


def test_pages_only_the_last_block_has_room():
    view = tour.pages(11, 4)
    assert list(view["filled"]) == [4, 4, 3]
    assert list(view["allocated_at_token"]) == [1, 5, 9]  # a block when a token crosses a boundary


def test_block_tables_keep_every_sentence_in_order():
    view = tour.block_tables(block_size=2, seed=0)
    assert sorted(view["physical"]) == list(range(view["num_blocks"].iloc[0]))  # every block held once
    for request, sentence in enumerate(tour.SENTENCES):
        rows = view[view["request"] == request].sort_values("logical")
        assert " ".join(rows["words"]) == sentence
    assert (view.groupby("request")["physical"].apply(lambda b: np.any(np.diff(b) != 1))).any()  # scattered


def test_sharing_full_prefix_blocks_are_shared_without_copies():
    view = tour.sharing(12, 3, 5, 4)
    assert view["shared"] == [0, 1, 2] and view["copies"] == []
    assert (view["blocks_used"], view["blocks_without_sharing"], view["saved"]) == (6, 9, 3)


def test_sharing_a_partly_filled_block_is_copied_once():
    view = tour.sharing(10, 3, 5, 4)
    assert len(view["copies"]) == 1  # the first writer copies, the last holder writes in place
    assert len(view["shared"]) == 2


def test_batch_is_the_seeds_example():
    view = tour.batch([2, 5, 3, 6, 4], [3, 8, 4, 12, 6], policy="max", max_seq_len=20, block_size=4)
    assert (view["tokens"].sum(), view["reserved"].sum(), view["paged_slots"].sum()) == (53, 100, 64)
    assert (view["buddy_allocated"] == 32).all()


def _trace():
    return tour.tiny_trace(16, 64, rate=2.0, seed=0)


@pytest.mark.parametrize("system", ["paged", "orca-oracle", "orca-pow2", "orca-max"])
def test_replay_matches_the_simulator(system):
    trace = _trace()
    steps = tour.replay(trace, system, num_slots=64, block_size=4, max_seq_len=64)
    manager = make_kv_manager(system, 64 // 4, 4, max_seq_len=64, watermark=0.0)
    result = simulate(trace, manager, lambda outputs: 1.0, max_num_batched_tokens=128, record_memory=False)
    assert sum(s.kind != "idle" for s in steps) == result.num_iterations
    assert sum(len(s.preempted) for s in steps) == result.num_preemptions
    assert len(steps[-1].finished) + len(steps[-1].running) == len(trace)


def test_replay_shows_preemption_and_memory():
    steps = tour.replay(_trace(), "paged", num_slots=64, block_size=4, max_seq_len=64)
    assert any(s.preempted for s in steps)
    for s in steps:
        held = s.owner != tour.SLOT_FREE
        assert not (s.filled & ~held).any()  # a token sits only in a held slot
        assert set(np.unique(s.owner[held])) <= set(s.running)
    max_batch = max(len(s.running) for s in tour.replay(_trace(), "orca-max", num_slots=64, max_seq_len=64))
    assert max_batch == 1  # one 64-slot reservation fills the 64-slot cache


def test_replay_swap_moves_requests_out():
    steps = tour.replay(_trace(), "paged", num_slots=64, block_size=4, max_seq_len=64, preemption="swap")
    assert any(s.swapped for s in steps)
