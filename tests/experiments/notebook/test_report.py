"""The HTML report, from notebooks executed with papermill (a tiny run)."""

import hashlib
import json
import re
from pathlib import Path

import nbformat
import pytest

from paged.experiments.notebook.kernel import execute_notebook
from paged.experiments.notebook.report import build_report

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow

_SMALL = [
    ("markdown", "# 09 · A small study\n\n**Claim.** Paging keeps a batch's memory close to its tokens."),
    ("code", "from paged.experiments.notebook.parameters import record_parameters, check_parameters\n\n"
             "requests: int = 3  # requests\noutput_dir: str = 'figures'  # where figures go\n"
             "record_parameters(namespace=globals())", ["parameters"]),
    ("code", "check_parameters(globals(), positive=['requests'])\nimport matplotlib.pyplot as plt, pandas as pd\n"
             "from paged.experiments.notebook.plotting import save_figure, use_style\nuse_style()\n"
             "fig, ax = plt.subplots(); ax.bar(['a', 'b'], [1, requests])\n"
             "save_figure(fig, pd.DataFrame({'x': [1, requests]}), 'fig99_small', output_dir, number='99', "
             "claim='A small figure')\nimport sys; print('stderr-noise-42', file=sys.stderr)"),
    ("markdown", "## Paper vs this run"),
    ("code", "pd.DataFrame({'claim': ['memory', 'a claim whose explanation runs well past fifty characters to its end'], "
             "'paper': ['96.3%', None], 'this run': [f'{requests}', float('nan')]})"),
    ("markdown", "## Afterwards\nnot part of the comparison"),
]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The tour (tiny parameters) and a small notebook, executed; their figures in one folder."""
    tmp = tmp_path_factory.mktemp("report")
    small = tmp / "09_small.ipynb"
    cells = [nbformat.v4.new_markdown_cell(c[1]) if c[0] == "markdown" else
             nbformat.v4.new_code_cell(c[1], metadata={"tags": c[2]} if len(c) > 2 else {}) for c in _SMALL]
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"language_info": {"name": "python"}}), small)
    figures, out = tmp / "figures", tmp / "executed"
    out.mkdir()
    for nb, params in ((ROOT / "notebooks" / "00_tour.ipynb", {"sched_num_requests": 6}), (small, {"requests": 5})):
        execute_notebook(nb, out / nb.name, {**params, "output_dir": str(figures)})
    return sorted(out.glob("*.ipynb")), figures


def test_manifest_keeps_provenance_out_of_the_image_files(executed):
    notebooks, figures = executed
    png = (figures / "fig99_small.png").read_bytes()
    assert b"requests" not in png and b"Software" not in png


def test_report_is_one_self_contained_html_file(executed, tmp_path):
    notebooks, _ = executed
    out = build_report(notebooks, tmp_path / "out" / "report.html", root=ROOT)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["report.html"]
    html = out.read_text()
    images = re.findall(r"<img\b[^>]*>", html)
    assert len(images) == 7 and all('src="data:image/png;base64,' in img for img in images)
    external = re.findall(r"""<(?:script|link|img|iframe)\b[^>]*(?:src|href)=["'](?!data:)[^"']+""", html)
    assert external == []
    assert "Paging keeps a batch&#39;s memory close to its tokens." in html or "Paging keeps a batch's memory" in html
    assert "Fig. 99" in html and "A small figure" in html  # the figures table
    assert html.count("96.3%") == 2  # the paper-vs-this-run table: its section and the notebook itself
    assert "not part of the comparison" in html and html.count("not part of the comparison") == 1
    assert "stderr-noise-42" in notebooks[1].read_text()  # it was there to drop
    assert "stderr-noise-42" not in html and "record_parameters" not in html  # no stderr, no code
    # tables whole, left-aligned, without NaN or a row-number column
    assert html.count("a claim whose explanation runs well past fifty characters to its end") == 2
    text = re.sub(r"data:[^\"']+", "", html)  # the embedded images' base64 can spell anything
    assert "NaN" not in text and "<th>0</th>" not in text and 'class="dataframe paged-table"' in html
    assert ".jp-RenderedHTMLCommon.jp-RenderedHTMLCommon table td, .jp-RenderedHTMLCommon.jp-RenderedHTMLCommon table th {\n  text-align: left;" in html


def test_report_without_notebooks_says_what_to_run(tmp_path):
    with pytest.raises(ValueError, match="make reproduce"):
        build_report([], tmp_path / "r.html")


def test_report_anchors_are_unique_and_claims_come_from_the_figures(executed, tmp_path):
    notebooks, figures = executed
    html = build_report(notebooks, tmp_path / "r.html", root=ROOT, figures=figures).read_text()
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids)), "repeated anchors"
    assert set(re.findall(r'href="#([^"]+)"', html)) <= set(ids), "a link to no anchor"
    assert 'id="figure-fig99_small"' in html and 'id="notebook-09_small"' in html
    claims = html[html.index('id="Claims"'):html.index('id="Figures"')]
    assert "this run" in claims and "token states Max 20.4%" in claims  # the paper's numbers beside this run's
    assert "not in this run&#39;s figures" in claims or "not in this run's figures" in claims  # a tiny run lacks most
    assert "09_small with <code>requests=5</code>" in html  # how each notebook ran


def test_git_state_does_not_count_the_regenerated_claims_table(tmp_path):
    import subprocess

    from paged.experiments.notebook.claims import BEGIN, END
    from paged.experiments.notebook.manifest import git_state

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{BEGIN}\n| a |\n{END}\n\nprose\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "x", "--allow-empty")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    readme.write_text(f"# x\n\n{BEGIN}\n| b, regenerated |\n{END}\n\nprose\n")
    assert git_state(tmp_path)["dirty"] is False
    readme.write_text(f"# x\n\n{BEGIN}\n| b |\n{END}\n\nprose, edited\n")
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_state(tmp_path) | {"commit": None} == {"commit": None, "dirty": True, "changed": ["README.md", "code.py"]}


def test_the_report_command_warns_of_a_figure_folder_that_does_not_exist(executed, tmp_path, capsys):
    from paged.cli import main

    notebooks, _ = executed
    with pytest.raises(SystemExit) as stop:
        main(["report", "--notebooks", str(notebooks[0].parent), "--figures", str(tmp_path / "nope"),
              "--out", str(tmp_path / "r.html")])
    assert stop.value.code == 0
    err = capsys.readouterr().err
    assert f"--figures {tmp_path / 'nope'}: no such folder" in err and (tmp_path / "r.html").is_file()
