"""Notebook 03's paper-vs-this-run table: Fig. 12 and 17 ratios with where each system crosses the
threshold, the FasterTransformer row read as a capacity ratio, the paper's sentences and what its
figures show where they differ, the chatbot's memory bound, Fig. 13 led by the trace matched to the
paper's Fig. 11 lengths, then matched load, then the paper's rates explained by Little's law."""

from __future__ import annotations

import pandas as pd

from paged.experiments.nb03_throughput import throughput as capacity
from paged.experiments.nb03_throughput.comparison import COLUMNS, paper_comparison


def _sustained(values, peaks, model="opt-13b", trace="sharegpt"):
    return pd.DataFrame([{"model": model, "trace": trace, "system": s, "threshold": 0.2, "sustained_rate": r,
                          "throughput_rps": peaks[s]} for s, r in values.items()])


def _batched(trace, load, rate, batches):
    return [{"model": "opt-13b", "trace": trace, "load": load, "rate": rate, "cpu_scale": 1.0, "system": s,
             "avg_batched_requests": b - 1, "avg_decode_batched_requests": b, "throughput_rps": min(rate, 3.0),
             "mean_running_seconds": b / min(rate, 3.0), "time_avg_batched_requests": b} for s, b in batches.items()]


RATIOS = capacity.ratio_table(pd.concat([
    _sustained({"paged": 9.6, "orca-oracle": 4.0, "fastertransformer": 0.26}, {"paged": 10.0, "orca-oracle": 4.2,
                                                                             "fastertransformer": 1.0}),
    _sustained({"paged": 4.8, "fastertransformer": 0.2}, {"paged": 5.0, "fastertransformer": 0.6}, model="opt-175b")]))
BATCHED = pd.DataFrame(_batched("sharegpt", "paper", 2.0, {"paged": 20.0, "orca-oracle": 18.0})
                       + _batched("sharegpt", "paged's knee", 4.0, {"paged": 60.0, "orca-oracle": 25.0}))


def test_the_ratio_rows_measure_where_each_system_crosses_the_threshold():
    table = paper_comparison(RATIOS, BATCHED)
    assert list(table.columns) == COLUMNS
    ft = table[table["claim"] == "sharegpt: sustained rate paged ÷ FasterTransformer"].iloc[0]
    assert ft["paper"].startswith("up to 22× — §6.2: “vLLM can sustain 1.7×–2.7×") and ft["this run"] == "36.92× at 0.2 s/token (9.6 vs 0.26); 10.00× peak to peak (threshold-free)"
    cause = ft["measured cause of the difference"]
    assert "paged holds 0.2 s/token up to 96% of its peak, FasterTransformer up to 26%" in cause
    assert "capacity ratio" in cause and "OPT-175B peak ÷ 8.33×, at 0.2 s/token 24.00×" in cause
    oracle = table[table["claim"] == "sharegpt: sustained rate paged ÷ Orca (Oracle)"].iloc[0]
    assert "threshold, not the capacity" not in oracle["measured cause of the difference"]  # 96% vs 95%


def test_fig13_leads_with_the_fig11_trace_then_matched_load_then_the_papers_rate_with_littles_law():
    out_len = {"sharegpt": 300.0, "sharegpt-fig11": 338.0}
    fig11 = pd.DataFrame(_batched("sharegpt-fig11", "paper (Fig. 11 means)", 2.0, {"paged": 25.0, "orca-oracle": 20.0}))
    batched = pd.concat([BATCHED, fig11], ignore_index=True)
    little = capacity.littles_law(batched, out_len)
    table = paper_comparison(RATIOS, batched, little=little)
    fig13 = table[table["figure"] == "Fig. 13"]
    assert list(fig13["claim"]) == ["avg batched requests, sharegpt-fig11 at 2 req/s (paper (Fig. 11 means))",
                                    "avg batched requests, sharegpt at 4 req/s (paged's knee)",
                                    "avg batched requests, sharegpt at 2 req/s (paper)"]
    check, knee, paper = fig13.to_dict("records")
    assert check["paper"].endswith("(on its own ShareGPT sample, whose means this trace matches)")
    assert knee["paper"] == "not stated at this rate (at 2 req/s: paged ÷ Oracle 2.23×)"
    assert knee["measured cause of the difference"].startswith("paged ÷ Oracle 2.40× per decode iteration")
    assert "paged 60.0 (66.7 ms per output token; served below 97% of the arrival rate)" in knee["measured cause of the difference"]
    assert paper["paper"].startswith("orca-max 7.00, orca-pow2 9.81, orca-oracle 13.62, paged 30.42 — §6.2: for OPT-13B "
                                     "vLLM “processes 2.2× more requests")
    # paged at 2 req/s: batch 20 = 2 × 10 s running; 10 s / 300 tokens = 33.3 ms; 30.42 / 2 / 337.99 = 45.0 ms
    assert ("Little's law, batch = served rate × seconds a request runs: paged 20.0 (33.3 ms per output token; "
            "the paper's 30.42 implies 45.0 ms)") in paper["measured cause of the difference"]
    assert paper["this run"].startswith("paged 20.00 per decode iteration (19.00 per iteration)")
    assert "the paper's 30.42 implies 45.0 ms" in check["measured cause of the difference"]


def test_where_the_papers_figure_reads_otherwise_its_reading_and_the_memory_bound_are_given():
    ratios = capacity.ratio_table(pd.concat([
        _sustained({"paged": 9.6, "orca-oracle": 4.0}, {"paged": 10.0, "orca-oracle": 4.2}),
        _sustained({"paged": 6.0, "orca-oracle": 4.7}, {"paged": 6.2, "orca-oracle": 5.0}, model="opt-175b")]))
    chat = capacity.ratio_table(_sustained({"paged": 1.3, "orca-oracle": 1.0}, {"paged": 1.4, "orca-oracle": 1.1},
                                           trace="sharegpt-chat"))
    footprint = pd.DataFrame({"system": ["paged", "orca-oracle"], "requests_that_fit": [14.2, 8.7]})
    table = paper_comparison(ratios, BATCHED, chat, footprint=footprint)
    big = table[table["claim"] == "sharegpt: sustained rate paged ÷ Orca (Oracle) (OPT-175B)"].iloc[0]
    assert big["paper"].startswith("1.7–2.7× — §6.2") and "its Fig. 12 curves read ≈1.33× (read by eye" in big["paper"]
    thirteen = table[table["claim"] == "sharegpt: sustained rate paged ÷ Orca (Oracle)"].iloc[0]
    assert "curves read" not in thirteen["paper"]  # no reading differs from the text at 13B
    bot = table[table["figure"] == "Fig. 17"].iloc[0]
    assert "“vLLM can sustain 2× higher request rates" in bot["paper"] and "curves read 1.25–1.45×" in bot["paper"]
    assert bot["measured cause of the difference"].startswith(
        "memory bounds the gain: on average paged's KV cache holds 14.2 running requests, Orca (Oracle)'s 8.70, "
        "so at most 1.63×")
