"""save_figure writes PNG, PDF and CSV, byte-identical on a rerun; notebook parameter checks."""

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from paged.notebook import UnknownParameterError, check_parameters, record_parameters
from paged.plotting import save_figure, use_style


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


def test_unknown_parameter_named():
    ns = {"num_requests": 10, "seed": 0}
    record_parameters(namespace=ns)
    ns["num_requests"] = 20  # an injected known parameter is fine
    check_parameters(ns)
    ns["num_request"] = 5  # a typo
    with pytest.raises(UnknownParameterError, match="num_request.*accepts: num_requests, seed"):
        check_parameters(ns)


def test_check_without_record():
    with pytest.raises(RuntimeError, match="record_parameters"):
        check_parameters({})
