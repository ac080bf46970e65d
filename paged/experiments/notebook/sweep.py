"""Sweeps: one function over many parameter sets, on this machine or on a cluster (joblib backends).

Every sweep of the project goes through :func:`run_jobs`: the simulated serving sweeps
(:func:`paged.experiments.serving.sweep`, :func:`~paged.experiments.serving.sustained_rate`) and
whole-notebook sweeps (:func:`sweep_notebook`, one papermill run per parameter set). Where the
jobs run is joblib's choice of backend:

* by default, joblib's ``loky`` processes on this machine (``workers`` of them; 1 runs in-process);
* inside ``with cluster("dask", address):`` (or ``joblib.parallel_config(backend="dask")`` with a
  ``distributed.Client``), the Dask cluster's workers, all of them;
* inside ``with cluster("ray", address):``, the Ray cluster's (``pip install -e ".[ray]"``).

Jobs must be importable functions with picklable keyword arguments; results come back in the
order of the jobs. A backend without generator support (Ray's) returns the whole list at the
end, so its progress bar jumps once. On a cluster the workers need this package installed, and a
notebook sweep needs the notebook and its output folder on a file system they share.
"""

from __future__ import annotations

import itertools
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from paged.atomic import atomic_path

__all__ = ["run_jobs", "cluster", "parameter_grid", "check_parameter_names", "run_notebook", "sweep_notebook"]


def run_jobs(fn, jobs: list[dict], *, workers: int = 2, desc: str = "sweep") -> list:
    """``fn(**job)`` for every job, in order, on the active joblib backend, with one progress bar
    (:func:`paged.experiments.notebook.progress.progress`: none inside another step's bar).

    Jobs in worker processes run without bars; what they print (stdout, stderr) and the
    warnings they raise come back with their results and are shown here, in job order, once
    each (this process's warning filters apply), instead of reaching a notebook as interleaved
    stderr lines of other processes.

    Args:
        fn: an importable (picklable) function.
        jobs: its keyword arguments, one dict per call.
        workers: processes on this machine under joblib's default backend (≤ 1: in this process,
            no pickling). Ignored under a cluster backend, which uses all its workers (or the
            ``n_jobs`` given to ``joblib.parallel_config``).
        desc: the progress bar's label.

    Returns:
        ``[fn(**job) for job in jobs]``.

    Raises:
        Whatever ``fn`` raises (the first failure stops the sweep). (Joblib itself refuses
        ``parallel_config(backend="dask")`` without a ``distributed.Client``, with a ValueError.)
    """
    from joblib import Parallel, delayed
    from joblib._parallel_backends import LokyBackend
    from joblib.parallel import get_active_backend

    from paged.experiments.notebook.progress import progress

    backend, n_jobs = get_active_backend()
    local = isinstance(backend, LokyBackend)
    _hide_loky_worker_restarts()
    results = []
    with progress(len(jobs), desc) as bar:
        if local and workers <= 1:
            for job in jobs:
                results.append(fn(**job))
                bar.update()
            return results
        return_as = "generator" if backend.supports_return_generator else "list"
        for result, stdout, stderr, caught in Parallel(n_jobs=workers if local else (n_jobs or -1),
                                                       return_as=return_as)(
                delayed(_in_worker)(fn, job) for job in jobs):
            _replay(stdout, stderr, caught)
            results.append(result)
            bar.update()
    return results


def _hide_loky_worker_restarts() -> None:
    """Keep loky's note that it restarted a worker out of notebooks' stderr.

    Loky restarts a worker whose memory grew by more than 300 MB since its first job (its leak
    guard; a worker that has loaded several traces and models' tables crosses it) and warns that "a
    worker stopped while some jobs were given to the executor". The queued jobs go to the new
    worker and no result changes. The warning comes from loky's manager thread while jobs run, so
    the filter is installed (once; filters are process-wide) before each sweep rather than at import,
    where a ``warnings.catch_warnings`` block around the import would drop it.
    """
    import warnings

    warnings.filterwarnings("ignore", message="A worker stopped while some jobs were given to the executor",
                            category=UserWarning, module=r"joblib\.externals\.loky")


