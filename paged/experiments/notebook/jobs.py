"""Many calls of one function, on this machine or on a cluster (joblib backends), that survive failures.

Every sweep of the project goes through :func:`run_jobs`: the simulated serving sweeps
(:func:`paged.experiments.serving.sweep`, :func:`~paged.experiments.serving.sustained_rate`) and
whole-notebook sweeps (:func:`paged.experiments.notebook.sweep.sweep_notebook`). Where the jobs run
is joblib's choice of backend:

* by default, joblib's ``loky`` processes on this machine (``workers`` of them; 1 runs in-process);
* inside ``with cluster("dask", address):`` (or ``joblib.parallel_config(backend="dask")`` with a
  ``distributed.Client``), the Dask cluster's workers, all of them;
* inside ``with cluster("ray", address):``, the Ray cluster's;
* in a process started with :data:`CLUSTER_ENV` set (a notebook's kernel under ``make nb ...
  ARGS='--backend dask'``: :func:`cluster_for_children`), the cluster it names.

A failing job does not stop the others: :func:`run_jobs` runs every job, then raises
:class:`SweepFailed` naming the failures, with the finished results on it; the same call again in
the same process reruns only the failed jobs (the others' results are kept for it). Jobs must be
importable functions with picklable keyword arguments; results come back in the order of the
jobs; one progress bar counts finished jobs on every backend. On a cluster the workers need this
package installed.
"""

from __future__ import annotations

import os
import traceback
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["run_jobs", "cluster", "cluster_for_children", "SweepFailed", "JobFailure", "CLUSTER_ENV"]

#: Environment variables naming a cluster for :func:`run_jobs` in a child process (a notebook's
#: kernel): the backend (``dask`` or ``ray``) and the address to join.
CLUSTER_ENV = ("PAGED_CLUSTER_BACKEND", "PAGED_CLUSTER_ADDRESS")


@dataclass(frozen=True)
class JobFailure:
    """A job that raised: its position, its keyword arguments as text, the error's last line
    (``"ValueError: ..."``) and the whole traceback (as the worker printed it)."""

    index: int
    job: str
    error: str
    traceback: str


class _RemoteTraceback(Exception):
    """A worker's traceback, shown as the cause of :class:`SweepFailed` (the way concurrent.futures does)."""

    def __str__(self):
        return "\n" + self.args[0]


