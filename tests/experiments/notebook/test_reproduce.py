"""make reproduce reruns exactly what is out of date, and says why (provenance fingerprints, the manifest)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from paged.experiments.notebook import provenance
from paged.experiments.notebook.reproduce import plan

ROOT = Path(__file__).resolve().parents[3]


def test_a_notebook_depends_on_the_modules_it_reaches_and_no_others():
    frag = provenance.code_dependencies(ROOT / "notebooks" / "01_fragmentation.ipynb")
    engine = provenance.code_dependencies(ROOT / "notebooks" / "05_engine.ipynb")
    assert "paged/experiments/nb01_fragmentation/fragmentation.py" in frag
    assert "paged/block/allocator.py" in frag and "paged/__init__.py" in frag  # packages above run first
    assert "paged/cli.py" not in frag and "paged/cli.py" not in engine
    assert not any(p.startswith("paged/engine/") for p in frag)  # notebook 01 never runs the engine
    assert "paged/engine/llm.py" in engine and "paged/kernels/paged_attention_cpu.c" in engine  # C source too


def test_the_fingerprint_follows_used_code_only(tmp_path, monkeypatch):
    """A copy of the package: editing cli.py keeps notebook 01's fingerprint; editing a module it uses changes it."""
    package = tmp_path / "paged"
    shutil.copytree(ROOT / "paged", package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(provenance, "PACKAGE_ROOT", package)
    provenance._parsed.cache_clear()
    nb = ROOT / "notebooks" / "01_fragmentation.ipynb"
    env = {"fixed": True}
    first = provenance.fingerprint(nb, {}, env=env)["fingerprint"]
    (package / "cli.py").write_text((package / "cli.py").read_text() + "\n# an edit\n")
    assert provenance.fingerprint(nb, {}, env=env)["fingerprint"] == first
    used = package / "experiments" / "nb01_fragmentation" / "fragmentation.py"
    used.write_text(used.read_text() + "\n# an edit\n")
    assert provenance.fingerprint(nb, {}, env=env)["fingerprint"] != first
    assert provenance.fingerprint(nb, {"seed": 1}, env=env)["fingerprint"] != provenance.fingerprint(nb, {}, env=env)["fingerprint"]
    provenance._parsed.cache_clear()


_CELLS = [("from paged.experiments.notebook.parameters import record_parameters, check_parameters\n\n"
           "height: int = 3  # bar height\noutput_dir: str = '../figures'  # where figures go\n"
           "record_parameters(namespace=globals())", ["parameters"]),
          ("check_parameters(globals(), positive=['height'])\nimport matplotlib.pyplot as plt, pandas as pd\n"
           "from paged.experiments.notebook.plotting import save_figure, use_style\nuse_style()\n"
           "fig, ax = plt.subplots(); ax.bar(['a', 'b'], [1.5, height])\n"
           "save_figure(fig, pd.DataFrame({'h': [height]}), 'fig_small', output_dir, claim='A small figure')", [])]


@pytest.mark.slow
def test_reproduce_reruns_what_another_run_made_and_nothing_else(tmp_path):
    """A checkout-like layout: notebooks/09_small.ipynb, figures/, build/notebooks/."""
    (tmp_path / "notebooks").mkdir()
    nb = tmp_path / "notebooks" / "09_small.ipynb"
    cells = [nbformat.v4.new_code_cell(src, metadata={"tags": tags}) for src, tags in _CELLS]
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}}), nb)
    figures, executed = tmp_path / "figures", tmp_path / "build" / "notebooks"

    def reproduce(*args):
        return subprocess.run([sys.executable, "-m", "paged.experiments.notebook.reproduce", "--notebooks", "notebooks",
                               "--readme", "", *args], cwd=tmp_path, capture_output=True, text=True, timeout=300)

    assert [s.reasons for s in plan([nb], figures, executed)] == [[f"{figures}/MANIFEST.json has no run of it by make reproduce"]]
    first = reproduce()
    assert first.returncode == 0 and "09_small" in first.stdout and "done in" in first.stdout, first.stderr
    assert first.stderr == ""
    assert plan([nb], figures, executed)[0].reasons == []  # up to date: make reproduce prints so and runs nothing
    # a run outside make with another parameter overwrites the figure: the manifest says so, reproduce notices
    from paged.experiments.notebook.kernel import execute_notebook

    execute_notebook(nb, tmp_path / "lab.ipynb", {"height": 7})
    entry = json.loads((figures / "MANIFEST.json").read_text())["figures"][0]
    assert entry["run"] == "kernel" and entry["parameters"]["height"] == 7 and entry["fingerprint"] is None
    (reason,) = plan([nb], figures, executed)[0].reasons
    assert reason.startswith("fig_small made by a run outside make") and "height=7 (default 3)" in reason
    # a figure file edited by hand
    reproduce()
    (figures / "fig_small.csv").write_text("h\n0\n")
    assert plan([nb], figures, executed)[0].reasons == ["fig_small.csv is missing or not the file its manifest entry describes"]
