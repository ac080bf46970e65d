"""Fig. 11 driver (:mod:`paged.experiments.nb01_fragmentation.workloads`): means beside the paper's, histogram bars, breakdowns."""

from __future__ import annotations

import numpy as np

from paged.experiments.nb01_fragmentation import workloads
from paged.experiments.notebook.paper import ALPACA_MEAN_LENS, SHAREGPT_MEAN_LENS
from paged.workloads import get_trace


def test_means_table_has_both_tokenizers_and_the_papers_numbers():
    table = workloads.means_table()
    assert len(table) == 2 * len(workloads.MEANS_TRACES)
    row = table[(table.trace == "sharegpt") & (table.tokenizer == "gpt2")].iloc[0]
    trace = get_trace("sharegpt", tokenizer="gpt2")
    assert row.requests == len(trace) and row.mean_prompt == round(trace.mean_prompt_len, 2)
    assert (row.paper_prompt, row.paper_output) == SHAREGPT_MEAN_LENS
    bare = table[(table.trace == "alpaca-bare") & (table.tokenizer == "cl100k")].iloc[0]
    assert (bare.paper_prompt, bare.paper_output) == ALPACA_MEAN_LENS
    wmt = table[table.trace == "wmt16-5shot"]
    assert set(wmt.paper_prefix_len) == {341} and (wmt.prefix_len > 0).all() and np.isnan(wmt.paper_prompt).all()


def test_histogram_bars_cover_at_least_99_percent_and_plot():
    bars = workloads.length_histograms("cl100k", traces=("alpaca", "wmt16-1shot"), bins=10)
    for (_, _), part in bars.groupby(["trace", "length"]):
        area = float((part.density * (part.bin_right - part.bin_left)).sum())
        assert 0.98 <= area <= 1.0 + 1e-9 and len(part) == 10
    assert set(bars[bars.trace == "wmt16-1shot"].prefix_len) == {get_trace("wmt16-1shot")[0].prefix_len}
    fig = workloads.plot_length_distributions(bars)
    assert len(fig.axes) == 2


def test_breakdown_by_variant_puts_variants_side_by_side():
    variants = {"gpt2": get_trace("sharegpt", 60, tokenizer="gpt2"), "cl100k": get_trace("sharegpt", 60)}
    table = workloads.breakdown_by_variant(variants, num_slots=2048)
    assert list(table.index) == ["orca-max", "orca-pow2", "orca-oracle", "paged"]
    assert set(table["token_states_percent"].columns) == {"gpt2", "cl100k"}
    assert (table["token_states_percent"] > 0).all().all()
