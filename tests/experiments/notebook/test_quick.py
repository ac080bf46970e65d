"""make quick (paged.experiments.notebook.quick): every notebook with its small parameters into
build/quick/, figures never in figures/; a failed or unclean notebook fails the run."""

from pathlib import Path

import nbformat
import pytest

from paged.experiments.notebook import quick

ROOT = Path(__file__).resolve().parents[3]


def test_every_notebook_has_quick_parameters_and_writes_under_the_quick_folder(tmp_path):
    jobs = quick.quick_jobs(ROOT / "notebooks", tmp_path / "quick")
    stems = sorted(Path(job["notebook"]).stem for job in jobs)
    assert stems == sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) == sorted(quick.QUICK_PARAMETERS)
    for job in jobs:
        assert Path(job["output"]).parent == tmp_path / "quick"
        assert job["parameters"]["output_dir"] == str(tmp_path / "quick" / "figures")
    assert Path(jobs[0]["notebook"]).stem == "05_engine"  # the longest first


def test_missing_notebooks_or_parameters_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no notebooks"):
        quick.quick_jobs(tmp_path, tmp_path / "out")
    nbformat.write(nbformat.v4.new_notebook(), tmp_path / "97_new.ipynb")
    with pytest.raises(KeyError, match=r"\['97_new'\]: add them to QUICK_PARAMETERS"):
        quick.quick_jobs(tmp_path, tmp_path / "out")


def test_the_make_target_runs_the_module_into_build_quick():
    makefile = (ROOT / "Makefile").read_text()
    assert "\nquick: $(STAMP)" in makefile
    assert "$(PY) -m paged.experiments.notebook.quick --notebooks notebooks --out build/quick" in makefile


def _notebook(path, code):
    cells = [nbformat.v4.new_code_cell("output_dir = 'figures'", metadata={"tags": ["parameters"]}),
             nbformat.v4.new_code_cell(code)]
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"language_info": {"name": "python"}}), path)


def test_a_failed_or_unclean_notebook_fails_the_run(tmp_path, monkeypatch, capsys):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    _notebook(notebooks / "97_clean.ipynb", "print('fine')")
    _notebook(notebooks / "98_noisy.ipynb", "import sys; print('a warning', file=sys.stderr)")
    monkeypatch.setattr(quick, "QUICK_PARAMETERS", {"97_clean": {}, "98_noisy": {}})
    status = quick.main(["--notebooks", str(notebooks), "--out", str(tmp_path / "quick"), "--workers", "1"])
    out = capsys.readouterr().out
    assert status == 1
    assert "97_clean" in out and "ok" in out.split("97_clean")[1].splitlines()[0]
    assert "FAILED" in out.split("98_noisy")[1].splitlines()[0] and "stderr: a warning" in out
    assert (tmp_path / "quick" / "97_clean.ipynb").exists()


def test_ctrl_c_leaves_no_temporary_notebook_and_returns_130(tmp_path, monkeypatch, capsys):
    out = tmp_path / "quick"

    def interrupted(notebooks_dir, out_dir, *, workers):
        out.mkdir()
        (out / "00_done.ipynb").write_text("{}")  # a notebook that finished
        (out / ".05_engine.abc123.tmp.ipynb").write_text("{")  # a killed worker's half-written one
        raise KeyboardInterrupt

    monkeypatch.setattr(quick, "run_quick", interrupted)
    assert quick.main(["--out", str(out)]) == 130
    assert capsys.readouterr().err == "interrupted\n"
    assert sorted(p.name for p in out.iterdir()) == ["00_done.ipynb"]
