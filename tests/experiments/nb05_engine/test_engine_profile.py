"""The engine profile (``paged.bench.engine_profile``) on the shipped small model, tiny sizes."""

from __future__ import annotations

import pytest
import torch

from paged.experiments.nb05_engine.engine import torch_threads
from paged.experiments.nb05_engine.engine_profile import decode_step_cost, op_time_shares


def test_decode_step_cost_rows_and_ratios():
    df = decode_step_cost(batch_sizes=(1, 3), context_len=8, decode_steps=2)
    assert df["batch_size"].tolist() == [1, 3]
    assert (df["step_seconds"] > 0).all()
    assert df["step_cost_vs_smallest"].iloc[0] == 1.0
    assert df["tokens_per_s"].iloc[1] == pytest.approx(3 / df["step_seconds"].iloc[1])


@pytest.mark.parametrize("kwargs", [{"batch_sizes": ()}, {"batch_sizes": (0, 2)}, {"context_len": 0},
                                    {"decode_steps": 0}, {"num_threads": 0}])
def test_decode_step_cost_rejects_bad_sizes(kwargs):
    with pytest.raises(ValueError):
        decode_step_cost(**kwargs)


def test_op_time_shares_cover_the_wall_time():
    df = op_time_shares(num_requests=3, max_output_len=6)
    assert df["category"].iloc[-1].startswith("Python")
    assert "matrix products (linear, attention bmm)" in set(df["category"])
    assert (df["seconds"] >= 0).all()
    assert df["share"].sum() == pytest.approx(1.0, abs=0.05) or df["share"].iloc[-1] == 0.0


def test_torch_threads_restores():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="num_threads"), torch_threads(0):
        pass
