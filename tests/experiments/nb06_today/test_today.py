"""Notebook 06's driver: KV bytes per model, the bound of each system's batch, and the verdicts
(grows / shrinks / vanishes) generated from measured ratios."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from paged.experiments.nb06_today import today
from paged.experiments.serving.run_length import MIN_REQUESTS

pytest.importorskip("transformers")


def test_kv_table_by_hand_for_mha_gqa_mqa():
    table = today.kv_table(["opt-13b", "llama-3.1-8b", "gemma-2b"]).set_index("model")
    assert list(table["attention"]) == ["MHA", "GQA", "MQA"]
    assert list(table["kv_mib_per_2048_tokens"]) == [1600.0, 256.0, 36.0]  # 800, 128, 18 KiB × 2,048


def test_compute_bound_batch_follows_the_roofline():
    # the same model turns compute bound later on a GPU with more FLOPs per byte of bandwidth
    a100, h100, l4 = (today.compute_bound_batch(f"llama-3.1-8b@1x{g}:2048") for g in ("a100-40gb", "h100-sxm", "l4"))
    assert a100 < h100 < l4
    assert today.compute_bound_batch("opt-13b", limit=8) == 8  # not reached below the limit


def _gains(**columns):
    # three deployments: the paper's setup (memory bound), one where every system reaches the scheduler's cap,
    # one whose paged run is mostly compute bound
    base = dict(deployment=["opt-13b", "x@1xh100-sxm:2048", "y@1xl4:2048"], trace="sharegpt",
                paged_over_oracle=[1.7, 1.02, 2.0], paged_over_max=[4.0, 3.0, 4.1],
                oracle_decode_batch=[18, 200, 40], max_decode_batch=[7, 30, 20], paged_decode_batch=[42, 210, 120],
                oracle_max_decode_batch=[36, 256, 60], max_max_decode_batch=[7, 30, 20],
                paged_max_decode_batch=[146, 256, 256], paged_compute_bound_share=[0.14, 0.7, 0.6],
                paged_prefill_share=[0.15, 0.2, 0.5], paged_context_share=[0.27, 0.2, 0.1],
                paged_host_share=[0.05, 0.27, 0.03], max_num_seqs=256, max_len_sequences=[7, 30, 20])
    return pd.DataFrame({**base, **columns})


def test_verdicts_compare_with_the_paper_setup_and_name_the_bound():
    table = today.verdicts(_gains()).set_index(["deployment", "baseline"])
    reason = table["measured reason"]
    assert table.loc[("opt-13b", "Orca (Oracle)"), "gain"] == "reference"
    assert reason[("opt-13b", "Orca (Oracle)")].startswith("memory: the KV cache holds Orca (Oracle) to a decode batch 18")
    assert "14% compute bound" in reason[("opt-13b", "Orca (Oracle)")]
    assert table.loc[("x@1xh100-sxm:2048", "Orca (Oracle)"), "gain"] == "vanishes"
    assert reason[("x@1xh100-sxm:2048", "Orca (Oracle)")].startswith("scheduler cap: both reach the scheduler's 256")
    assert table.loc[("x@1xh100-sxm:2048", "Orca (Max)"), "gain"] == "shrinks"
    assert reason[("x@1xh100-sxm:2048", "Orca (Max)")].startswith("compute: the KV cache holds Orca (Max)")
    assert "30 max-length reservations fit" in reason[("x@1xh100-sxm:2048", "Orca (Max)")]
    assert table.loc[("y@1xl4:2048", "Orca (Oracle)"), "gain"] == "grows"
    assert table.loc[("y@1xl4:2048", "Orca (Max)"), "gain"] == "about the same"
    assert reason[("y@1xl4:2048", "Orca (Max)")].startswith("compute:") and "50% in prefills" in reason[("y@1xl4:2048", "Orca (Max)")]
    with pytest.raises(ValueError, match="no 'opt-13b' row"):
        today.verdicts(_gains().iloc[1:])


def test_a_baseline_as_large_as_paged_below_the_cap_is_not_memory_bound():
    gains = _gains(oracle_decode_batch=[18, 200, 115], oracle_max_decode_batch=[36, 256, 200],
                   paged_compute_bound_share=[0.14, 0.7, 0.3])
    reason = today.verdicts(gains).set_index(["deployment", "baseline"])["measured reason"]
    assert reason[("y@1xl4:2048", "Orca (Oracle)")].startswith("not memory: Orca (Oracle) batches as many as paged")


def test_next_rate_bisects_a_bracket_and_gallops_down_while_nothing_passed():
    rows = lambda rates, lats: pd.DataFrame({"rate": rates, "normalized_latency": lats})  # noqa: E731
    # one passing, one failing 4% apart: done at rel_tol 5%
    assert today._next_rate(rows([0.96, 1.0], [0.1, 0.3]), 2.0, 0.2, 0.05, 1e-3) is None
    # both pass: bisect towards the peak throughput (it counts as failing)
    assert today._next_rate(rows([0.96, 1.0], [0.1, 0.15]), 2.0, 0.2, 0.05, 1e-3) == pytest.approx(1.5)
    # both fail: step down from the lowest failure by rel_tol, then twice as far each time
    assert today._next_rate(rows([0.96, 1.0], [0.3, 0.4]), 2.0, 0.2, 0.05, 1e-3) == pytest.approx(0.96 * 0.95)
    assert today._next_rate(rows([0.8, 0.96, 1.0], [0.3, 0.3, 0.4]), 2.0, 0.2, 0.05, 1e-3) == pytest.approx(0.8 * 0.9)
    # below lo: give up (sustained rate 0)
    assert today._next_rate(rows([5e-4], [0.3]), 2.0, 0.2, 0.05, 1e-3) is None


def test_gain_table_runs_the_three_systems_per_deployment():
    gains, points = today.gain_table(["gemma-2b@1xl4:2048"], duration_scale=0.002, guess_duration=5.0,
                                     saturated_requests=60, rel_tol=0.4, return_points=True)
    row = gains.iloc[0]
    assert row["server"] == "1xL4 24GB" and row["paged_rps"] > 0 and row["max_rps"] > 0
    assert math.isclose(row["paged_over_max"], row["paged_rps"] / row["max_rps"])
    assert 0 < row["paged_prefill_share"] < 1 and 0 <= row["paged_compute_bound_share"] <= 1
    assert row["paged_saturated_batch"] > 0 and row["max_max_decode_batch"] <= row["max_len_sequences"]
    # every rate was evaluated at the paper-length run asked for (or doubled once), and each is listed
    runs = today.run_table(points)
    assert len(runs) == row["runs"] + runs["stopped early"].sum()
    floor = runs["rate"].rdiv(MIN_REQUESTS).clip(lower=0.002 * 3600)  # run_length.run_duration
    assert ((runs["arrival span (s)"] == floor) | (runs["arrival span (s)"] == 2 * floor)).all()
