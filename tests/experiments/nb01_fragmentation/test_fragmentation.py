"""Fig. 2 memory accounting: the parts sum to one, the systems are ordered, two worked examples."""

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from paged.experiments.nb01_fragmentation import fragmentation as frag
from paged.core.kv_cache_manager import RequestTooLargeError


def synthetic(n=120, seed=0):
    rng = np.random.default_rng(seed)
    prompts = rng.integers(4, 300, n)
    outputs = np.minimum(rng.lognormal(5.0, 1.0, n).astype(int) + 4, 2048 - prompts)
    return [SimpleNamespace(request_id=i, prompt_len=int(p), output_len=int(o), arrival_time=0.0)
            for i, (p, o) in enumerate(zip(prompts, outputs))]


def test_parts_sum_to_one_and_systems_are_ordered():
    table = frag.memory_waste_table(synthetic(), num_slots=8192, block_size=16)
    parts = table[list(frag.PARTS)]
    assert np.allclose(parts.sum(axis=1), 1.0)
    assert (parts.values >= 0).all()
    ts = dict(zip(table["system"], table["token_states"]))
    assert ts["orca-max"] < ts["orca-pow2"] < ts["orca-oracle"] < ts["paged"]
    assert ts["paged"] > 0.9
    batched = dict(zip(table["system"], table["avg_batched_requests"]))
    assert batched["orca-max"] <= 4  # 8192 slots / 2048-slot reservations
    assert batched["paged"] > batched["orca-oracle"]


def test_oracle_has_no_over_reservation_beyond_the_last_slot():
    table = frag.memory_waste_table(synthetic(60), systems=["orca-oracle"], num_slots=8192)
    assert table.loc[0, "internal"] < 0.01  # only the final token's never-written slot


def test_request_larger_than_cache_is_rejected_before_any_work():
    small = [SimpleNamespace(request_id=i, prompt_len=20, output_len=20, arrival_time=0.0) for i in range(5)]
    big = SimpleNamespace(request_id=99, prompt_len=1500, output_len=400, arrival_time=0.0)  # within 2048 tokens
    for system in set(frag.SYSTEMS) - {"orca-max"}:  # Max reserves 2048 slots for every request: none fits 1024
        with pytest.raises(RequestTooLargeError, match="request 99 .*could never run"):
            frag.memory_waste(small + [big], system, num_slots=1024, block_size=16)
    longer = SimpleNamespace(request_id=98, prompt_len=1500, output_len=600, arrival_time=0.0)  # beyond max_seq_len
    for system in frag.SYSTEMS:  # every system, in the same words
        with pytest.raises(RequestTooLargeError, match=r"^request 98 needs 1500 prompt \+ 600 output = 2100 tokens, "
                                                       r"more than the server's maximum sequence length max_seq_len=2048"):
            frag.memory_waste(small + [longer], system, num_slots=8192, block_size=16)


def test_unknown_system():
    with pytest.raises(ValueError, match="unknown system"):
        frag.make_kv_manager("orca-best", 1000, 16)


def test_default_capacity_is_opt13b_on_a100_40gb():
    assert frag.default_num_slots() == 15_728  # 12 GiB / 800 KiB, whole 16-token blocks


def test_worked_examples():
    df = frag.worked_examples()
    assert math.isclose(df.loc[0, "contiguous_wasted"], 9 / 16)
    assert df.loc[1, "contiguous_slots"] == 100 and df.loc[1, "paged_slots"] == 64
    assert df.loc[1, "tokens"] == 53


def test_larger_blocks_waste_more():
    df = frag.waste_vs_block_size(synthetic(80), [1, 16, 256], num_slots=8192)
    internal = list(df["internal"])
    assert internal[0] == 0 and internal[0] < internal[1] < internal[2]


def test_the_fast_path_gives_fig2_exactly_as_the_reference():
    """Fig. 2 runs on the simulator's fast path (a constant clock, the fast managers, fast-forward); switched
    off, the reference loop steps one iteration at a time and every number is the same."""
    from paged.sim import fast
    from paged.workloads import get_trace

    trace = get_trace("sharegpt", 300, seed=3)
    table = frag.memory_waste_table(trace, num_slots=4096)
    with fast.disabled():
        reference = frag.memory_waste_table(trace, num_slots=4096)
    pd.testing.assert_frame_equal(table, reference, check_exact=True)


@pytest.mark.parametrize("seconds", [0, -1.0, float("nan"), float("inf"), True, "1"])
def test_a_constant_clock_refuses_a_time_that_is_not_positive_and_finite(seconds):
    from paged.sim.iteration_cost import ConstantIterationTime

    with pytest.raises(ValueError, match="seconds must be a finite number > 0"):
        ConstantIterationTime(seconds)


def test_the_binding_note_says_whether_the_cache_bound_the_paged_run():
    import pandas as pd

    from paged.experiments.nb01_fragmentation.fragmentation import binding_note

    row = {"token_states": 0.96, "reservation": 0.01, "internal": 0.02}
    bound = pd.DataFrame([{"system": "paged", **row, "external": 0.01}])
    free = pd.DataFrame([{"system": "paged", **row, "external": 0.65}])
    assert binding_note(bound).startswith("The cache bound this run: paged left 1.0%")
    assert "did NOT bind" in binding_note(free) and "65.0%" in binding_note(free)