def _in_worker(fn, job: dict):
    """``fn(**job)`` in a worker process, without progress bars; returns ``(result, stdout text,
    stderr text, warnings)`` (each warning as ``(message, category, filename, lineno)``)."""
    import io
    import warnings
    from contextlib import redirect_stderr, redirect_stdout

    from paged.experiments.notebook.progress import quiet

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), quiet(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every warning comes back; this process's filters pick
        result = fn(**job)
    return result, out.getvalue(), err.getvalue(), [(str(w.message), w.category, w.filename, w.lineno)
                                                    for w in caught]


def _replay(stdout: str, stderr: str, caught: list) -> None:
    """Show a worker's output here: its text on this process's stdout and stderr, its warnings
    through this process's filters (so each is shown once, as a warning of this process would be)."""
    import sys
    import warnings

    if stdout:
        sys.stdout.write(stdout)
    if stderr:
        sys.stderr.write(stderr)
    for message, category, filename, lineno in caught:
        warnings.warn_explicit(message, category, filename, lineno, registry=_WORKER_WARNINGS)


#: Warnings of workers already shown (``warnings.warn_explicit``'s registry: "default" shows each once).
_WORKER_WARNINGS: dict = {}


@contextmanager
def cluster(backend: str = "dask", address: str | None = None, *, n_workers: int = 2):
    """Run the sweeps inside the ``with`` block on ``backend``.

    Args:
        backend: ``"dask"``, ``"ray"`` or ``"loky"`` (this machine, joblib's default).
        address: the cluster to join (``"tcp://host:8786"`` for a Dask scheduler, ``"ray://host:10001"``
            or ``"auto"`` for Ray); None starts a local one of ``n_workers`` worker processes bound
            to 127.0.0.1, stopped at the end of the block.

    Yields:
        The ``distributed.Client`` (dask), None otherwise.

    Raises:
        ValueError: for an unknown backend; ImportError naming the extra to install when the
            backend's package is missing.
    """
    from joblib import parallel_config

    if backend == "loky":
        with parallel_config(backend="loky"):
            yield None
    elif backend == "dask":
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise ImportError('the dask backend needs dask[distributed]: pip install "dask[distributed]"') from None
        local = None if address else LocalCluster(n_workers=n_workers, threads_per_worker=1, host="127.0.0.1",
                                                  dashboard_address="127.0.0.1:0")
        client = Client(address or local)
        try:
            with parallel_config(backend="dask"):
                yield client
        finally:
            client.close()
            if local is not None:
                local.close()
    elif backend == "ray":
        try:
            import ray
            from ray.util.joblib import register_ray
        except ImportError:
            raise ImportError('the ray backend needs Ray: pip install -e ".[ray]"') from None
        ray.init(address=address, num_cpus=None if address else n_workers, include_dashboard=False)
        register_ray()
        try:
            with parallel_config(backend="ray"):
                yield None
        finally:
            ray.shutdown()
    else:
        raise ValueError(f"unknown sweep backend {backend!r}; choose one of 'loky', 'dask', 'ray'")


def parameter_grid(spec) -> list[dict]:
    """Parameter sets from ``spec``: a list of dicts (taken as is), or a dict whose list values are
    swept (the Cartesian product, in the order given) and whose other values are fixed.

    Raises:
        ValueError: for another kind of spec, an empty list of values, or an empty grid (``{}`` or
            ``[]``: no parameter set to run; a single run with the defaults is ``make nb``).
    """
    if isinstance(spec, (list, dict)) and not spec:
        raise ValueError(f"the parameter grid {spec!r} is empty: name at least one parameter and its values, "
                         "e.g. {block_size: [8, 16]}")
    if isinstance(spec, list) and all(isinstance(item, dict) for item in spec):
        return [dict(item) for item in spec]
    if not isinstance(spec, dict):
        raise ValueError(f"a parameter grid is a mapping of name to values or a list of mappings, got {spec!r}")
    axes = {name: values if isinstance(values, list) else [values] for name, values in spec.items()}
    for name, values in axes.items():
        if not values:
            raise ValueError(f"parameter grid: {name!r} has no values")
    return [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]


def run_notebook(notebook: str, output: str, parameters: dict, kernel: str | None = None) -> dict:
    """Execute ``notebook`` with papermill into ``output`` (cwd: the notebook's folder) on ``kernel``
    (None: this interpreter's, :func:`paged.experiments.notebook.kernel.execute_notebook`).

    A failing notebook does not raise: its error is returned, so one bad parameter set does not
    lose the other runs of a sweep. ``output`` appears only when the run ends (with its error or
    without); an interrupted run leaves nothing under that name.

    Returns:
        ``{"output": path, "seconds": wall time, "error": None or the error's last line}``.
    """
    import papermill as pm

    from paged.experiments.notebook.kernel import execute_notebook

    start = time.perf_counter()
    error = None
    # papermill saves the output after every cell: run into a temporary name and rename at the end,
    # so an interrupted run leaves no half-executed notebook under the run's name.
    with atomic_path(output) as tmp:
        try:
            execute_notebook(notebook, tmp, parameters, kernel=kernel)
        except pm.PapermillExecutionError as err:  # a complete notebook that shows its error: kept
            error = f"{err.ename}: {err.evalue}"
    return {"output": output, "seconds": time.perf_counter() - start, "error": error}


def check_parameter_names(notebook: str | Path, parameter_sets: list[dict]) -> None:
    """Refuse parameter sets that name a parameter ``notebook`` does not declare (papermill's
    ``inspect_notebook`` of its parameters cell), so a misspelled name fails at once, not after
    every run. A notebook without a parameters cell accepts any name (papermill injects them).

    Raises:
        ValueError: naming each unknown parameter and listing the notebook's own.
    """
    import nbformat
    from papermill.translators import papermill_translators

    nb = nbformat.read(str(notebook), as_version=4)
    cell = next((c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])), None)
    if cell is None:  # no parameters cell: papermill injects any name given
        return
    kernel = nb.metadata.get("kernelspec", {}).get("name") or "python3"
    language = nb.metadata.get("kernelspec", {}).get("language") or nb.metadata.get("language_info", {}).get("name")
    declared = {p.name for p in papermill_translators.find_translator(kernel, language or "python").inspect(cell)}
    unknown = sorted({name for params in parameter_sets for name in params} - declared)
    if unknown:
        raise ValueError(f"{Path(notebook).name} has no parameter {', '.join(map(repr, unknown))}; "
                         f"its parameters are {', '.join(sorted(declared)) or '(none)'}")


