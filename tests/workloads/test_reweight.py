"""The length-tilted resample: real pairs only, weighted means on target, bad targets refused."""

import numpy as np
import pytest

from paged.workloads import get_trace
from paged.workloads.reweight import SHAREGPT_PAPER_MEANS, tilt_weights, tilted_sample


def test_tilt_hits_the_means_and_keeps_real_pairs():
    base = get_trace("sharegpt", tokenizer="gpt2")
    p = np.array([r.prompt_len for r in base])
    o = np.array([r.output_len for r in base])
    w = tilt_weights(p, o, *SHAREGPT_PAPER_MEANS)
    assert w.sum() == pytest.approx(1.0) and (w > 0).all()
    assert w @ p == pytest.approx(SHAREGPT_PAPER_MEANS[0], abs=1e-5) and w @ o == pytest.approx(SHAREGPT_PAPER_MEANS[1], abs=1e-5)
    drawn = tilted_sample(base, *SHAREGPT_PAPER_MEANS, num_requests=4000, seed=1)
    pairs = set(zip(p.tolist(), o.tolist()))
    assert all((r.prompt_len, r.output_len) in pairs for r in drawn)
    assert abs(drawn.mean_prompt_len - 161.31) < 8 and abs(drawn.mean_output_len - 337.99) < 12
    named = get_trace("sharegpt-fig11", 500, seed=3, tokenizer="gpt2")
    assert len(named) == 500 and get_trace("sharegpt-fig11", 500, seed=3, tokenizer="gpt2") == named
    with pytest.raises(ValueError, match="not inside the trace's range"):
        tilt_weights(p, o, 0.5, 300.0)
