"""Fig. 18a driver: the kernel's roofline (bytes per call, ideal time at datasheet HBM peaks) and its CPU rows."""

from __future__ import annotations

import math

import pytest
import torch

from paged.experiments.nb04_kernel import kernel as fig18a


def test_bytes_per_call_counts_the_compulsory_traffic():
    # OPT-13B's attention, fp16, batch 8 at context 64, block size 16: 4 blocks per sequence.
    t = fig18a.bytes_per_call(8, 64, 40, 40, 128, 16, 2)
    assert t["kv_bytes"] == 2 * 8 * 64 * 40 * 128 * 2 == 10_485_760
    assert t["table_bytes"] == 4 * 8 * (4 + 1)  # used entries + the context length, int32
    assert t["io_bytes"] == 2 * 8 * 40 * 128 * 2  # query read, output written
    assert t["total_bytes"] == t["kv_bytes"] + t["table_bytes"] + t["io_bytes"]
    # GQA reads each key once per KV head, not per query head; a partial last block counts its tokens only.
    gqa = fig18a.bytes_per_call(1, 17, 32, 8, 128, 16, 2)
    assert gqa["kv_bytes"] == 2 * 17 * 8 * 128 * 2 and gqa["table_bytes"] == 4 * (2 + 1)


def test_roofline_divides_by_each_datasheet_peak():
    ideal = fig18a.roofline(1_555_000_000)  # 1.555 GB
    assert set(ideal) == set(fig18a.ROOFLINE_COLUMNS.values())
    assert ideal["ideal_us_a100_40gb"] == pytest.approx(1000.0)  # one millisecond at 1,555 GB/s
    assert ideal["ideal_us_h100_sxm"] == pytest.approx(1000.0 * 1555 / 3350)
    assert ideal["ideal_us_h200"] == pytest.approx(1000.0 * 1555 / 4800)
    table = fig18a.roofline_table([64, 16384], [8, 32])
    assert len(table) == 4 and (table["ideal_us_h200"] < table["ideal_us_a100_40gb"]).all()
    big = table[(table["batch"] == 32) & (table["context_len"] == 16384)].iloc[0]
    assert big["kv_bytes"] == 2 * 32 * 16384 * 40 * 128 * 2  # 10 GiB: 6.9 ms on an A100-40GB
    assert big["ideal_us_a100_40gb"] == pytest.approx(big["total_bytes"] / 1555e3)


def test_cpu_rows_carry_the_roofline_and_no_gpu_fraction(tmp_path):
    frame = fig18a.sweep([16], [2], num_heads=4, num_kv_heads=2, head_size=32, device="cpu", repeats=1)
    row = frame.iloc[0]
    assert row["kv_bytes"] == 2 * 2 * 16 * 2 * 32 * 4 and row["total_bytes"] > row["kv_bytes"]
    assert row["ideal_us_h100_sxm"] == pytest.approx(row["total_bytes"] / 3350e3)
    assert math.isnan(row["ideal_us"]) and math.isnan(row["fraction_of_peak"])  # no GPU peak on a CPU
    from paged.experiments.notebook.plotting import save_figure

    paths = save_figure(fig18a.plot_fig18a(frame), frame, "fig18a_kernel", tmp_path)
    header = paths["csv"].read_text().splitlines()[0].split(",")
    assert {"total_bytes", "table_bytes", "ideal_us_a100_40gb", "ideal_us_h200"} <= set(header)


def test_plot_draws_the_roofline_when_the_device_has_a_peak():
    frame = fig18a.sweep([16, 32], [1], num_heads=4, num_kv_heads=2, head_size=32, device="cpu", repeats=1)
    frame["ideal_us"] = frame["paged_us"] / 2  # as a GPU row with a known peak would have
    fig = fig18a.plot_fig18a(frame)
    labels = [text.get_text() for text in fig.axes[0].get_legend().get_texts()]
    assert "HBM roofline" in labels


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error")
def test_compare_launches_needs_a_gpu():
    with pytest.raises(ValueError, match="needs a CUDA device"):
        fig18a.compare_launches(1, 16, {"a": {}}, device=torch.device("cpu"))


@pytest.mark.parametrize("roofline", [False, True])
def test_the_legends_stand_outside_the_panels_so_they_cover_no_line(roofline):
    import matplotlib.pyplot as plt

    frame = fig18a.sweep([16, 64], [1, 4], num_heads=4, num_kv_heads=2, head_size=32, device="cpu", repeats=1)
    if roofline:
        frame["ideal_us"] = frame["paged_us"] / 2
    fig = fig18a.plot_fig18a(frame)
    try:
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes[:2]:
            legend, panel = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
            assert legend.x0 >= panel.x1 - 1, "a legend overlaps its panel's data area"
        assert not fig.axes[0].get_legend().get_window_extent(renderer).overlaps(fig.axes[1].get_window_extent(renderer))
    finally:
        plt.close(fig)
