"""Synthetic Alpaca-like lengths: the paper's means, nothing else (§6.1)."""

from __future__ import annotations

from paged.workloads import alpaca_like


def test_alpaca_like_means_and_determinism():
    n = 20_000
    trace = alpaca_like(n, seed=0)
    # standard errors: ~19.3*0.66/sqrt(n) ~ 0.09 and ~58.5*1.1/sqrt(n) ~ 0.45 tokens
    assert abs(trace.mean_prompt_len - 19.31) < 0.5
    assert abs(trace.mean_output_len - 58.45) < 2.5
    assert min(r.prompt_len for r in trace) >= 4 and min(r.output_len for r in trace) >= 4
    assert trace.to_frame().equals(alpaca_like(n, seed=0).to_frame())
    assert trace.name == "alpaca_like" and "no Alpaca data" in trace.source
