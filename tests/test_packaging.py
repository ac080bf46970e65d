"""The package installs as a wheel that finds its data with no checkout around (importlib.resources).

The wheel is built from the repository (no build isolation: the dev environment's setuptools) and
installed with ``--no-deps`` into a fresh virtual environment; the third-party packages come from
this environment's site-packages put on ``PYTHONPATH`` (a plain path entry: its ``.pth`` files, among
them the editable install of this checkout, are not run). Everything runs from an empty folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.relative_to(ROOT).parent.parts) for p in (ROOT / "paged").rglob("__init__.py")}
    assert found | {"paged.data", "paged.data.models", "paged.data.configs"} == listed


@pytest.mark.slow
def test_wheel_runs_without_a_checkout(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(ROOT),
                    "-w", str(wheels)], check=True, capture_output=True, timeout=300)
    (wheel,) = wheels.glob("paged-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", site, str(wheel)],
                   check=True, capture_output=True, timeout=300)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    where = subprocess.run([python, "-c", "import paged, paged.workloads as w; print(paged.__file__); "
                            "t = w.get_trace('sharegpt'); print(len(t)); print(w.data_path('models/sharegpt-llama-tiny')); "
                            "print(w.data_path('configs/llama-3.1-8b.json'))"],
                           cwd=work, env=env, check=True, capture_output=True, text=True).stdout.split()
    assert where[0].startswith(site) and not where[0].startswith(str(ROOT))
    assert int(where[1]) > 1000 and where[2].startswith(site) and where[3].startswith(site)
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
