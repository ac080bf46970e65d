"""figure_problems finds what a paper would not print, and passes a clean figure."""

import warnings

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.ticker import MaxNLocator

from paged.experiments.notebook.figure_check import FigureProblemWarning, figure_problems
from paged.experiments.notebook.plotting import save_figure, title_figure, use_style


@pytest.fixture
def axes():
    use_style()
    fig, ax = plt.subplots(figsize=(4, 3))
    yield fig, ax
    plt.close(fig)


def test_a_clean_figure_has_no_problem(axes):
    fig, ax = axes
    ax.plot([0.5, 1.5, 2.5, 3.5], [0.1, 0.4, 0.3, 0.8], marker="o", label="paged")
    ax.set_xlabel("request rate (req/s)")
    ax.set_ylabel("normalized latency (s/token)")
    ax.legend(loc="upper left")
    title_figure(fig, "A clean figure", 12)
    assert figure_problems(fig) == []


def test_text_over_text(axes):
    fig, ax = axes
    ax.plot([0, 0.5], [0, 0.5])
    ax.set_title("tokens per second of every system")
    ax.text(0.5, 1.02, "an annotation right on the title", transform=ax.transAxes, ha="center")
    (problem,) = figure_problems(fig)
    assert problem.startswith("text over text: axes 0 text") and "'tokens per second" in problem and "an annotation" in problem


def test_scientific_ticks_on_a_short_log_axis(axes):
    fig, ax = axes
    ax.plot([0.5, 1.5, 2.5], [2, 4, 6])
    ax.set_yscale("log")
    problems = figure_problems(fig)
    assert len(problems) == 1 and problems[0].startswith("axes 0 y: log-axis ticks in exponent form")


def test_fractional_ticks_on_a_count_axis_and_the_fix(axes):
    fig, ax = axes
    ax.plot([2, 3, 4], [10.5, 20.25, 30.0])  # x: beam widths, whole numbers
    assert [p.split(":")[0] for p in figure_problems(fig)] == ["axes 0 x"]
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    assert figure_problems(fig) == []


def test_a_legend_over_a_line(axes):
    fig, ax = axes
    ax.plot(range(10), range(10), label="paged")
    ax.legend(loc="center")
    (problem,) = figure_problems(fig)
    assert problem == "axes 0: the legend covers line 'paged'; move it (loc=..., or outside the axes)"
    ax.legend(loc="upper left")
    assert figure_problems(fig) == []


def test_a_legend_over_bars(axes):
    fig, ax = axes
    ax.bar(["a", "b", "c"], [3.5, 3.2, 3.7], label="blocks saved")
    ax.legend(loc="lower center")
    assert figure_problems(fig) == ["axes 0: the legend covers a bar; move it (loc=..., or outside the axes)"]


def test_save_figure_warns_for_each_problem(axes, tmp_path):
    fig, ax = axes
    ax.plot([2, 3, 4], [1.5, 2.5, 3.5])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        save_figure(fig, pd.DataFrame({"x": [2]}), "demo", tmp_path, show=False)
    assert [str(w.message).split(":")[0] for w in caught if w.category is FigureProblemWarning] == ["figure demo"]


def test_exponent_ticks_on_a_base_2_axis_and_the_fix(axes):
    from paged.experiments.notebook.plotting import plain_log_ticks

    fig, ax = axes
    ax.plot([1, 256], [0.5, 0.25])
    ax.set_xscale("log", base=2)
    assert [p.split(":")[0] for p in figure_problems(fig)] == ["axes 0 x"]
    plain_log_ticks(ax.xaxis)
    assert figure_problems(fig) == []
    assert "256" in [t.get_text() for t in ax.get_xticklabels()]


def test_a_legend_entry_for_a_line_not_drawn(axes):
    from matplotlib.lines import Line2D

    fig, ax = axes
    ax.plot([0.5, 1.5], [0.5, 1.0], color="C0")
    handles = [Line2D([], [], color="C0", label="paged"), Line2D([], [], color="0.55", linestyle="-.", label="paper's axis")]
    fig.legend(handles=handles, loc="outside right upper")
    assert figure_problems(fig) == ["legend entry \"paper's axis\" describes no line the figure draws"]


def test_rotated_tick_labels_are_measured_as_drawn(axes):
    fig, ax = axes
    names = ["llama-3.1-8b", "mistral-7b-v0.3", "qwen2.5-7b", "gemma-2b", "llama-3.1-70b"]
    ax.bar(names, [128, 128, 56, 18, 320])
    ax.tick_params(axis="x", rotation=35)
    assert figure_problems(fig) == []  # their upright extents overlap; the turned boxes do not
    ax.tick_params(axis="x", rotation=5)
    assert any(p.startswith("text over text: axes 0 x tick label") for p in figure_problems(fig))
