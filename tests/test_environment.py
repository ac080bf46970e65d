"""pyproject.toml is the one source of dependencies; environment.yml gives conda users the same."""

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_environment_yml_installs_the_project_with_its_dev_extra():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    assert "python=3.11" in deps and "pip" in deps
    pip_sections = [d["pip"] for d in deps if isinstance(d, dict) and "pip" in d]
    assert pip_sections == [["-c constraints.txt", "-e .[dev]"]], "environment.yml must install the project, not list packages"
    conda_pkgs = [d for d in deps if isinstance(d, str)]
    assert sorted(conda_pkgs) == ["pip", "python=3.11"], "packages belong in pyproject.toml"


def test_make_venv_installs_nothing_the_conda_environment_lacks():
    """make venv's recipe is the same install (the project with its dev extra) and nothing besides,
    e.g. no Jupyter kernel registered only there: the notebooks name ``python3``, which both have."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("$(STAMP): pyproject.toml constraints.txt\n", 1)[1].split("\n\n", 1)[0].splitlines()
    steps = [line.strip() for line in recipe if line.strip() and not line.strip().startswith(("@test", "@touch"))]
    assert steps == ["$(PY) -m pip install --quiet --upgrade pip",
                     '$(PY) -m pip install --quiet -c constraints.txt -e ".[dev]"']


def test_pyproject_supports_environment_python_and_pins_cpu_torch():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"].startswith(">=3.")
    minimum = tuple(int(x) for x in project["requires-python"][2:].split("."))
    assert minimum <= (3, 11)
    assert "torch==2.13.0" in project["dependencies"]
    assert "dev" in project["optional-dependencies"]


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and "make reproduce" in readme
    assert "make test" in ci


def test_this_environment_has_the_pinned_versions_that_decide_figure_bytes():
    """constraints.txt pins what draws, subsets fonts and compresses (make venv and environment.yml
    install with it), and the figures' manifest records those versions: they must be what runs here."""
    from importlib import metadata

    from paged.experiments.notebook.provenance import FIGURE_PACKAGES

    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    assert {"matplotlib", "fonttools", "pillow", "numpy", "pandas", "seaborn"} <= set(pins)
    assert set(pins) <= set(FIGURE_PACKAGES)  # the manifest records every pinned version
    assert {name: metadata.version(name) for name in pins} == pins