class SweepFailed(RuntimeError):
    """Some jobs of :func:`run_jobs` raised; every other job ran to its end.

    Attributes:
        failures: one :class:`JobFailure` per failed job, in job order.
        results: every job's result in job order, None where it failed.
    """

    def __init__(self, desc: str, failures: list[JobFailure], results: list):
        self.failures, self.results = failures, results
        first = failures[0]
        n, k = len(results), len(failures)
        super().__init__(f"{k} of {n} jobs of {desc!r} failed, first {first.job}: {first.error} "
                         f"(the other {n - k} finished; the same call again reruns only the failed "
                         f"{'one' if k == 1 else k})")


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
        desc: the progress bar's label (and the sweep's name in :class:`SweepFailed`).

    Returns:
        ``[fn(**job) for job in jobs]``.

    Raises:
        SweepFailed: after every job ran, if any raised an ``Exception`` (its message names the
            count and the first failure; ``.results`` holds the others' results). A
            ``KeyboardInterrupt`` stops the sweep at once (joblib stops the local workers).
            Joblib itself refuses ``parallel_config(backend="dask")`` without a
            ``distributed.Client``, with a ValueError.
    """
    from paged.experiments.notebook.progress import progress

    keys = [_job_key(fn, job) for job in jobs]
    results = [_KEPT.get(key, _MISSING) for key in keys]
    todo = [i for i, r in enumerate(results) if r is _MISSING]
    failures: list[JobFailure] = []
    _hide_loky_worker_restarts()
    with _cluster_from_environment(), progress(len(todo), desc) as bar:
        # the generator first: zip then asks it once more at the end, and it moves the bar to its last frame
        for (ok, value, tb), i in zip(_run(fn, [jobs[i] for i in todo], workers, bar), todo):
            if ok:
                results[i] = value
            else:
                failures.append(JobFailure(i, _describe(fn, jobs[i]), value, tb))
                results[i] = None
                bar.set_postfix(failed=len(failures), refresh=False)
    for key in keys:
        _KEPT.pop(key, None)
    if failures:
        _KEPT.update({key: r for key, r, i in zip(keys, results, range(len(jobs)))
                      if i not in {f.index for f in failures}})
        raise SweepFailed(desc, failures, results) from _RemoteTraceback(failures[0].traceback)
    return results


_MISSING = object()
#: Results of the finished jobs of sweeps that had failures, by :func:`_job_key`, for the same call again.
_KEPT: dict = {}


def _job_key(fn, job: dict) -> str:
    """The job's identity for :data:`_KEPT`: the function's name and module, the arguments' joblib
    hash and the package's code (a change of code makes every result stale)."""
    import joblib

    from paged.experiments.notebook.fingerprint import code_fingerprint

    return joblib.hash((getattr(fn, "__module__", ""), getattr(fn, "__qualname__", repr(fn)), job, code_fingerprint()))


def _describe(fn, job: dict, limit: int = 160) -> str:
    """``name(k=v, ...)``, cut to about ``limit`` characters."""
    text = f"{getattr(fn, '__name__', 'job')}({', '.join(f'{k}={v!r}' for k, v in job.items())})"
    return text if len(text) <= limit else text[: limit - 4] + " ...)"


def _run(fn, jobs: list[dict], workers: int, bar):
    """Yield ``(ok, result or error line, traceback text)`` per job, in order, on the active backend."""
    from joblib import delayed
    from joblib._parallel_backends import LokyBackend
    from joblib.parallel import get_active_backend

    backend, n_jobs = get_active_backend()
    local = isinstance(backend, LokyBackend)
    if local and workers <= 1 or not jobs:
        for job in jobs:
            yield _call(fn, job)
            bar.update()
        return

    return_as = "generator" if backend.supports_return_generator else "list"
    parallel = _parallel(backend, workers if local else (n_jobs or -1), return_as)
    parallel.bar = bar
    try:
        for outcome, stdout, stderr, caught in parallel(delayed(_in_worker)(fn, job) for job in jobs):
            _replay(stdout, stderr, caught)
            yield outcome
    finally:
        parallel.bar = None
    bar.update(len(jobs) - bar.n)


#: Ray's joblib pools kept open between calls in this process, by (n_jobs, return_as).
_RAY_POOLS: dict = {}


def _parallel(backend, n_jobs: int, return_as: str):
    """A joblib ``Parallel`` whose batch-completion hook moves the bar in its ``bar`` attribute (every
    backend calls it, Ray's too, which returns its results only at the end).

    Under Ray the same one is kept for every call in this process (until the cluster it runs on is
    stopped): Ray's backend starts a pool of actors, new processes that import the package, for
    each ``Parallel`` it runs, and a notebook's sustained-rate searches make dozens of short calls.
    """
    from joblib import Parallel

    class Counted(Parallel):
        bar = None

        def print_progress(self):
            if self.bar is not None:
                self.bar.update(self.n_completed_tasks - self.bar.n)

    if type(backend).__name__ != "RayBackend":
        return Counted(n_jobs=n_jobs, return_as=return_as)
    key = (n_jobs, return_as)
    if key not in _RAY_POOLS:
        pool = Counted(n_jobs=n_jobs, return_as=return_as)
        pool.__enter__()  # joblib keeps its workers until __exit__ (its documented reuse of one Parallel)
        _RAY_POOLS[key] = pool
    return _RAY_POOLS[key]


def _close_ray_pools() -> None:
    while _RAY_POOLS:
        _RAY_POOLS.popitem()[1].__exit__(None, None, None)


def _call(fn, job: dict):
    """``(True, fn(**job), "")``, or ``(False, the error's last line, its traceback)`` for an Exception."""
    try:
        return True, fn(**job), ""
    except Exception as err:  # noqa: BLE001 - reported with the others at the end of the sweep
        last = traceback.format_exception_only(type(err), err)[-1].strip()
        return False, last, traceback.format_exc()


def _in_worker(fn, job: dict):
    """:func:`_call` in a worker process, without progress bars; returns ``(outcome, stdout text,
    stderr text, warnings)`` (each warning as ``(message, category, filename, lineno)``)."""
    import io
    import warnings
    from contextlib import redirect_stderr, redirect_stdout

    from paged.experiments.notebook.progress import quiet

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), quiet(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every warning comes back; this process's filters pick
        outcome = _call(fn, job)
    return outcome, out.getvalue(), err.getvalue(), [(str(w.message), w.category, w.filename, w.lineno)
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


@contextmanager
def cluster(backend: str = "dask", address: str | None = None, *, n_workers: int = 2):
    """Run the sweeps inside the ``with`` block on ``backend``.

    Args:
        backend: ``"dask"``, ``"ray"`` or ``"loky"`` (this machine, joblib's default).
        address: the cluster to join (``"tcp://host:8786"`` for a Dask scheduler, ``"ray://host:10001"``,
            a Ray head's ``"host:6379"`` or ``"auto"`` for Ray); None starts a local one of
            ``n_workers`` worker processes bound to 127.0.0.1, stopped at the end of the block.

    Yields:
        The address others can join (a Dask scheduler's ``tcp://...``, a Ray head's GCS address;
        :func:`cluster_for_children` passes it on); None for loky.

    Raises:
        ValueError: for an unknown backend; ImportError naming the package to install when the
            backend's package is missing.
    """
    from joblib import parallel_config

    if backend == "loky":
        with parallel_config(backend="loky"):
            yield None
    elif backend == "dask":
        with _dask(address, n_workers) as client, parallel_config(backend="dask"):
            yield client.scheduler.address
    elif backend == "ray":
        with _ray(address, n_workers) as joined, parallel_config(backend="ray"):
            yield joined
    else:
        raise ValueError(f"unknown sweep backend {backend!r}; choose one of 'loky', 'dask', 'ray'")


@contextmanager
def _dask(address: str | None, n_workers: int):
    """A ``distributed.Client`` of the cluster at ``address`` (None: a local one, closed at the end)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ImportError('the dask backend needs dask[distributed]: pip install "dask[distributed]"') from None
    import logging

    # silence_logs: the workers' notes about tasks cancelled by a Ctrl-C stay out of the terminal
    local = None if address else LocalCluster(n_workers=n_workers, threads_per_worker=1, host="127.0.0.1",
                                              dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
    client = Client(address or local)
    try:
        yield client
    finally:
        client.close()
        if local is not None:
            nanny = logging.getLogger("distributed.nanny")
            level = nanny.level
            nanny.setLevel(logging.ERROR)  # "worker process still alive after 4 s, killing": our own workers, stopped
            try:
                local.close()
            finally:
                nanny.setLevel(level)


@contextmanager
def _ray(address: str | None, n_workers: int):
    """Ray joined at ``address`` (None: a local head of ``n_workers`` CPUs, stopped at the end);
    yields the GCS address other processes join with ``ray.init(address=...)``."""
    if address is None:
        # Ray resolves 127.0.0.1 to this host's network address unless told that the cluster is a
        # single machine (read when Ray is first imported): a local cluster stays on the loopback.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
        from ray.util.joblib import register_ray
    except ImportError:
        raise ImportError('the ray backend needs Ray: pip install "ray>=2.30"') from None
    import logging

    started = not ray.is_initialized()
    _quiet_ray()
    if started:  # a local head listens on the loopback interface only
        local = {} if address else {"num_cpus": n_workers, "_node_ip_address": "127.0.0.1"}
        for attempt in (1, 2):
            try:
                ray.init(address=address, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False,
                         **local)
                break
            except BaseException as err:  # Ray raises a bare Exception; a Ctrl-C must stop what it started too
                ray.shutdown()
                # Ray gives a new head 30 s to start its raylet; a busy machine can take longer: try once more
                if attempt == 2 or address or "timed out during startup" not in str(err):
                    raise
    register_ray()
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        _close_ray_pools()
        if started:
            ray.shutdown()


def _quiet_ray() -> None:
    """Ray's INFO lines on a driver's stderr (a local instance started, token authentication on) and
    its pool's note that joblib's ``context`` argument does not apply, out of notebooks and logs."""
    import logging

    for name in ("ray", "ray.util.multiprocessing.pool", "ray._private.authentication"):
        logging.getLogger(name).setLevel(logging.ERROR)


@contextmanager
def cluster_for_children(backend: str, address: str | None = None, *, n_workers: int = 2):
    """Start (or join) a cluster and name it in :data:`CLUSTER_ENV` for the processes this one starts
    inside the block, so that a notebook's kernel runs its :func:`run_jobs` sweeps there (``make nb
    NB=03 ARGS='--backend dask'``). ``backend="loky"`` changes nothing.

    Yields:
        The cluster's address (None for loky).
    """
    if backend == "loky":
        yield None
        return
    with cluster(backend, address, n_workers=n_workers) as joined:
        saved = {name: os.environ.get(name) for name in CLUSTER_ENV}
        os.environ.update(dict(zip(CLUSTER_ENV, (backend, joined))))
        try:
            yield joined
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


#: The cluster this process joined from :data:`CLUSTER_ENV` (kept open until the process ends).
_JOINED: dict = {}


@contextmanager
def _cluster_from_environment():
    """Inside: joblib's backend is the cluster :data:`CLUSTER_ENV` names, when it names one and no
    other backend than joblib's default is active; joined once per process."""
    from joblib import parallel_config
    from joblib._parallel_backends import LokyBackend
    from joblib.parallel import get_active_backend

    backend, address = (os.environ.get(name) for name in CLUSTER_ENV)
    if not backend or not isinstance(get_active_backend()[0], LokyBackend):
        yield
        return
    if backend not in _JOINED:
        if backend == "dask":
            from distributed import Client

            _JOINED[backend] = Client(address)
        elif backend == "ray":
            import logging

            import ray
            from ray.util.joblib import register_ray

            _quiet_ray()
            if not ray.is_initialized():
                ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
            register_ray()
            _JOINED[backend] = address
        else:
            raise ValueError(f"{CLUSTER_ENV[0]}={backend!r}: choose 'dask' or 'ray'")
    with parallel_config(backend=backend):
        yield
