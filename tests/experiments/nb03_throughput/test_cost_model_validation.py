"""Notebook 03's validation figure: the cost model's iteration times beside the sum of measured kernels."""

import pytest

from paged.experiments.nb03_throughput import cost_model_validation as validation


@pytest.fixture(scope="module")
def points():
    return validation.iteration_points()


def test_every_kind_gpu_and_gpu_count_is_compared_within_the_stated_range(points):
    assert set(points["kind"]) == {"decode", "prefill", "without attention"}
    assert set(points["gpu"]) == {"a100", "h100"} and set(points["tp"]) == {1, 4, 8}
    assert set(points["model"]) == set(validation.TWINS)
    decode = points[points["kind"] == "decode"]
    assert set(decode["context"]) == {512, 1024, 2048} and decode["tokens"].max() == 256
    assert points["ratio"].between(0.78, 1.25).all()  # every compared iteration (tests/sim: each operator)
    assert decode["ratio"].between(0.9, 1.1).all()
    assert (points["ratio"] == points["simulated_s"] / points["measured_s"]).all()


def test_summary_and_figure(points):
    summary = validation.validation_summary(points)
    assert summary["points"].sum() == len(points) and (summary["lowest"] <= summary["highest"]).all()
    fig = validation.plot_validation(points)
    assert len(fig.axes) == 2
    with pytest.raises(ValueError, match="no points"):
        validation.plot_validation(points.iloc[:0])
