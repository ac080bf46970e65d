"""The package installs as a wheel that finds its data, and runs its notebooks, with no checkout around.

The wheel is built offline from the files of this checkout that git tracks or would track (a
copy, so stale build output in the checkout cannot slip into it; no build isolation: the dev
environment's setuptools) and installed with ``pip install --no-index --no-deps`` into a fresh
virtual environment. That environment's third-party packages come from this (dev) environment's
site-packages through one path line in a ``.pth`` file of the fresh one: an honest stand-in for
an offline install of the same pinned versions, with two limits said here: a path line runs none
of the dev environment's own ``.pth`` files (so its editable install of this checkout is not
importable; the test checks that ``paged`` is the wheel's), and no dependency is resolved by pip
(the test checks instead that every requirement the wheel declares is met there). Nothing of
Jupyter is registered in the fresh environment (no kernel spec, no ``jupyter`` data files), as
after a plain ``pip install`` of the wheel; an empty per-user Jupyter folder stands for a fresh
user. Everything runs from an empty folder outside the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path

import nbformat
import pytest

from paged.experiments.notebook.outputs import output_problems
from paged.experiments.notebook.quick import QUICK_PARAMETERS

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.relative_to(ROOT).parent.parts) for p in (ROOT / "paged").rglob("__init__.py")}
    assert found | {"paged.data", "paged.data.models", "paged.data.configs"} == listed


def _source_tree(dest: Path) -> Path:
    """The checkout's files that git tracks or would track (untracked, not ignored), copied to ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """``(python, site, env, work)``: the fresh environment's interpreter and site-packages, the
    environment variables to run it with, and an empty folder outside the checkout."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("building the wheel from the checkout needs git and a git checkout")
    tmp = tmp_path_factory.mktemp("wheel")
    source = _source_tree(tmp / "source")
    wheels = tmp / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    str(source), "-w", str(wheels)], check=True, capture_output=True, timeout=300)
    (wheel,) = wheels.glob("paged-*.whl")
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "dev-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([python, "-m", "pip", "install", "--no-index", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    work = tmp / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "PYTHON", "VIRTUAL_ENV"))}
    env.update(JUPYTER_DATA_DIR=str(tmp / "user-jupyter"), JUPYTER_CONFIG_DIR=str(tmp / "user-jupyter-config"),
               PATH=f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    return python, site, env, work


@pytest.mark.slow
def test_wheel_finds_its_data_without_a_checkout(installed):
    python, site, env, work = installed
    where = subprocess.run([python, "-c", "import paged, paged.workloads as w; print(paged.__file__); "
                            "t = w.get_trace('sharegpt'); print(len(t)); print(w.data_path('models/sharegpt-llama-tiny')); "
                            "print(w.data_path('configs/llama-3.1-8b.json'))"],
                           cwd=work, env=env, check=True, capture_output=True, text=True).stdout.split()
    assert where[0].startswith(site) and not where[0].startswith(str(ROOT))
    assert int(where[1]) > 1000 and where[2].startswith(site) and where[3].startswith(site)
    assert (Path(where[2]) / "config.json").is_file()  # the tiny model itself, not only its folder
    source = subprocess.run([python, "-c", "from importlib import resources; "
                             "print(resources.files('paged.kernels') / 'paged_attention_cpu.c')"],
                            cwd=work, env=env, check=True, capture_output=True, text=True).stdout.strip()
    assert source.startswith(site) and Path(source).is_file()  # the CPU kernel's C source, compiled on first use
    engine = subprocess.run([python, "-c", "from papermill.engines import papermill_engines as e; "
                             "print(e.get_engine('paged').__module__)"],
                            cwd=work, env=env, check=True, capture_output=True, text=True).stdout.strip()
    assert engine == "paged.experiments.notebook.papermill_engine"  # `papermill --engine paged`, from the wheel's entry points
    out = subprocess.run([python, "-m", "paged", "fragmentation", "--json", "--num-requests", "200"],
                         cwd=work, env=env, check=True, capture_output=True, text=True, timeout=300)
    result = json.loads(out.stdout)
    assert set(result) == {"orca-max", "orca-pow2", "orca-oracle", "paged"}
    # the shipped model by its name, from the wheel's own files
    code = ("from paged import LLM, SamplingParams, shipped_model_path; llm = LLM('paged-tiny', num_gpu_blocks=16); "
            "print(shipped_model_path()); print(len(llm.generate(['User: hi'], SamplingParams(max_tokens=2))[0].outputs[0].token_ids))")
    model = subprocess.run([python, "-c", code], cwd=work, env=env, check=True, capture_output=True, text=True,
                           timeout=300).stdout.split()
    assert model[0].startswith(site) and model[1] == "2"


@pytest.mark.slow
def test_wheel_meets_its_requirements_in_the_fresh_environment(installed):
    python, _, env, work = installed
    check = ("import importlib.metadata as md, sys\n"
             "from packaging.requirements import Requirement\n"
             "missing = []\n"
             "for text in md.requires('paged'):\n"
             "    req = Requirement(text)\n"
             "    if req.marker is not None and not req.marker.evaluate({'extra': ''}):\n"
             "        continue\n"
             "    try:\n"
             "        version = md.version(req.name)\n"
             "    except md.PackageNotFoundError:\n"
             "        version = None\n"
             "    if version is None or not req.specifier.contains(version, prereleases=True):\n"
             "        missing.append(f'{req} (found {version})')\n"
             "print(missing)\n")
    out = subprocess.run([python, "-c", check], cwd=work, env=env, check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_a_plain_papermill_run_of_the_tour_works_from_the_wheel(installed):
    """``papermill notebooks/00_tour.ipynb out.ipynb`` as a user types it after ``pip install``: the
    notebook names ``python3``, which the fresh environment has without registering anything."""
    python, site, env, work = installed
    figures = work / "figures"
    params = QUICK_PARAMETERS["00_tour"]
    args = [a for name, value in params.items() for a in ("-p", name, str(value))]
    run = subprocess.run([python, "-m", "papermill", str(ROOT / "notebooks" / "00_tour.ipynb"), "tour.ipynb",
                          "-p", "output_dir", str(figures), *args],
                         cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    executed = nbformat.read(str(work / "tour.ipynb"), as_version=4)
    assert executed.metadata["papermill"]["exception"] is None
    assert output_problems(executed) == []
    assert {p.stem for p in figures.glob("*.png")} >= {"tour_reservation", "tour_scheduler"}
    spec = subprocess.run([python, "-c", "from jupyter_client.kernelspec import KernelSpecManager as M; "
                           "print(M().get_kernel_spec('python3').argv[0])"],
                          cwd=work, env=env, check=True, capture_output=True, text=True).stdout.strip()
    assert spec == str(python)  # ipykernel's own spec, nothing registered: this environment's interpreter
