"""save_figure writes PNG, PDF and CSV, byte-identical on a rerun; notebook parameter checks."""

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from paged.experiments.plotting import save_figure, use_style


def _figure():
    use_style()
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [3, 1, 2])
    return fig


def test_save_figure_is_byte_identical_on_rerun(tmp_path):
    data = pd.DataFrame({"x": [1, 2, 3], "y": [3.0, 1.0, 2.0]})
    first = save_figure(_figure(), data, "demo", tmp_path / "a")
    second = save_figure(_figure(), data, "demo", tmp_path / "b")
    assert set(first) == {"png", "pdf", "csv"}
    for ext in first:
        assert first[ext].read_bytes() == second[ext].read_bytes(), ext
    assert first["csv"].read_text().splitlines()[0] == "x,y"


@pytest.mark.parametrize("name", ["", "a/b", "..\\x"])
def test_save_figure_rejects_paths_as_names(tmp_path, name):
    with pytest.raises(ValueError):
        save_figure(_figure(), pd.DataFrame(), name, tmp_path)
