"""``python -m paged.bench.engine_step``: a tiny run returns both kinds of rows, warns of nothing, and its
dense baseline refuses a forward that ignores its KV cache."""

from __future__ import annotations

import warnings

import pytest

from paged.bench import engine_step
from paged.bench.engine_step import main, measure

TINY = dict(batch_sizes=(2,), prompt_len=8, decode_steps=2, rounds=1)


def test_tiny_run_returns_decode_and_prefill_rows_without_a_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = measure(**TINY)
    assert not [w for w in caught if "past_key_values" in str(w.message)]
    assert sorted((row["batch_size"], row["kind"]) for row in r["rows"]) == [(2, "decode"), (2, "prefill")]
    for row in r["rows"]:
        for key in ("paged_s", "dense_s", "ratio"):
            med, lo, hi = row[key]
            assert 0 < lo <= med <= hi


def test_dense_baseline_refuses_a_forward_that_ignores_the_cache(monkeypatch):
    monkeypatch.setattr(engine_step, "_cache_argument", lambda model: "not_a_cache")  # swallowed by **kwargs
    with pytest.raises(RuntimeError, match="did not use it"):
        measure(**TINY)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        measure(batch_sizes=(0,))


def test_cli_prints_the_rows(capsys):
    main(["--batch-sizes", "2", "--prompt-len", "8", "--decode-steps", "2", "--rounds", "1"])
    out = capsys.readouterr()
    assert "load average" in out.out and "decode   batch    2" in out.out and "prefill  batch    2" in out.out
    assert "past_key_values" not in out.out + out.err
