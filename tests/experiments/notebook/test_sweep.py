"""The sweep engine (paged.experiments.notebook.sweep): same results in-process, on loky, on Dask, on Ray; notebook sweeps."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import nbformat
import pandas as pd
import pytest

from paged.experiments import serving
from paged.experiments.notebook.jobs import SweepFailed, cluster_for_children
from paged.experiments.notebook.run_folder import SweepLock, SweepLocked, run_name
from paged.experiments.notebook.sweep import cluster, parameter_grid, run_jobs, sweep_notebook

POINTS = [dict(system=s, rate=r, num_requests=40) for s in ("paged", "orca-max") for r in (1.0, 4.0)]


def _local():
    return serving.sweep(POINTS, workers=1).drop(columns=list(serving.WALL_TIME_COLUMNS))


def test_processes_give_the_in_process_results():
    pd.testing.assert_frame_equal(serving.sweep(POINTS, workers=2).drop(columns=list(serving.WALL_TIME_COLUMNS)),
                                  _local())


def _square(x):
    if x < 0:
        raise ValueError(f"x must be ≥ 0, got {x}")
    return x * x


_CALLS = []


def _counted_square(x):
    _CALLS.append(x)
    return _square(x)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failing_job_does_not_stop_the_others_and_a_rerun_runs_only_it(workers):
    jobs = [{"x": 2}, {"x": -1}, {"x": 3}, {"x": -2}]
    with pytest.raises(SweepFailed) as failed:
        run_jobs(_square, jobs, workers=workers, desc="squares")
    err = failed.value
    assert str(err) == ("2 of 4 jobs of 'squares' failed, first _square(x=-1): ValueError: x must be ≥ 0, got -1 "
                        "(the other 2 finished; the same call again reruns only the failed 2)")
    assert err.results == [4, None, 9, None] and [f.index for f in err.failures] == [1, 3]
    assert "raise ValueError" in err.failures[1].traceback and err.failures[1].error.endswith("got -2")
    assert "raise ValueError" in str(err.__cause__)  # the worker's traceback, shown above the error
    _CALLS.clear()
    assert run_jobs(_counted_square, [{"x": 2}, {"x": 3}], workers=1) == [4, 9]
    with pytest.raises(SweepFailed):
        run_jobs(_counted_square, [{"x": 2}, {"x": -1}], workers=1)
    assert run_jobs(_counted_square, [{"x": 2}, {"x": 1}], workers=1) == [4, 1]  # x=2 kept from the failed call
    assert _CALLS == [2, 3, 2, -1, 1]


def test_run_jobs_keeps_the_order_of_the_jobs():
    jobs = [{"spec": {"a": [i, -i]}} for i in range(7)]
    assert run_jobs(parameter_grid, jobs, workers=2) == [parameter_grid(**job) for job in jobs]


@pytest.mark.slow
def test_a_local_dask_cluster_gives_the_same_results_with_progress(capsys):
    from distributed import get_client

    with cluster("dask", n_workers=2) as address:
        assert address.startswith("tcp://127.0.0.1:")
        assert all(w.startswith("tcp://127.0.0.1:") for w in get_client().scheduler_info()["workers"])
        on_dask = serving.sweep(POINTS, workers=1, desc="on dask").drop(columns=list(serving.WALL_TIME_COLUMNS))
        with pytest.raises(SweepFailed, match=r"1 of 3 jobs of 'dask jobs' failed, first _square\(x=-1\): ValueError"):
            run_jobs(_square, [{"x": 5}, {"x": -1}, {"x": 6}], desc="dask jobs")  # not kept by another test's call
        rates = serving.sustained_rate(["paged"], num_requests=40, saturated_requests=40, lo=0.5, rel_tol=0.2)
    err = capsys.readouterr().err
    assert f"on dask: 100%|██████████| {len(POINTS)}/{len(POINTS)}" in err
    assert "dask jobs: 100%|██████████| 3/3" in err and "failed=1" in err
    pd.testing.assert_frame_equal(on_dask, _local())
    pd.testing.assert_frame_equal(rates, serving.sustained_rate(["paged"], num_requests=40, saturated_requests=40,
                                                                lo=0.5, rel_tol=0.2, workers=1))


@pytest.mark.slow
def test_a_local_ray_cluster_gives_the_same_results_with_progress(capsys):
    with cluster("ray", n_workers=2) as address:
        assert address.startswith("127.0.0.1:")
        on_ray = serving.sweep(POINTS, workers=2, desc="on ray").drop(columns=list(serving.WALL_TIME_COLUMNS))
        with pytest.raises(SweepFailed, match=r"1 of 3 jobs of 'ray jobs' failed, first _square\(x=-1\): ValueError"):
            run_jobs(_square, [{"x": 7}, {"x": -1}, {"x": 8}], desc="ray jobs")  # not kept by another test's call
    pd.testing.assert_frame_equal(on_ray, _local())
    err = capsys.readouterr().err
    assert f"on ray: 100%|██████████| {len(POINTS)}/{len(POINTS)}" in err
    assert "ray jobs: 100%|██████████| 3/3" in err and "failed=1" in err


def test_dask_backend_without_a_client_is_a_clear_error():
    from joblib import parallel_config

    with pytest.raises(ValueError, match="Dask Client"), parallel_config(backend="dask"):
        run_jobs(parameter_grid, [{"spec": {"a": 1}}])


def test_unknown_backend_is_named():
    with pytest.raises(ValueError, match="unknown sweep backend 'spark'"):
        with cluster("spark"):
            pass


def test_parameter_grid():
    assert parameter_grid({"a": [1, 2], "b": "x"}) == [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}]
    assert parameter_grid([{"block_sizes": [8, 16]}]) == [{"block_sizes": [8, 16]}]  # a list value kept whole
    with pytest.raises(ValueError, match="'a' has no values"):
        parameter_grid({"a": []})
    with pytest.raises(ValueError, match="mapping"):
        parameter_grid(3)
    for empty in ({}, []):
        with pytest.raises(ValueError, match="is empty: name at least one parameter"):
            parameter_grid(empty)


def _notebook(path):
    cells = [nbformat.v4.new_code_cell("from paged.experiments.notebook.parameters import record_parameters, check_parameters\n"
                                       "x: int = 1  # a number\noutput_dir: str = 'out'  # where to write\n"
                                       "record_parameters(namespace=globals())", metadata={"tags": ["parameters"]}),
             nbformat.v4.new_code_cell("check_parameters(globals(), positive=['x'])\nimport pathlib\nprint('working on', x)\n"
                                       "if x == 13:\n    raise RuntimeError('13 fails after its parameters passed')\n"
                                       "pathlib.Path(output_dir).mkdir(parents=True, exist_ok=True)\n"
                                       "(pathlib.Path(output_dir) / 'x.txt').write_text(str(x * x))")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"language_info": {"name": "python"}}), path)
    return path


@pytest.mark.slow
def test_notebook_sweep_keeps_every_run_apart_and_reports_failures(tmp_path):
    nb = _notebook(tmp_path / "nb.ipynb")
    runs = sweep_notebook(nb, parameter_grid({"x": [2, 3, 0]}), tmp_path / "sweep", workers=2)
    assert list(runs["x"]) == [2, 3, 0] and list(runs["folder"]) == ["x=2", "x=3", "x=0"]
    assert [(tmp_path / "sweep" / f"x={x}" / "figures" / "x.txt").read_text() for x in (2, 3)] == ["4", "9"]
    assert list(runs["status"]) == ["finished", "finished", "failed"] and runs["error"].iloc[:2].isna().all()
    assert runs["error"].iloc[2] == "ParameterValueError: papermill parameter 'x' must be > 0, got 0"
    failed = nbformat.read(tmp_path / "sweep" / "x=0" / "nb.ipynb", as_version=4)  # kept for reading
    assert any(o.get("ename") == "ParameterValueError" for c in failed.cells for o in c.get("outputs", []))
    saved = pd.read_csv(tmp_path / "sweep" / "summary.csv")
    assert list(saved.columns) == ["folder", "x", "status", "seconds", "ended", "error"]
    assert list(saved["status"]) == ["finished", "finished", "failed"]
    manifest = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert manifest["notebook"] == "nb.ipynb" and manifest["runs"] == {"x=2": {"x": 2}, "x=3": {"x": 3}, "x=0": {"x": 0}}
    assert "working on 2" in (tmp_path / "sweep" / "x=2" / "run.log").read_text()  # the cells' output, as it ran

    # The same sweep again: finished runs kept (not rerun), the failed one rerun; force reruns all.
    before = {x: json.loads((tmp_path / "sweep" / f"x={x}" / "run.json").read_text()) for x in (2, 3, 0)}
    again = sweep_notebook(nb, parameter_grid({"x": [2, 3, 0]}), tmp_path / "sweep", workers=1)
    after = {x: json.loads((tmp_path / "sweep" / f"x={x}" / "run.json").read_text()) for x in (2, 3, 0)}
    assert [after[x]["attempt"] == before[x]["attempt"] for x in (2, 3, 0)] == [True, True, False]
    assert list(again["status"]) == ["finished", "finished", "failed"]
    forced = sweep_notebook(nb, [{"x": 2}], tmp_path / "sweep", force=True)
    assert json.loads((tmp_path / "sweep" / "x=2" / "run.json").read_text())["attempt"] != before[2]["attempt"]
    assert list(forced["folder"]) == ["x=2"]
    assert not [p.name for p in (tmp_path / "sweep").iterdir() if ".partial-" in p.name or ".replaced-" in p.name]


@pytest.mark.slow
def test_sweep_notebook_command(tmp_path):
    nb = _notebook(tmp_path / "nb.ipynb")
    out = subprocess.run([sys.executable, "-m", "paged", "sweep-notebook", str(nb), "--grid", "{x: [4, 5]}",
                          "--out", str(tmp_path / "s")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "s" / "x=5" / "figures" / "x.txt").read_text() == "25"
    assert "x=4" in out.stdout and "finished" in out.stdout and f"summary: {tmp_path / 's' / 'summary.csv'}" in out.stdout
    refused = subprocess.run([sys.executable, "-m", "paged", "sweep-notebook", str(nb), "--grid", "{x: [0, 4]}",
                              "--out", str(tmp_path / "s")], capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "parameter 'x' must be > 0, got 0" in refused.stderr  # before any run
    assert not (tmp_path / "s" / "x=0").exists()
    failing = subprocess.run([sys.executable, "-m", "paged", "sweep-notebook", str(nb), "--grid", "{x: [13, 4]}",
                              "--out", str(tmp_path / "s")], capture_output=True, text=True, timeout=300)
    assert failing.returncode == 1  # a failed run: the sweep goes on (x=4 was kept) and exits non-zero
    assert f"error: {tmp_path / 's' / 'x=13' / 'nb.ipynb'}: RuntimeError" in failing.stderr
    assert "Traceback" not in failing.stderr and "1 of 2 runs already finished" in failing.stdout
    bad = subprocess.run([sys.executable, "-m", "paged", "sweep-notebook", str(nb), "--grid", "{x: [", "--out",
                          str(tmp_path / "t")], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--grid is not valid YAML" in bad.stderr


def test_a_grid_with_an_unknown_parameter_is_refused_before_any_run(tmp_path):
    grid = parameter_grid({"block_size": [8, 16], "blok_size": [1]})
    with pytest.raises(ValueError, match=r"01_fragmentation.ipynb has no parameter 'blok_size'; its parameters are .*block_size"):
        sweep_notebook("notebooks/01_fragmentation.ipynb", grid, tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_the_command_line_names_an_unknown_grid_parameter_in_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "paged", "sweep-notebook", "notebooks/01_fragmentation.ipynb",
                          "--grid", "{num_request: [10]}", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("error: 01_fragmentation.ipynb has no parameter 'num_request'")
    assert "Traceback" not in out.stderr and not list(tmp_path.iterdir())



def test_lokys_worker_restart_note_is_not_shown_but_its_other_warnings_are():
    """Loky's note that a worker restarted past its memory guard (queued jobs unaffected) stays out
    of notebooks once a sweep has run; any other warning from loky, or the same text from elsewhere,
    is still shown."""
    import warnings

    note = ("A worker stopped while some jobs were given to the executor. This can be caused by a too "
            "short worker timeout or by a memory leak.")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_jobs(parameter_grid, [{"spec": {"a": [1]}}], workers=2)
        warnings.warn_explicit(note, UserWarning, "process_executor.py", 787,
                               module="joblib.externals.loky.process_executor")
        warnings.warn_explicit("something else", UserWarning, "process_executor.py", 1,
                               module="joblib.externals.loky.process_executor")
        warnings.warn_explicit(note, UserWarning, "mine.py", 1, module="mine")
    assert [str(w.message) for w in caught] == ["something else", note]


def test_run_folders_are_named_by_their_parameters():
    assert run_name({"num_requests": 200, "block_size": 8}) == "block_size=8,num_requests=200"  # name order
    assert run_name({"rate": float("inf"), "seed": 0, "trace": "sharegpt"}) == "rate=inf,seed=0,trace=sharegpt"
    assert run_name({"block_sizes": [8, 16], "prefix_caching": True}) == "block_sizes=8+16,prefix_caching=true"
    assert run_name({}) == "defaults"
    # A value the name cannot hold as written (a path, a string that reads as a number, long text)
    # gets a hash of the exact parameters: different sets never share a folder, and names stay short.
    lossy = [{"trace": "data/my trace.csv"}, {"trace": "data/my-trace.csv"}, {"seed": "8"}, {"seed": 8},
             {"models": ["opt-13b", "opt-66b"]}, {"models": "opt-13b+opt-66b"}, {"note": "x" * 300}]
    names = [run_name(p) for p in lossy]
    assert len(set(names)) == len(names) and all(len(n) < 140 for n in names)
    assert names[0].startswith("trace=data-my-trace.csv~") and names[3] == "seed=8" and names[2].startswith("seed=8~")
    assert all(set(n) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+=,-~") for n in names)
    assert run_name({"seed": "8"}) == names[2]  # stable: the same parameters, the same folder


def test_two_sweeps_cannot_write_one_folder_but_a_dead_ones_lock_is_taken_over(tmp_path):
    with SweepLock(tmp_path):
        with pytest.raises(SweepLocked, match=rf"is in use by another sweep \(pid {os.getpid()} on .*delete .*\.lock"):
            with SweepLock(tmp_path):
                pass
    assert not (tmp_path / ".lock").exists()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    import socket
    (tmp_path / ".lock").write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout)}))
    with SweepLock(tmp_path) as lock:  # its process is gone: taken over
        assert json.loads(lock.path.read_text())["pid"] == os.getpid()


def test_a_grid_that_repeats_a_run_or_reuses_another_notebooks_folder_is_refused(tmp_path):
    nb = _notebook(tmp_path / "nb.ipynb")
    with pytest.raises(ValueError, match=r"the grid has the parameter set \{'x': 2\} twice"):
        sweep_notebook(nb, [{"x": 2}, {"x": 2}], tmp_path / "out")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "sweep.json").write_text(json.dumps({"notebook": "01_fragmentation.ipynb"}))
    with pytest.raises(ValueError, match="holds a sweep of 01_fragmentation.ipynb; give nb.ipynb another output folder"):
        sweep_notebook(nb, [{"x": 2}], tmp_path / "out")


def test_the_claims_numbers_of_every_committed_figure_are_read():
    from paged.experiments.notebook import claims
    from paged.experiments.notebook.sweep_summary import headlines, quoted_numbers

    texts = headlines("notebooks/03_throughput.ipynb", "figures")
    assert len(texts) == sum(c.notebook == "03" for c in claims.CLAIMS) and all(texts.values())
    assert list(quoted_numbers("13B 1.78×, 66B 2.21×, 175B 1.28×")) == ["13B", "66B", "175B"]
    assert quoted_numbers("token states Max 16.3%, paged 96.6%") == {"token states Max": 16.3, "paged": 96.6}
    assert quoted_numbers("1.30× → 1.70× (parallel n = 6: 1.38×)") == {"#1": 1.3, "#2": 1.7, "parallel n = 6": 1.38}
    # settings are not results: requests, rounds, rates, a number inside a name
    assert quoted_numbers("at paged's knee (2.89 req/s) 34.6; 64 requests, 3 rounds, OPT-13B 1×A100 1.79×") == {
        "at paged's knee (2.89 req/s)": 34.6, "OPT-13B 1×A100": 1.79}
    for notebook in ("01", "02", "03", "04", "05", "06"):
        for text in headlines(f"notebooks/{notebook}_x.ipynb", "figures").values():
            assert quoted_numbers(text), text


@pytest.mark.slow
def test_a_sweep_of_a_real_notebook_summarises_its_headline_numbers(tmp_path):
    grid = parameter_grid({"block_size": [8, 64], "num_requests": 300, "kv_cache_gib": 2.0, "block_sizes": [[8, 16]]})
    runs = sweep_notebook("notebooks/01_fragmentation.ipynb", grid, tmp_path / "s", workers=2)
    claim = next(c for c in runs.columns if c.startswith("Fig. 2: "))
    assert list(runs["status"]) == ["finished", "finished"] and runs[claim].str.startswith("token states Max").all()
    assert runs.loc[0, claim] != runs.loc[1, claim]  # paged's share depends on the block size
    assert (tmp_path / "s" / "summary.png").stat().st_size > 10_000 and (tmp_path / "s" / "summary.pdf").exists()
    assert pd.read_csv(tmp_path / "s" / "summary.csv")[claim].tolist() == runs[claim].tolist()


def _sleepy_notebook(path):
    cells = [nbformat.v4.new_code_cell("x: int = 1  # a number\nsleep: float = 0.0  # seconds\noutput_dir: str = 'out'",
                                       metadata={"tags": ["parameters"]}),
             nbformat.v4.new_code_cell("import pathlib, time\npathlib.Path(output_dir).mkdir(parents=True, exist_ok=True)\n"
                                       "(pathlib.Path(output_dir) / 'a.txt').write_text('a')\n"
                                       "import os\ntime.sleep(sleep * float(os.environ.get('SLEEP_SCALE', '1')))\n"
                                       "(pathlib.Path(output_dir) / 'b.txt').write_text('b')")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"language_info": {"name": "python"}}), path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_stops_a_sweep_in_one_line_and_the_same_command_resumes_it(tmp_path, workers):
    """SIGINT to the sweep's process group (what Ctrl-C in a terminal sends): exit 130, one line on
    stderr, no traceback, finished runs kept, the run under way marked interrupted; the rerun
    redoes it and the runs not started, and skips the finished one."""
    nb = _sleepy_notebook(tmp_path / "nb.ipynb")
    out = tmp_path / "s"
    cmd = [sys.executable, "-c", "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
           "os.execv(sys.executable, [sys.executable, '-m', 'paged'] + sys.argv[1:])", "sweep-notebook", str(nb),
           "--grid", "[{x: 1}, {x: 2, sleep: 60}, {x: 3}]", "--out", str(out), "--workers", str(workers)]
    sweep = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not list(out.glob("sleep=60,x=2.partial-*/figures/a.txt")) and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(sweep.pid, signal.SIGINT)
    stdout, stderr = sweep.communicate(timeout=60)
    lines = [line for line in stderr.replace("\r", "\n").splitlines() if line.strip() and "it/s]" not in line
             and not line.startswith("nb:")]
    assert sweep.returncode == 130, stderr
    assert len(lines) == 1 and lines[0].startswith("interrupted: ") and "the same command resumes" in lines[0], stderr
    summary = pd.read_csv(out / "summary.csv")
    assert summary.loc[1, "status"] == "interrupted" and summary.loc[1, "folder"].startswith("sleep=60,x=2.partial-")
    assert not (out / "sleep=60,x=2").exists()  # no half run under the run's name
    assert not list(out.glob("*.lock")) and not (out / ".lock").exists()
    first = json.loads((out / "x=1" / "run.json").read_text()) if (out / "x=1").exists() else None
    resumed = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "SLEEP_SCALE": "0"})
    assert resumed.returncode == 0, resumed.stderr
    assert pd.read_csv(out / "summary.csv")["status"].tolist() == ["finished"] * 3
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "sleep=60,x=2", "summary.csv", "sweep.json", "x=1", "x=3"]  # the interrupted attempt cleared
    if first is not None and first["status"] == "finished":  # kept, not rerun
        assert json.loads((out / "x=1" / "run.json").read_text())["attempt"] == first["attempt"]
    assert (out / "x=3" / "figures" / "b.txt").exists()


@pytest.mark.slow
def test_a_kernel_started_under_cluster_for_children_runs_its_jobs_on_that_cluster():
    """``make nb NB=03 ARGS='--backend dask'``: the notebook's kernel (a child process) joins the cluster
    named in its environment and its run_jobs sweeps run on the cluster's workers."""
    from distributed import get_client

    code = ("import os; from paged.experiments.notebook.jobs import run_jobs; "
            "print(sorted(set(run_jobs(os.getpid, [{}] * 6, workers=2))))")
    with cluster_for_children("dask", n_workers=2):
        worker_pids = sorted(get_client().run(os.getpid).values())
        child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    assert set(json.loads(child.stdout.strip().splitlines()[-1])) <= set(worker_pids)
    assert "PAGED_CLUSTER_BACKEND" not in os.environ  # restored at the end


