"""The kernel notebook runs start (paged.experiments.notebook.kernel): this interpreter's, even where
another environment registered a ``python3`` kernel for the user, over an encrypted connection
(no "Kernel is running over TCP without encryption" warning), and other kernel names as Jupyter finds them.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import NoSuchKernel
from jupyter_client.manager import KernelManager

from paged.experiments.notebook.kernel import (KERNEL_NAME, ThisPythonKernelManager, encrypts_transport,
                                               execute_notebook)

WARNING = "without encryption"
ROOT = Path(__file__).resolve().parents[3]


def _print_executable(path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import sys\nprint(sys.executable)")],
                                  metadata={"kernelspec": {"name": KERNEL_NAME, "display_name": "Python 3",
                                                           "language": "python"}})
    nbformat.write(nb, path)
    return path


@pytest.fixture
def foreign_python3(tmp_path, monkeypatch):
    """A ``python3`` kernel of another environment (an interpreter that does not exist) first on
    Jupyter's search path (``JUPYTER_PATH``, as a per-user one is outside a virtual environment)."""
    spec = tmp_path / "data" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(tmp_path / "other-env" / "bin" / "python"), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (another environment)", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "data"))
    return tmp_path / "other-env"


def test_python3_is_this_interpreter_even_where_another_one_is_registered(foreign_python3, tmp_path):
    assert KernelManager(kernel_name="python3").kernel_spec.argv[0].startswith(str(foreign_python3))  # Jupyter's pick
    assert ThisPythonKernelManager(kernel_name="python3").kernel_spec.argv[0] == sys.executable
    out = execute_notebook(_print_executable(tmp_path / "nb.ipynb"), tmp_path / "out.ipynb", cwd=tmp_path)
    assert out.cells[0].outputs[0]["text"].strip() == sys.executable


@pytest.mark.parametrize("first", ["paged.experiments.notebook.kernel", "papermill"])
def test_the_engine_imports_in_either_order(first, tmp_path):
    """Papermill loads its entry points' engines while it is imported; neither order is circular.
    (From an empty folder: a stale ``paged.egg-info`` of the checkout would hide the entry point.)"""
    other = "papermill" if first != "papermill" else "paged.experiments.notebook.kernel"
    code = (f"import {first}, {other}\nfrom papermill.engines import papermill_engines as e\n"
            "from paged.experiments.notebook.kernel import ENGINE_NAME, execute_notebook\n"
            "print(e.get_engine(ENGINE_NAME).__name__ if ENGINE_NAME in e._engines else 'not registered')")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() in ("ThisPythonEngine", "not registered")  # the latter: entry points not installed


def test_other_kernel_names_are_looked_up_as_jupyter_does():
    with pytest.raises(NoSuchKernel):
        ThisPythonKernelManager(kernel_name="no-such-kernel").kernel_spec


#: A plain papermill run (papermill's own engine), then one through the project's runner; the first
#: kernel has exited (its log written) before the marker line.
_RUN = """
import sys, papermill as pm
from paged.experiments.notebook.kernel import execute_notebook
pm.execute_notebook(sys.argv[1], sys.argv[2], kernel_name="python3", progress_bar=False)
print("-- the project's runner --", file=sys.stderr, flush=True)
execute_notebook(sys.argv[1], sys.argv[2])
"""


@pytest.mark.skipif(not encrypts_transport(), reason="jupyter_client without transport_encryption, or pyzmq without CurveZMQ")
def test_runs_are_encrypted_so_the_kernel_logs_no_tcp_warning(tmp_path):
    nb = _print_executable(tmp_path / "nb.ipynb")
    run = subprocess.run([sys.executable, "-c", _RUN, str(nb), str(tmp_path / "out.ipynb")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "JUPYTER_PATH"})
    assert run.returncode == 0, run.stderr
    plain, ours = run.stderr.split("-- the project's runner --")
    assert WARNING in plain  # the kernel's warning, which a plain papermill run logs
    assert WARNING not in ours, ours
