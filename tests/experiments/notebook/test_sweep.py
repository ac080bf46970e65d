"""The sweep engine (paged.experiments.notebook.sweep): same results in-process, on loky, on Dask, on Ray; notebook sweeps."""

import importlib.util
import subprocess
import sys

import nbformat
import pandas as pd
import pytest

from paged.experiments import serving
from paged.experiments.notebook.sweep import cluster, parameter_grid, run_jobs, sweep_notebook

POINTS = [dict(system=s, rate=r, num_requests=40) for s in ("paged", "orca-max") for r in (1.0, 4.0)]


def _local():
    return serving.sweep(POINTS, workers=1).drop(columns=list(serving.WALL_TIME_COLUMNS))


def test_processes_give_the_in_process_results():
    pd.testing.assert_frame_equal(serving.sweep(POINTS, workers=2).drop(columns=list(serving.WALL_TIME_COLUMNS)),
                                  _local())


def test_run_jobs_keeps_the_order_of_the_jobs():
    jobs = [{"spec": {"a": [i, -i]}} for i in range(7)]
    assert run_jobs(parameter_grid, jobs, workers=2) == [parameter_grid(**job) for job in jobs]


@pytest.mark.slow
def test_a_local_dask_cluster_gives_the_same_results():
    with cluster("dask", n_workers=2) as client:
        assert client.scheduler.address.startswith("tcp://127.0.0.1:")
        assert all(w.startswith("tcp://127.0.0.1:") for w in client.scheduler_info()["workers"])
        on_dask = serving.sweep(POINTS, workers=1).drop(columns=list(serving.WALL_TIME_COLUMNS))
        rates = serving.sustained_rate(["paged"], num_requests=40, saturated_requests=40, lo=0.5, rel_tol=0.2)
    pd.testing.assert_frame_equal(on_dask, _local())
    pd.testing.assert_frame_equal(rates, serving.sustained_rate(["paged"], num_requests=40, saturated_requests=40,
                                                                lo=0.5, rel_tol=0.2, workers=1))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason='Ray is not installed (pip install -e ".[ray]")')
def test_a_local_ray_cluster_gives_the_same_results():
    with cluster("ray", n_workers=2):
        on_ray = serving.sweep(POINTS, workers=2).drop(columns=list(serving.WALL_TIME_COLUMNS))
    pd.testing.assert_frame_equal(on_ray, _local())


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
             nbformat.v4.new_code_cell("check_parameters(globals(), positive=['x'])\nimport pathlib\n"
                                       "pathlib.Path(output_dir).mkdir(parents=True, exist_ok=True)\n"
                                       "(pathlib.Path(output_dir) / 'x.txt').write_text(str(x * x))")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"language_info": {"name": "python"}}), path)
    return path


@pytest.mark.slow
def test_notebook_sweep_keeps_every_run_apart_and_reports_failures(tmp_path):
    nb = _notebook(tmp_path / "nb.ipynb")
    runs = sweep_notebook(nb, parameter_grid({"x": [2, 3, 0]}), tmp_path / "sweep", workers=2)
    assert list(runs["x"]) == [2, 3, 0]
    assert [(tmp_path / "sweep" / f"nb_00{i}" / "x.txt").read_text() for i in range(2)] == ["4", "9"]
    assert runs["error"].iloc[:2].isna().all()
    assert "ParameterValueError" in runs["error"].iloc[2] and "'x' must be > 0" in runs["error"].iloc[2]


@pytest.mark.slow
def test_sweep_notebook_command(tmp_path):
    nb = _notebook(tmp_path / "nb.ipynb")
    out = subprocess.run([sys.executable, "-m", "paged", "sweep-notebook", str(nb), "--grid", "{x: [4, 5]}",
                          "--out", str(tmp_path / "s")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "s" / "nb_001" / "x.txt").read_text() == "25"
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
