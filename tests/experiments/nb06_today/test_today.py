"""Notebook 06's driver: KV bytes per model, the bound of each system's batch, and the verdicts
(grows / shrinks / vanishes) generated from measured ratios."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from paged.experiments.nb06_today import today

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
    base = dict(deployment=["opt-13b", "x@1xh100-sxm:2048", "y@1xl4:2048"], trace="sharegpt",
                paged_over_oracle=[1.7, 1.02, 2.0], paged_over_max=[4.0, 3.0, 4.1],
                oracle_saturated_batch=[18, 140, 40], max_saturated_batch=[7, 30, 20],
                paged_saturated_batch=[42, 144, 120], compute_bound_batch=[159, 236, 318],
                prefill_share=[0.1, 0.1, 0.6], max_num_seqs=256, max_len_sequences=[7, 30, 20])
    return pd.DataFrame({**base, **columns})


def test_verdicts_compare_with_the_paper_setup_and_name_the_bound():
    table = today.verdicts(_gains()).set_index(["deployment", "baseline"])
    assert table.loc[("opt-13b", "Orca (Oracle)"), "gain"] == "reference"
    assert table.loc[("x@1xh100-sxm:2048", "Orca (Oracle)"), "gain"] == "vanishes"
    assert table.loc[("x@1xh100-sxm:2048", "Orca (Oracle)"), "measured reason"].startswith("not memory")
    assert table.loc[("x@1xh100-sxm:2048", "Orca (Max)"), "gain"] == "shrinks"
    assert table.loc[("x@1xh100-sxm:2048", "Orca (Max)"), "measured reason"].startswith("memory")
    assert table.loc[("y@1xl4:2048", "Orca (Oracle)"), "gain"] == "grows"
    assert table.loc[("y@1xl4:2048", "Orca (Max)"), "gain"] == "about the same"
    assert table.loc[("y@1xl4:2048", "Orca (Max)"), "measured reason"].startswith("compute (prefill)")
    with pytest.raises(ValueError, match="no 'opt-13b' row"):
        today.verdicts(_gains().iloc[1:])


def test_gain_table_runs_the_three_systems_per_deployment():
    gains = today.gain_table(["gemma-2b@1xl4:2048"], min_duration=5.0, saturated_requests=60, rel_tol=0.2)
    row = gains.iloc[0]
    assert row["server"] == "1xL4 24GB" and row["paged_rps"] > 0 and row["max_rps"] > 0
    assert math.isclose(row["paged_over_max"], row["paged_rps"] / row["max_rps"])
    assert 0 < row["prefill_share"] < 1 and row["paged_saturated_batch"] > 0
