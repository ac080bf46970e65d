"""Notebook 03 helpers: figure tables without wall time, the Fig. 12/17 plot, KV footprint, comparison."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from paged.experiments.nb03_throughput import throughput as capacity
from paged.experiments import serving
from paged.experiments.nb03_throughput import throughput_figures as throughput  # noqa: E402
from paged.experiments.notebook.plotting import save_figure  # noqa: E402
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


def _points():
    rows = [{"model": m, "trace": t, "system": s, "rate": r, "normalized_latency": lat, "stopped_early": r > 2}
            for m in ("opt-13b", "opt-66b") for t in ("sharegpt", "alpaca")
            for s, lat in (("fastertransformer", 0.9), ("orca-max", 0.3), ("paged", 0.03)) for r in (1.0, 2.0, 3.0)]
    peaks = [{"model": m, "trace": t, "system": s, "rate": float("inf"), "throughput_rps": 2.5}
             for m in ("opt-13b", "opt-66b") for t in ("sharegpt", "alpaca")
             for s in ("fastertransformer", "orca-max", "paged")]
    return pd.DataFrame(rows + peaks)


def test_latency_plot_is_a_trace_by_model_grid_with_linear_axes_and_a_figure_legend():
    fig = throughput.plot_latency_vs_rate(_points())
    try:
        assert len(fig.axes) == 4
        for ax in fig.axes:
            assert ax.get_yscale() == "linear" and ax.get_legend() is None
            assert ax.get_ylim() == (0.0, 1.0)
            assert ax.get_xlim()[1] >= 3.0  # reaches past the paper's axis to our points
        sharegpt13 = fig.axes[0]
        assert sharegpt13.get_title() == "opt-13b, sharegpt"
        assert any(abs(line.get_xdata()[0] - 2.0) < 1e-9 for line in sharegpt13.lines
                   if line.get_linestyle() == "-."), "the paper's 0-2 req/s axis is marked"
        (legend,) = fig.legends
        labels = [t.get_text() for t in legend.get_texts()]
        assert labels[:3] == ["paged", "orca-max", "fastertransformer"] and any(label.startswith("saturated throughput") for label in labels)
    finally:
        plt.close(fig)
    fig = throughput.plot_latency_vs_rate(_points(), log=True, ylim=None, threshold=None)
    assert fig.axes[0].get_yscale() == "log" and fig.axes[0].get_xscale() == "log"
    plt.close(fig)
    with pytest.raises(ValueError):
        throughput.plot_latency_vs_rate(_points().iloc[:0])


def test_the_stopped_early_legend_entry_is_there_only_with_such_markers():
    def labels(points):
        fig = throughput.plot_latency_vs_rate(points)
        try:
            (legend,) = fig.legends
            return [t.get_text() for t in legend.get_texts()]
        finally:
            plt.close(fig)

    assert "stopped early (≥)" in labels(_points())
    assert "stopped early (≥)" not in labels(_points().assign(stopped_early=False))
    assert "stopped early (≥)" not in labels(_points().drop(columns="stopped_early"))


def test_batched_requests_plot_marks_the_papers_values():
    df = pd.DataFrame([{"trace": "sharegpt", "load": "paper", "rate": 2.0, "system": s, "avg_batched_requests": 5.0,
                        "avg_decode_batched_requests": 6.0, "time_avg_batched_requests": 5.5}
                       for s in ("paged", "orca-max")])
    fig = throughput.plot_batched_requests(df)
    diamonds = [line for line in fig.axes[0].lines if line.get_marker() == "D"]
    assert list(diamonds[0].get_ydata()) == [30.42, 7.00]
    plt.close(fig)


def test_swap_table_has_in_out_and_both():
    micro = throughput.swap_recompute_table([16, 64]).pivot_table(index="block_size", columns="operation", values="ms")
    assert list(micro.columns) == ["recompute", "swap in", "swap in + out", "swap out"]
    assert (micro["swap in + out"] == micro["swap in"] + micro["swap out"]).all()
    assert micro.loc[16, "swap out"] > micro.loc[64, "swap out"] and micro.loc[16, "recompute"] == micro.loc[64, "recompute"]


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


def _sustained(values, trace="sharegpt", threshold=0.2, peaks=None):
    rows = pd.DataFrame([{"model": "opt-13b", "trace": trace, "system": s, "threshold": threshold, "sustained_rate": r}
                         for s, r in values.items()])
    return rows.assign(throughput_rps=[peaks[s] for s in values]) if peaks else rows


def test_ratio_table_by_hand():
    table = capacity.ratio_table(pd.concat([_sustained({"paged": 4.0, "orca-oracle": 2.0, "orca-max": 0.0}),
                                            _sustained({"paged": 5.0, "orca-oracle": 4.0, "orca-max": 1.0}, threshold=0.5)]))
    oracle = table.set_index("baseline").loc["Orca (Oracle)"]
    assert oracle["÷ at 0.2 s/token"] == 2.0 and oracle["÷ at 0.5 s/token"] == 1.25
    assert oracle["paper"] == "1.7–2.7×" and oracle["rates at 0.2 (req/s)"] == "4 vs 2"
    assert table.set_index("baseline").loc["Orca (Max)", "÷ at 0.2 s/token"] == float("inf")
    assert "peak ÷" not in table  # no saturated throughputs given
    with pytest.raises(ValueError):
        capacity.ratio_table(_sustained({"orca-max": 1.0}))
    peaks = {"paged": 10.0, "orca-oracle": 4.0}
    both = capacity.ratio_table(pd.concat([_sustained({"paged": 4.0, "orca-oracle": 2.0}, peaks=peaks),
                                           _sustained({"paged": 9.0, "orca-oracle": 3.0}, threshold=0.5, peaks=peaks)]))
    assert both.loc[0, "peak ÷"] == 2.5 and both.loc[0, "÷ at 0.5 s/token"] == 3.0  # threshold-free: one value


def test_workload_names():
    assert [capacity.workload(t) for t in ("sharegpt", "alpaca", "alpaca-synthetic", "sharegpt-chat", "x.csv")] == \
        ["sharegpt", "alpaca", "alpaca", "chatbot", "sharegpt"]
