"""Notebook 05's drivers on the shipped small model, tiny sizes: interleaved rounds, HF's measured batch,
the simulator-vs-engine validation."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from paged.engine import LLM
from paged.experiments.nb05_engine import engine
from paged.experiments.nb05_engine import validation
from paged.experiments.nb05_engine.hf_baselines import run_hf_generate_batch


def test_ratio_summary_by_hand():
    df = pd.DataFrame([{"round": k, "system": s, "tokens_per_s_ratio": r, "mean_batch_size": b}
                       for k, rows in enumerate([[("paged", 1.0, 30.0), ("orca-max", 0.5, 7.0)],
                                                 [("paged", 1.0, 32.0), ("orca-max", 0.25, 7.0)],
                                                 [("paged", 1.0, 31.0), ("orca-max", 0.4, 7.0)]])
                       for s, r, b in rows])
    row = engine.ratio_summary(df).set_index("system").loc["orca-max"]
    assert row["paged_speedup_median"] == 2.5 and row["paged_speedup_min"] == 2.0 and row["paged_speedup_max"] == 4.0
    assert row["rounds"] == 3 and row["paged_mean_batch"] == 31.0
    with pytest.raises(ValueError):
        engine.ratio_summary(df.drop(columns="tokens_per_s_ratio"))


def test_summary_text_says_when_there_is_one_round():
    df = pd.DataFrame([{"round": 0, "system": s, "tokens_per_s_ratio": r, "mean_batch_size": b, "preemption": "recompute",
                        "load_1min": 0.5}
                       for s, r, b in (("paged", 1.0, 30.0), ("orca-max", 0.5, 7.0))])
    cost = pd.DataFrame({"batch_size": [1], "step_seconds": [0.01]})
    text = engine.summary_text(df, cost)
    assert "one round: no spread" in text and "median of" not in text


@pytest.mark.slow
def test_interleaved_rounds_rotate_the_order_and_pair_the_ratios():
    df = engine.throughput_comparison(num_requests=6, kv_cache_tokens=1024, systems=["paged", "paged-swap",
                                      "orca-max"], rounds=2, num_threads=1)
    assert list(df["round"]) == [0, 0, 0, 1, 1, 1] and (df["load_1min"] >= 0).all()
    assert (df.loc[df["system"] == "paged", "tokens_per_s_ratio"] == 1.0).all()
    assert set(df["preemption"]) == {"recompute"} and (df["output_tokens"] == df["output_tokens"].iloc[0]).all()
    text = engine.summary_text(df, pd.DataFrame({"batch_size": [1, 8], "step_seconds": [0.01, 0.02]}))
    assert "paged ÷ orca-max" in text and "2 rounds" in text and "batch 8 costs 2.0×" in text
    with pytest.raises(ValueError, match="rounds"):
        engine.throughput_comparison(rounds=0)
    with pytest.raises(ValueError, match="swap_space"):
        engine.throughput_comparison(swap_space=2.0)


@pytest.mark.slow
def test_hf_continuous_batching_batch_is_measured_per_forward():
    llm = LLM(engine.DEFAULT_MODEL, num_gpu_blocks=64)
    torch.manual_seed(0)
    prompts = [torch.randint(3, 100, (n,)).tolist() for n in (5, 9, 12, 7)]
    result = run_hf_generate_batch(llm.model, prompts, [6, 3, 8, 4], kv_slots=1024)
    assert 1 <= result.max_batch_size <= 4  # never more requests in a forward than exist
    assert 1 <= result.mean_batch_size <= result.max_batch_size
    assert 1 <= result.mean_forward_requests <= result.max_batch_size
    assert result.output_tokens == 6 + 3 + 8 + 4 and result.seconds > 0


@pytest.mark.slow
def test_validation_profiles_fits_and_compares():
    table, profile, cost = validation.validate(num_requests=6, rate_fractions=(0.5,), kv_cache_tokens=1024,
                                               num_threads=1)
    assert list(table["rate"].apply(math.isinf)) == [True, False]
    assert table.loc[1, "rate"] == pytest.approx(0.5 * table.loc[0, "measured_throughput_rps"])
    for col in ("throughput_ratio", "latency_ratio"):
        assert (table[col] > 0).all() and table[col].apply(math.isfinite).all()
    assert profile["is_prefill"].any() and (~profile["is_prefill"]).any() and (profile["seconds"] > 0).all()
    assert sorted(profile["pass"].unique()) == [0, 1, 2]  # before the first run and after each of the two
    for col in ("throughput_ratio", "latency_ratio"):  # the single-pass band and the at-speed ratios exist
        assert (table[f"{col}_min"] <= table[f"{col}_max"]).all()
        assert (table[f"at_speed_{col}"] > 0).all()
    assert "with the model at each run's own step speed" in validation.summary_text(table, cost)
    with pytest.raises(ValueError, match="decode_steps"):
        validation.validate(num_requests=6, decode_steps=0)
    assert set(validation.profile_errors(profile, cost)["kind"]) == {"decode", "prefill"}
    assert "within ±15%" in validation.summary_text(table, cost) or "outside ±15%" in validation.summary_text(table, cost)
    with pytest.raises(ValueError, match="plot_validation needs the rows of validate"):
        validation.plot_validation(table.iloc[:0], profile, cost)


@pytest.mark.parametrize("kwargs, name", [
    (dict(rate_fractions=()), "rate_fractions"), (dict(rate_fractions=0.5), "rate_fractions"),
    (dict(rate_fractions=("a",)), "rate_fractions"), (dict(rate_fractions=(float("nan"),)), "rate_fractions"),
    (dict(rate_fractions=(float("inf"),)), "rate_fractions"), (dict(decode_steps=2.5), "decode_steps"),
    (dict(decode_steps="4"), "decode_steps"), (dict(num_requests=0), "num_requests"),
    (dict(block_size=0), "block_size"), (dict(kv_cache_tokens=8), "kv_cache_tokens"),
    (dict(profile=pd.DataFrame({"seconds": [0.1]})), "profile"), (dict(profile=pd.DataFrame()), "profile"),
])
def test_validation_refuses_bad_arguments_before_running(kwargs, name):
    with pytest.raises(ValueError, match=name):
        validation.validate(model_path="/nonexistent", **kwargs)  # refused before the model is loaded