def sweep_notebook(notebook: str | Path, parameter_sets: list[dict], out_dir: str | Path, *, workers: int = 1,
                   kernel: str | None = None) -> pd.DataFrame:
    """Run ``notebook`` once per parameter set, through :func:`run_jobs` (so on a cluster too).

    Run ``i`` writes ``out_dir/STEM_i.ipynb`` and, unless its parameters set ``output_dir``, its
    figures to ``out_dir/STEM_i/`` (so runs never overwrite each other or ``figures/``).

    Returns:
        One row per run: its parameters, ``output`` (the executed notebook), ``seconds``, ``error``
        (None when it ran to the end).

    Raises:
        FileNotFoundError: if the notebook does not exist.
        ValueError: before any run, if a parameter set names a parameter the notebook's parameters
            cell does not declare (``papermill --help-notebook`` lists them); the message names it.
    """
    notebook = Path(notebook).resolve()
    if not notebook.is_file():
        raise FileNotFoundError(f"notebook {str(notebook)!r} does not exist")
    check_parameter_names(notebook, parameter_sets)
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    jobs = []
    for i, params in enumerate(parameter_sets):
        stem = f"{notebook.stem}_{i:03d}"
        params = {"output_dir": str(out / stem), **params}
        jobs.append({"notebook": str(notebook), "output": str(out / f"{stem}.ipynb"), "parameters": params,
                     "kernel": kernel})
    runs = run_jobs(run_notebook, jobs, workers=workers, desc=notebook.stem)
    return pd.DataFrame([{**job["parameters"], **run} for job, run in zip(jobs, runs)])