def test_a_worker_with_another_package_or_notebook_does_not_run(tmp_path):
    """A cluster worker whose package or notebook differs from the sweep's records a failed run
    saying why, without starting a kernel (its results would not be this code's)."""
    from paged.experiments.notebook.sweep import execute_run, sweep_identity

    nb = _notebook(tmp_path / "nb.ipynb")
    code, nb_hash = sweep_identity(nb)
    record = execute_run(str(nb), str(tmp_path), "x=2", {"x": 2}, attempt="a1", code="0" * 16, notebook_hash=nb_hash)
    assert record["status"] == "failed" and record["error"].startswith("PackageMismatch: ")
    assert f"(code {code}, the sweep's {'0' * 16})" in record["error"]
    record = execute_run(str(nb), str(tmp_path), "x=3", {"x": 3}, attempt="a2", code=code, notebook_hash="1" * 16)
    assert record["error"].startswith("NotebookMismatch: ") and record["folder"] == "x=3"
    record = execute_run(str(tmp_path / "gone.ipynb"), str(tmp_path), "x=4", {"x": 4}, attempt="a3", code=code,
                         notebook_hash=nb_hash)
    assert record["error"].startswith("FileNotFoundError: ") and "shares" in record["error"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["x=2", "x=3", "x=4"]


@pytest.mark.parametrize("backend, module", [("ray", "ray"), ("dask", "distributed")])
def test_a_backend_whose_package_is_missing_is_one_line(tmp_path, backend, module):
    """As where Ray or Dask is not installed (the module blocked in sys.modules): one error line naming
    what to install, exit 2, nothing run."""
    code = (f"import sys; sys.modules[{module!r}] = None; from paged.cli import main; "
            f"main(['sweep-notebook', 'notebooks/01_fragmentation.ipynb', '--grid', '{{block_size: [8]}}', "
            f"'--out', {str(tmp_path)!r}, '--backend', {backend!r}])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith(f"error: --backend {backend}: ") and "pip install" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and not any(tmp_path.iterdir())
