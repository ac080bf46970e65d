"""run_notebook: the figure set committed only by a run that ends, provenance recorded, Ctrl-C quiet and clean."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from paged.experiments.notebook import manifest
from paged.experiments.notebook.execute import notebook_defaults, run_notebook
from paged.experiments.notebook.figure_set import STAGING_PREFIX

pytestmark = pytest.mark.slow

_PARAMS = ("from paged.experiments.notebook.parameters import record_parameters, check_parameters\n\n"
           "height: int = 3  # bar height\nfail: bool = False  # raise after saving\n"
           "pause: float = 0.0  # seconds to sleep after saving\npid_file: str = ''  # where to write the kernel's pid\n"
           "output_dir: str = 'figures'  # where figures go\nrecord_parameters(namespace=globals())")
_SAVE = ("check_parameters(globals(), positive=['height'])\nimport os, time\nimport matplotlib.pyplot as plt, pandas as pd\n"
         "from paged.experiments.notebook.plotting import save_figure, use_style\nuse_style()\n"
         "for name in ('first', 'second'):\n"
         "    fig, ax = plt.subplots(); ax.bar(['a', 'b'], [1, height])\n"
         "    save_figure(fig, pd.DataFrame({'h': [1, height]}), name, output_dir, claim='A small figure')\n"
         "if pid_file:\n    open(pid_file, 'w').write(str(os.getpid()))\n"
         "time.sleep(pause)\nif fail:\n    raise RuntimeError('the notebook failed on purpose')")


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A notebook that saves two figures (then can fail or pause), and one clean run of it."""
    folder = tmp_path_factory.mktemp("execute")
    nb = folder / "09_small.ipynb"
    cells = [nbformat.v4.new_code_cell(_PARAMS, metadata={"tags": ["parameters"]}), nbformat.v4.new_code_cell(_SAVE)]
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"language_info": {"name": "python"}}), nb)
    run = run_notebook(nb, folder / "out" / "09_small.ipynb", {"height": 4}, figures=folder / "figures", runner="test")
    return nb, folder, run


def _files(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in folder.iterdir() if not p.name.startswith(".")}


def test_a_run_commits_its_figures_with_their_provenance(small):
    nb, folder, run = small
    assert run.error is None and sorted(run.made) == ["first", "second"]
    assert run.parameters == {"height": 4, "output_dir": "figures"}  # relative to the kernel's folder
    executed = nbformat.read(run.output, as_version=4)
    assert executed.metadata["paged"]["fingerprint"] == run.fingerprint
    data = manifest.read_manifest(folder / "figures")
    assert manifest.manifest_problems(folder / "figures", data) == []
    record = data["notebooks"]["09_small"]
    assert record["fingerprint"] == run.fingerprint and record["figures"] == ["first", "second"]
    assert "paged/experiments/notebook/plotting.py" in record["code"] and "paged/cli.py" not in record["code"]
    for entry in data["figures"]:
        assert entry["run"] == "test" and entry["fingerprint"] == run.fingerprint
        assert entry["parameters"]["height"] == 4 and entry["notebook"] == "09_small"
    assert not [p for p in (folder / "figures").iterdir() if p.name.startswith(STAGING_PREFIX)]
    assert not [p for p in (folder / "out").iterdir() if p.name.startswith(".")]
    assert notebook_defaults(nb)["output_dir"] == "figures"


def test_a_failed_run_keeps_the_previous_set(small):
    nb, folder, _ = small
    before = _files(folder / "figures")
    run = run_notebook(nb, folder / "out" / "09_small.ipynb", {"height": 7, "fail": True}, figures=folder / "figures",
                       failed_output=folder / "out" / "partial" / "09_small.ipynb")
    assert run.error == "RuntimeError: the notebook failed on purpose" and run.made == []
    assert run.output.endswith("partial/09_small.ipynb") and Path(run.output).is_file()
    assert _files(folder / "figures") == before
    assert manifest.manifest_problems(folder / "figures") == []


def test_output_dir_and_figures_must_agree(small, tmp_path):
    nb, folder, _ = small
    with pytest.raises(ValueError, match="name different folders"):
        run_notebook(nb, tmp_path / "x.ipynb", {"output_dir": "elsewhere"}, figures=tmp_path / "figures")


def test_ctrl_c_prints_one_line_and_leaves_the_old_set(small):
    """Ctrl-C to the whole process group, as a terminal sends it, while the run's figures are staged."""
    nb, folder, _ = small
    figures, pid_file = folder / "figures", folder / "kernel.pid"
    before = _files(figures)
    cmd = [sys.executable, "-m", "paged.experiments.notebook.execute", str(nb), str(folder / "out" / "c.ipynb"),
           "--figures", str(figures), "-p", "height", "9", "-p", "pause", "60", "-p", "pid_file", str(pid_file)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not pid_file.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pid_file.exists(), proc.communicate()
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (130, "", "interrupted\n")
    assert _files(figures) == before
    leftovers = [p.name for p in figures.iterdir() if p.name.startswith(STAGING_PREFIX)]
    leftovers += [p.name for p in (folder / "out").iterdir() if p.name.startswith(".") or p.name.startswith("c.")]
    assert leftovers == []
    kernel = int(pid_file.read_text())
    for _ in range(50):  # the kernel is gone (killed with its process group)
        try:
            os.kill(kernel, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"kernel {kernel} still runs")


def test_the_command_line_runs_one_notebook(small, tmp_path):
    nb, _, _ = small
    done = subprocess.run([sys.executable, "-m", "paged.experiments.notebook.execute", str(nb), str(tmp_path / "o.ipynb"),
                           "--figures", str(tmp_path / "f"), "-y", "height: 2", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert run["error"] is None and sorted(run["made"]) == ["first", "second"] and done.stderr == ""


def test_a_kernel_that_dies_before_its_first_reply_is_started_once_more(small, tmp_path, monkeypatch):
    """Kernels started at once can be handed the same port and one dies before replying, having run nothing:
    the run starts it once more; a second such death is the run's error."""
    import papermill as pm

    nb, _, _ = small
    real, calls = pm.execute_notebook, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) <= fails:
            raise RuntimeError("Kernel died before replying to kernel_info")
        return real(*args, **kwargs)

    monkeypatch.setattr(pm, "execute_notebook", flaky)
    fails = 1
    run = run_notebook(nb, tmp_path / "out" / "09_small.ipynb", {"height": 5}, figures=tmp_path / "figures", runner="test")
    assert run.error is None and len(calls) == 2
    calls.clear()
    fails = 2
    with pytest.raises(RuntimeError, match="kernel_info"):
        run_notebook(nb, tmp_path / "out2" / "09_small.ipynb", {"height": 5}, figures=tmp_path / "figures2", runner="test")
    assert len(calls) == 2
