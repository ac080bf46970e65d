"""``python -m paged.bench.cpu_attention``: a tiny grid runs, checks both paged paths against the reference, and rejects bad axes."""

from __future__ import annotations

import pytest

from paged.bench.cpu_attention import BASELINES, PAGED, main, measure
from paged.kernels.cpu_kernel import load_kernel


@pytest.mark.parametrize("threads", [1, 2])
def test_tiny_grid_returns_every_point_with_ratios(threads):
    r = measure(batch_sizes=(1, 3), contexts=(17,), dtypes=("float32", "bfloat16"), rounds=1, repeats=1, threads=threads)
    assert r["kernel"] == (load_kernel() is not None)
    assert [(row["dtype"], row["mix"], row["batch"]) for row in r["rows"]] == [
        (d, m, b) for d in ("float32", "bfloat16") for m in ("uniform", "mixed") for b in (1, 3)]
    paged = [p for p in PAGED if r["kernel"] or p != "kernel"]
    for row in r["rows"]:
        assert all(row[f"{name}_s"] > 0 for name in (*paged, *BASELINES))
        for path in paged:
            assert row[f"{path}_plan_s"] > 0
            for base in BASELINES:
                med, lo, hi = row[f"{path}_vs_{base}"]
                assert lo <= med <= hi


@pytest.mark.parametrize("kwargs", [dict(batch_sizes=()), dict(contexts=(0,)), dict(mixes=("ragged",)),
                                    dict(dtypes=("int8",)), dict(num_heads=3, num_kv_heads=2), dict(rounds=0),
                                    dict(threads=0)])
def test_bad_grid_is_refused(kwargs):
    with pytest.raises(ValueError):
        measure(**kwargs)


def test_cli_prints_the_grid(capsys):
    main(["--batch-sizes", "2", "--contexts", "16", "--mixes", "mixed", "--dtypes", "float32", "--rounds", "1",
          "--repeats", "1", "--no-compile-time"])
    out = capsys.readouterr().out
    assert "load average" in out and "float32   mixed" in out and "points within 1.1x" in out
    assert ("kernel / head-major" in out) == (load_kernel() is not None) and "bucketed / token-major" in out


def test_cli_takes_another_attention_shape(capsys):
    main(["--batch-sizes", "1", "--contexts", "20", "--mixes", "uniform", "--dtypes", "float32", "--rounds", "1",
          "--repeats", "1", "--no-compile-time", "--heads", "12", "4", "64"])
    assert "heads 12 / KV heads 4, head size 64" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # 12 query heads cannot share 5 KV heads: the run's own error, exit code 2
        main(["--batch-sizes", "1", "--contexts", "20", "--no-compile-time", "--heads", "12", "5", "64"])
