"""Tables in notebooks and the report: whole cells, no NaN, no row-number column; the report's header."""

import subprocess

import nbformat
import numpy as np
import pandas as pd
import pytest

from paged.experiments.notebook.manifest import git_state
from paged.experiments.notebook.report import report_notebook
from paged.experiments.notebook.tables import MISSING, TABLE_CLASS, table_html

LONG = ("the paper's number and ours differ because the cost model's step time is 32 ms per token where "
        "the paper's batch implies 48 ms")


def test_a_table_keeps_long_text_whole_and_shows_missing_values_as_a_dash():
    frame = pd.DataFrame({"claim": [LONG, "short"], "ratio": [1.78, np.nan], "note": [None, "x"]})
    html = table_html(frame)
    assert LONG in html and "..." not in html and "…" not in html
    assert "NaN" not in html and "None" not in html and html.count(f"<td>{MISSING}</td>") == 2
    assert "<th></th>" not in html and "<th>0</th>" not in html  # no row-number column
    assert f'class="dataframe {TABLE_CLASS}"' in html and "text-align: left" in html and "white-space: normal" in html
    assert frame["note"].isna().sum() == 1  # the caller's frame is not changed


def test_a_meaningful_index_becomes_leading_columns():
    frame = pd.DataFrame({"system": ["paged", "orca-max"], "rate": [3.06, 0.86]}).set_index("system")
    html = table_html(frame)
    assert html.index("<th>system</th>") < html.index("<th>rate</th>") and "<td>paged</td>" in html


def test_a_long_table_says_how_many_rows_it_shows():
    html = table_html(pd.DataFrame({"x": range(250)}), max_rows=200)
    assert "The first 200 of 250 rows." in html and "<td>199</td>" in html and "<td>200</td>" not in html


def test_in_a_kernel_every_dataframe_displays_as_such_a_table():
    from IPython.core.interactiveshell import InteractiveShell

    from paged.experiments.notebook.tables import use_table_format

    shell = InteractiveShell.instance()
    try:
        assert use_table_format()
        data, _ = shell.display_formatter.format(pd.DataFrame({"claim": [LONG], "v": [np.nan]}))
        assert LONG in data["text/html"] and "NaN" not in data["text/html"]
    finally:
        shell.display_formatter.formatters["text/html"].pop(pd.DataFrame, None)
        InteractiveShell.clear_instance()


@pytest.fixture
def repo(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "fig.csv").write_text("a\n1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    return tmp_path


def _header(repo) -> str:
    nb = repo / "01_x.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 01 · x")]), nb)
    return report_notebook([nb], root=repo).cells[0].source


def test_regenerated_figures_are_not_uncommitted_code(repo):
    (repo / "figures" / "fig.csv").write_text("a\n2\n")
    assert git_state(repo, ignore=())["dirty"] and not git_state(repo)["dirty"]  # default: regenerated folders ignored
    header = _header(repo)
    assert "the code as committed" in header and "uncommitted" not in header
    (repo / "code.py").write_text("x = 2\n")
    assert "with uncommitted changes to `code.py`" in _header(repo)
