"""``python -m paged.bench.cpu_attention``: a tiny grid runs, checks the paged path against the reference, and rejects bad axes."""

from __future__ import annotations

import pytest

from paged.bench.cpu_attention import main, measure


def test_tiny_grid_returns_every_point_with_ratios():
    r = measure(batch_sizes=(1, 3), contexts=(17,), dtypes=("float32", "bfloat16"), rounds=1, repeats=1)
    assert [(row["dtype"], row["mix"], row["batch"]) for row in r["rows"]] == [
        (d, m, b) for d in ("float32", "bfloat16") for m in ("uniform", "mixed") for b in (1, 3)]
    for row in r["rows"]:
        assert row["paged_s"] > 0 and row["token_major_s"] > 0 and row["head_major_s"] > 0
        med, lo, hi = row["vs_head_major"]
        assert lo <= med <= hi


@pytest.mark.parametrize("kwargs", [dict(batch_sizes=()), dict(contexts=(0,)), dict(mixes=("ragged",)),
                                    dict(dtypes=("int8",)), dict(num_heads=3, num_kv_heads=2), dict(rounds=0)])
def test_bad_grid_is_refused(kwargs):
    with pytest.raises(ValueError):
        measure(**kwargs)


def test_cli_prints_the_grid(capsys):
    main(["--batch-sizes", "2", "--contexts", "16", "--mixes", "mixed", "--dtypes", "float32", "--rounds", "1",
          "--repeats", "1"])
    out = capsys.readouterr().out
    assert "load average" in out and "float32   mixed" in out and "points within 1.1x" in out
