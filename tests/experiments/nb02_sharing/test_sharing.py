"""Notebook 02's driver (§6.3, §6.4): settings, sustained-rate ratios, memory saving, Fig. 16's skip, the table."""

import pandas as pd
import pytest

from paged.experiments.nb02_sharing import sharing


def test_group_options():
    assert sharing.group_options("basic", 1) == {"n": 1}
    assert sharing.group_options("parallel", 4) == {"n": 4}
    assert sharing.group_options("beam", 6) == {"beam_width": 6}
    with pytest.raises(ValueError, match="unknown setting"):
        sharing.group_options("greedy", 2)


def test_sharing_pays_off_more_for_beams_than_for_samples():
    rates = sharing.sustained_rates([("basic", 1), ("beam", 6)], ("paged", "orca-oracle"), num_requests=200,
                                    saturated_requests=1000, rel_tol=0.1, workers=1)
    gains = sharing.improvement_over_oracle(rates)
    assert list(gains["decoding"]) == ["basic", "beam"]
    beam = gains.set_index("decoding")["improvement"]
    assert beam["beam"] > 1.4 and beam["beam"] > beam["basic"] + 0.2  # Orca reserves every candidate's full length; paged shares the beam tree
    assert (rates["sustained_rate"] <= rates["throughput_rps"]).all()
    sweep = sharing.latency_sweep(rates[rates["decoding"] == "beam"], ("paged", "orca-oracle"), fractions=(0.5, 1.0),
                                  num_requests=60, workers=1)
    assert len(sweep) == 4 and set(sweep["width"]) == {6}
    _, points = sharing.sustained_rates([("beam", 6)], ("orca-oracle",), num_requests=200, saturated_requests=1000,
                                        rel_tol=0.1, workers=1, return_points=True)
    joined = sharing.latency_sweep(rates[rates["decoding"] == "beam"], ("paged", "orca-oracle"), fractions=(0.5, 1.0),
                                   num_requests=60, workers=1, known=points)
    finished = points[(points["rate"] < float("inf")) & ~points["stopped_early"].astype(bool)]
    oracle = joined[joined["system"] == "orca-oracle"]
    assert set(finished["rate"]) <= set(oracle["rate"])  # the search's finished runs join Oracle's curve
    assert not oracle.duplicated(["rate"]).any() and list(oracle["rate"]) == sorted(oracle["rate"])
    # Orca (Oracle) at paged's sustained rate is past its capacity: capped, its run stops at the bound
    beam = rates[rates["decoding"] == "beam"]
    capped = sharing.latency_sweep(beam, ("orca-oracle",), fractions=(1.0,), num_requests=200, workers=1,
                                   latency_cap=0.05)
    full = sharing.latency_sweep(beam, ("orca-oracle",), fractions=(1.0,), num_requests=200, workers=1,
                                 latency_cap=None)
    assert bool(capped["stopped_early"][0]) and not bool(full["stopped_early"][0])
    assert 0.05 <= capped["normalized_latency"][0] <= full["normalized_latency"][0]


def test_memory_saving_is_the_papers_measure():
    df = sharing.memory_saving(("alpaca",), (2, 6), num_requests=60, workers=1)
    s = df.set_index(["decoding", "width"])["saving_percent"]
    assert 0 < s["parallel", 2] < s["parallel", 6] < 100
    assert 0 < s["beam", 2] < s["beam", 6] < 100
    assert (df["blocks_in_use_mean"] < df["blocks_without_sharing_mean"]).all()
    share = sharing.length_summary(("alpaca",), num_requests=60).set_index("trace")["prompt_block_share"]["alpaca"]
    # parallel samples share only full prompt blocks: n samples save at most (n - 1) / n of that share
    assert s["parallel", 2] / 100 <= share


def test_fig16_is_skipped_without_the_wmt16_traces(capsys, monkeypatch):
    monkeypatch.setattr(sharing, "NAMED_TRACES", {"sharegpt": "x", "alpaca": None})
    assert sharing.available_fig16_traces() == {}
    assert sharing.shared_prefix_rates(num_requests=10) is None
    assert "Fig. 16 skipped" in capsys.readouterr().out


def test_demo_summary():
    demo = pd.DataFrame({"caching": [False, True, False, True], "round": [0, 0, 1, 1],
                         "seconds": [2.0, 1.5, 2.2, 1.1], "prefill_seconds": [1.0, 0.5, 1.0, 0.25],
                         "prefill_tokens": [400, 100, 400, 100], "prompt_tokens": [400] * 4,
                         "cached_tokens": [0, 300, 0, 300], "hit_rate": [0, 0.75, 0, 0.75],
                         "same_output": [True] * 4})
    summary = sharing.demo_summary(demo)
    assert summary["hit_rate"] == 0.75 and summary["prefill_tokens_saved"] == 0.75
    assert summary["prefill_time_saved_range"] == (0.5, 0.75) and summary["same_output"]


