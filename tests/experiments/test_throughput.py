"""Notebook 03 helpers: figure tables without wall time, the Fig. 12/17 plot, KV footprint, comparison."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from paged.experiments import serving, throughput  # noqa: E402
from paged.experiments.plotting import save_figure  # noqa: E402
from paged.workloads.trace import Request  # noqa: E402


def _sweep():
    points = [dict(system=s, rate=r, num_requests=30, seed=1) for s in ("paged", "fastertransformer") for r in (1.0, 4.0)]
    return serving.sweep(points, workers=1)


def test_figure_data_drops_wall_time_only():
    df = _sweep()
    out = throughput.figure_data(df)
    assert "sim_wall_seconds" in df.columns and "sim_wall_seconds" not in out.columns
    assert list(out.columns) == [c for c in df.columns if c not in serving.WALL_TIME_COLUMNS]
    assert throughput.figure_data(out).equals(out)


def test_rerun_saves_identical_csv(tmp_path):
    a, b = _sweep(), _sweep()
    b["sim_wall_seconds"] += 1.0  # wall time always differs between runs
    fig = plt.figure()
    pa = save_figure(fig, throughput.figure_data(a), "x", tmp_path / "a")
    pb = save_figure(fig, throughput.figure_data(b), "x", tmp_path / "b")
    plt.close(fig)
    assert pa["csv"].read_bytes() == pb["csv"].read_bytes()


def test_latency_plot_shows_every_system_with_a_figure_legend():
    df = pd.DataFrame([{"model": "opt-13b", "trace": t, "system": s, "rate": r, "normalized_latency": lat}
                       for t in ("sharegpt", "alpaca")
                       for s, lat in (("fastertransformer", 9.0), ("orca-max", 3.0), ("paged", 0.03))
                       for r in (1.0, 2.0)])
    fig = throughput.plot_latency_vs_rate(df)
    try:
        for ax in fig.axes:
            assert ax.get_yscale() == "log" and ax.get_legend() is None
            lo, hi = ax.get_ylim()
            assert lo <= 0.03 and hi >= 9.0
        (legend,) = fig.legends
        labels = [t.get_text() for t in legend.get_texts()]
        assert labels[:3] == ["paged", "orca-max", "fastertransformer"] and "s/token" in labels[3]
    finally:
        plt.close(fig)
    fig = throughput.plot_latency_vs_rate(df, log_y=False, ylim=(0, 1), threshold=None)
    assert fig.axes[0].get_yscale() == "linear" and len(fig.legends[0].get_texts()) == 3
    plt.close(fig)
    with pytest.raises(ValueError):
        throughput.plot_latency_vs_rate(df.iloc[:0])


def test_kv_footprint_by_hand():
    trace = [Request(0, 10, 3, 0.0), Request(1, 1020, 10, 0.0)]
    out = throughput.kv_footprint(trace, block_size=16).set_index("system")["mean_slots_held"]
    # paged: request 0 holds one 16-slot block for 3 steps; request 1 holds 1024 slots for 4 steps, 1040 for 6
    assert out["paged"] == pytest.approx((3 * 16 + 4 * 1024 + 6 * 1040) / 13)
    # buddy blocks: oracle 13 -> 16, 1030 -> 2048; pow2 10+4 -> 16, 1020+16 -> 2048; max 2048
    assert out["orca-oracle"] == pytest.approx((3 * 16 + 10 * 2048) / 13)
    assert out["orca-pow2"] == pytest.approx((3 * 16 + 10 * 2048) / 13)
    assert out["orca-max"] == 2048
    with pytest.raises(ValueError):
        throughput.kv_footprint([])
    with pytest.raises(ValueError):
        throughput.kv_footprint(trace, block_size=0)


def _rates(values, censored=()):
    return pd.DataFrame([{"system": s, "sustained_rate": r, "censored_at_max": s in censored} for s, r in values.items()])


def test_paper_comparison_has_chatbot_ratios():
    sharegpt = _rates({"paged": 4.0, "orca-oracle": 2.0})
    batched = pd.DataFrame([{"trace": "sharegpt", "rate": 2.0, "system": "paged", "avg_batched_requests": 15.0}])
    chat = _rates({"paged": 2.0, "orca-max": 1.0, "orca-pow2": 1.25, "orca-oracle": 8.0}, censored=("orca-oracle",))
    table = throughput.paper_comparison(sharegpt, batched, chat).set_index("claim")
    assert table.loc["sustained rate paged ÷ orca-oracle", "this run"].startswith("2.00×")
    assert table.loc["chatbot sustained rate paged ÷ orca-max (Fig. 17)", "this run"] == "2.00× (2.00 vs 1.00 req/s)"
    assert table.loc["chatbot sustained rate paged ÷ orca-pow2 (Fig. 17)", "paper"] == "2×"
    assert table.loc["chatbot sustained rate paged ÷ orca-oracle (Fig. 17)", "this run"].startswith("≤ 0.25×")
    assert not any("chatbot" in c for c in throughput.paper_comparison(sharegpt, batched).claim)