def test_memory_saving_refuses_a_trace_without_a_rate_before_running():
    with pytest.raises(ValueError, match=r"no request rate for trace\(s\) \['wmt16-1shot'\]"):
        sharing.memory_saving(["sharegpt", "wmt16-1shot"], widths=(2,), num_requests=10)


def test_saving_rates_merge_the_defaults_and_name_what_is_missing():
    assert sharing.saving_rates(["sharegpt", "wmt16-1shot"], {"wmt16-1shot": 3.0}) == {"sharegpt": 0.5, "wmt16-1shot": 3.0}
    with pytest.raises(ValueError, match=r"\['nosuch'\]"):
        sharing.saving_rates(["alpaca", "nosuch"])


@pytest.mark.parametrize("kwargs, match", [(dict(traces=[]), "traces must name at least one"),
                                           (dict(traces="alpaca-bare", widths=[]), "widths must name at least one"),
                                           (dict(traces=["sharegpt"], widths=[2, 2]), "widths names 2 twice")])
def test_memory_saving_refuses_empty_or_repeated_lists(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sharing.memory_saving(num_requests=5, workers=1, **kwargs)


def test_fig16_curves_and_the_caching_point():
    rates, points = sharing.shared_prefix_rates(num_requests=120, saturated_requests=300, rel_tol=0.2, workers=1,
                                                return_points=True)
    df = sharing.shared_prefix_sweep(rates, fractions=(0.5, 1.0), num_requests=120, workers=1, known=points)
    own = rates.set_index(["shot", "system"])["sustained_rate"]
    for shot, part in df.groupby("shot"):
        cached = part[part["system"] == "paged (prefix caching)"]
        searched = points[(points["shot"] == shot) & (points["label"] == "paged (prefix caching)")]
        # no run of its own: its sustained rate and its search's other finished runs
        assert own[shot, "paged (prefix caching)"] in set(cached["rate"]) and set(cached["rate"]) <= set(searched["rate"])
        oracle = part[part["system"] == "orca-oracle"]
        top = own[shot, "paged (reserved prefix)"]
        assert {round(0.5 * top, 4), top} <= set(oracle["rate"])  # a whole curve at fractions of paged's rate
    with pytest.raises(ValueError, match="curves must name labels"):
        sharing.shared_prefix_sweep(rates, curves=("paged",), num_requests=10)


def test_the_searches_go_on_to_notebook_03s_cap_and_the_prefix_notes():
    from paged.experiments.serving import THRESHOLDS

    assert sharing.SEARCH_LATENCY_CAP == max(THRESHOLDS) == 0.5
    assert sharing.prefix_block_note(80, 16) == "80 tokens are exactly 5 16-token blocks: no request copies a prefix block"
    assert sharing.prefix_block_note(79, 16).startswith("79 tokens are 4 full 16-token blocks and 15 tokens in a partly")


def test_fig16_with_the_papers_prefix_lengths_and_the_decode_bounds_of_fig14():
    from paged.experiments.nb02_sharing.decode_bounds import MAX_NUM_SEQS, decode_bounds

    systems = [s for s in sharing.FIG16_SYSTEMS if not s[2]]
    alt = sharing.shared_prefix_rates(num_requests=120, saturated_requests=300, rel_tol=0.2, workers=1,
                                      traces={"1-shot": "wmt16-1shot-paper-prefix"}, systems=systems)
    assert list(alt["trace"]) == ["wmt16-1shot-paper-prefix"] * 2 and list(alt["system"]) == [s[0] for s in systems]
    assert alt.set_index("system").loc["orca-oracle", "over_oracle"] == 1.0
    rates = pd.DataFrame([{"decoding": "beam", "width": 2, "system": s, "sustained_rate": r}
                          for s, r in (("paged", 8.0), ("orca-oracle", 4.0))])
    bounds = decode_bounds(rates, [("beam", 2)], num_requests=80, workers=1).set_index("system")
    assert set(bounds.index) == {"paged", "orca-oracle"}
    for system, row in bounds.iterrows():
        assert 0 < row["decode_batch"] <= row["max_decode_batch"] <= MAX_NUM_SEQS and row["ms_per_decode"] > 0
        assert 0 <= row["compute_bound_share"] <= 1
