"""Notebook sweeps: one papermill run per parameter set, here or on a cluster, resumable.

:func:`sweep_notebook` (``python -m paged sweep-notebook``, ``make sweep``) runs a notebook once per
parameter set through :func:`~paged.experiments.notebook.jobs.run_jobs` (so on a Dask or Ray cluster
too), each run in a folder named by its parameters (:mod:`~paged.experiments.notebook.run_folder`).

* A failing run does not stop the others; its folder keeps the executed notebook, which shows
  the error, and the summary names the error's last line.
* Running the same sweep again skips every run that finished with the same parameters, notebook
  and code (:func:`sweep_identity`), and reruns the failed, interrupted and
  missing ones; ``force=True`` reruns all.
* Ctrl-C stops the sweep: finished runs stay, the runs under way are marked ``interrupted`` and
  :class:`SweepInterrupted` (a KeyboardInterrupt) says how to resume.
* At the end (or the interrupt) ``summary.csv`` lists every run of the grid, with the headline
  numbers of the notebook's claims (:mod:`~paged.experiments.notebook.sweep_summary`).

Local runs execute in joblib's processes (``workers``) or in this process (1); on a cluster the
workers need this package installed and the notebook and ``out_dir`` on a file system they share.
"""

from __future__ import annotations

import itertools
import os
import secrets
import shutil
import socket
import time
from pathlib import Path

import pandas as pd

from paged.experiments.notebook.jobs import SweepFailed, cluster, run_jobs  # noqa: F401 - the engine's public names
from paged.experiments.notebook.run_folder import (PARTIAL, SweepLock, now, read_record, run_name, sweep_identity,
                                                   write_record)

__all__ = ["run_jobs", "cluster", "parameter_grid", "check_parameter_names", "run_notebook", "sweep_notebook",
           "execute_run", "sweep_identity", "SweepInterrupted", "MANIFEST", "SUMMARY"]

#: The sweep's own files in ``out_dir``.
MANIFEST, SUMMARY = "sweep.json", "summary.csv"


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a sweep; its message says what finished and how to resume. ``summary`` holds
    the summary table as it stood."""

    def __init__(self, message: str, summary: pd.DataFrame):
        super().__init__(message)
        self.summary = summary


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


def run_notebook(notebook: str, output: str, parameters: dict, kernel: str | None = None) -> dict:
    """One notebook into ``output`` (:func:`paged.experiments.notebook.execute.run_notebook`: its
    figures committed as one set, quiet on Ctrl-C), as a job of :func:`run_jobs` (``make quick``).

    A failing notebook does not raise: its error is returned, so one bad parameter set does not
    lose the other runs.

    Returns:
        ``{"output": path, "seconds": wall time, "error": None or the error's last line}``.
    """
    start = time.perf_counter()
    run, error = _execute(notebook, Path(output), dict(parameters), kernel, runner="make quick")
    return {"output": run.output if run else str(output), "seconds": time.perf_counter() - start, "error": error}


def execute_run(notebook: str, out: str, name: str, parameters: dict, *, attempt: str, kernel: str | None = None,
                code: str = "", notebook_hash: str = "") -> dict:
    """One run of a sweep: ``notebook`` with ``parameters`` in ``out/NAME.partial-ATTEMPT``, renamed to
    ``out/NAME`` when it ends (replacing an earlier run of that name).

    The run's figures go to its ``figures/`` folder unless ``parameters`` set ``output_dir``; its
    cells' output is logged to ``run.log`` as they run (and its kernel's own messages, after a
    failure, to ``NOTEBOOK.log``); ``run.json`` holds its record. A failing notebook does not raise:
    its error is recorded and its executed notebook, which shows it, kept. A worker whose code or
    notebook is not the sweep's (``code``, ``notebook_hash``: :func:`sweep_identity`) records why
    and runs nothing.

    Returns:
        The run's record (:func:`~paged.experiments.notebook.run_folder.write_record`), with
        ``folder``: the run's folder.
    """
    out_path = Path(out)
    partial, final = out_path / f"{name}{PARTIAL}{attempt}", out_path / name
    partial.mkdir(parents=True)
    write_record(partial, notebook=Path(notebook).name, parameters=parameters, status="running", error=None,
                 seconds=None, started=now(), ended=None, host=socket.gethostname(), pid=os.getpid(),
                 attempt=attempt, code=code, notebook_hash=notebook_hash)
    start = time.perf_counter()
    error = _mismatch(notebook, code, notebook_hash)
    if error is None:
        error = _execute(notebook, partial / Path(notebook).name, parameters, kernel, runner="sweep",
                         figures=None if "output_dir" in parameters else partial / "figures",
                         log=partial / "run.log")[1]
    seconds = round(time.perf_counter() - start, 3)
    _repoint(partial, final)
    write_record(partial, status="failed" if error else "finished", error=error, seconds=seconds, ended=now())
    trash = out_path / f".{name}.replaced-{attempt}"
    if final.exists():
        final.rename(trash)
    partial.rename(final)
    shutil.rmtree(trash, ignore_errors=True)
    return {**read_record(final), "folder": name}


def _mismatch(notebook: str, code: str, notebook_hash: str) -> str | None:
    """Why this worker must not run the sweep's run (other code or packages, another or no copy of
    the notebook: its results would not be the sweep's), or None."""
    host = socket.gethostname()
    try:
        here = sweep_identity(notebook)
    except OSError:
        return f"FileNotFoundError: {host} cannot read {notebook}; put it on a file system every worker shares"
    if code and here[0] != code:
        return (f"PackageMismatch: {host} has another version of the paged package or of the packages it uses "
                f"(code {here[0]}, the sweep's {code}); install the same versions on every worker")
    if notebook_hash and here[1] != notebook_hash:
        return (f"NotebookMismatch: {notebook} on {host} is not the sweep's notebook; put it on a file system "
                "every worker shares")
    return None


def _last_line(text: str) -> str:
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _execute(notebook: str, output: Path, parameters: dict, kernel: str | None, *, runner: str,
             figures: Path | None = None, log: Path | None = None):
    """:func:`paged.experiments.notebook.execute.run_notebook`, with papermill's log (each cell's output,
    as it comes) in ``log``; ``(its NotebookRun or None, the error's last line or None)``. Errors
    other than a cell's (no kernel could start, the kernel died) are a failed run too."""
    import logging

    from paged.experiments.notebook.execute import run_notebook as execute

    logger = logging.getLogger("papermill")
    handler = logging.FileHandler(log, encoding="utf-8") if log else None
    saved = logger.level, logger.propagate
    if handler:
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False  # the run's output goes to its log, not this process's stderr
    try:
        run = execute(notebook, output, parameters, figures=figures, kernel=kernel, runner=runner,
                      log_output=handler is not None)
        if run.error is None:
            return run, None
        name, _, message = run.error.partition(": ")
        return run, f"{name}: {_last_line(message)}".rstrip(": ")
    except Exception as err:  # noqa: BLE001 - the kernel died, papermill could not start it...: a failed run
        return None, f"{type(err).__name__}: {_last_line(str(err))}".rstrip(": ")
    finally:
        if handler:
            logger.removeHandler(handler)
            handler.close()
            logger.setLevel(saved[0])
            logger.propagate = saved[1]


def _repoint(partial: Path, final: Path) -> None:
    """Name the final folder instead of the partial one in the run's text files: the executed
    notebook records its ``output_dir`` (absolute, or relative to the notebook's folder) and its
    figures' parameters, the log its paths. The partial name holds the attempt's random id, so
    nothing else matches it."""
    from paged.atomic import write_text

    for path in partial.iterdir():
        if path.suffix in (".ipynb", ".log") and path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            if partial.name in text:
                write_text(path, text.replace(partial.name, final.name))


def sweep_notebook(notebook: str | Path, parameter_sets: list[dict], out_dir: str | Path, *, workers: int = 1,
                   kernel: str | None = None, force: bool = False, grid=None) -> pd.DataFrame:
    """Run ``notebook`` once per parameter set, through :func:`run_jobs` (so on a cluster too), into
    ``out_dir/NAME`` (:func:`~paged.experiments.notebook.run_folder.run_name`), skipping runs that
    already finished with the same parameters, notebook and code unless ``force``.

    Args:
        grid: the grid as the user wrote it, recorded in ``sweep.json`` (default: the parameter sets).

    Returns:
        The summary table (also in ``out_dir/summary.csv``): one row per parameter set, in order:
        ``folder``, its parameters, ``status`` (finished, failed, interrupted, pending, outdated:
        :mod:`~paged.experiments.notebook.sweep_summary`),
        ``seconds``, ``ended``, ``error`` (the error's last line) and the notebook's headline numbers.

    Raises:
        FileNotFoundError: if the notebook does not exist.
        ValueError: before any run, if a parameter set names a parameter the notebook's parameters
            cell does not declare (the message names it), two sets are the same, ``out_dir`` holds
            a sweep of another notebook, or another sweep is writing to it
            (:class:`~paged.experiments.notebook.run_folder.SweepLocked`).
        SweepInterrupted: on Ctrl-C, after marking the runs under way and writing the summary.
        SweepFailed: when a run's own machinery raised (not its notebook: that is a failed run),
            after every other run and the summary.
    """
    from paged.experiments.notebook.sweep_summary import interrupted_message, summarize

    notebook = Path(notebook).resolve()
    if not notebook.is_file():
        raise FileNotFoundError(f"notebook {str(notebook)!r} does not exist")
    check_parameter_names(notebook, parameter_sets)
    names = [run_name(p) for p in parameter_sets]
    _refuse_repeats(names, parameter_sets)
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with SweepLock(out):
        code, nb_hash = sweep_identity(notebook)
        _write_manifest(out, notebook, grid if grid is not None else parameter_sets, names, parameter_sets, code)
        attempt = secrets.token_hex(3)
        jobs, skipped = [], 0
        for name, params in zip(names, parameter_sets):
            if not force and _finished(out / name, params, code, nb_hash):
                skipped += 1
                continue
            _clear_partials(out, name)
            jobs.append({"notebook": str(notebook), "out": str(out), "name": name, "parameters": params,
                         "attempt": attempt, "kernel": kernel, "code": code, "notebook_hash": nb_hash})
        if skipped:
            print(f"{skipped} of {len(names)} runs already finished with these parameters and code: kept "
                  f"(--force reruns them)", flush=True)
        try:
            records = run_jobs(execute_run, jobs, workers=workers, desc=notebook.stem)
        except KeyboardInterrupt:
            for name in names:
                partial = out / f"{name}{PARTIAL}{attempt}"
                if read_record(partial).get("status") == "running":
                    write_record(partial, status="interrupted", ended=now(), error="KeyboardInterrupt")
            summary = summarize(out, notebook, names, parameter_sets)
            raise SweepInterrupted(interrupted_message(out, summary), summary) from None
        except SweepFailed:  # a run's own machinery failed (a folder could not be renamed...): the others stay
            summarize(out, notebook, names, parameter_sets)
            raise
        unseen = [r for r in records if not (out / r["folder"] / "run.json").is_file()]
        if unseen:
            import warnings

            warnings.warn(f"{len(unseen)} runs ended on {', '.join(sorted({str(r.get('host')) for r in unseen}))} "
                          f"but their folders are not in {out} here: the sweep's folder must be on a file system "
                          f"that every worker shares, at the same path", stacklevel=2)
        return summarize(out, notebook, names, parameter_sets)


def _refuse_repeats(names: list[str], parameter_sets: list[dict]) -> None:
    seen: dict[str, dict] = {}
    for name, params in zip(names, parameter_sets):
        key = name.casefold()  # one folder on a case-insensitive file system
        if key in seen:
            same = seen[key] == params
            raise ValueError(f"the grid has the parameter set {params!r} {'twice' if same else 'and ' + repr(seen[key])}"
                             f"{'' if same else ', which share the run folder ' + repr(name)}")
        seen[key] = params


def _finished(folder: Path, params: dict, code: str, nb_hash: str) -> bool:
    """True if ``folder`` holds a finished run of ``params`` made by this code and notebook."""
    import json

    record = read_record(folder)
    same = json.dumps(record.get("parameters"), sort_keys=True, default=str) == json.dumps(params, sort_keys=True,
                                                                                            default=str)
    return (record.get("status") == "finished" and same and record.get("code") == code
            and record.get("notebook_hash") == nb_hash)


def _clear_partials(out: Path, name: str) -> None:
    """Remove the unfinished attempts of run ``name`` (it is about to run again)."""
    for path in out.glob(f"{name}{PARTIAL}*"):
        if path.is_dir() and path.name[len(name):].startswith(PARTIAL):
            shutil.rmtree(path, ignore_errors=True)


def _write_manifest(out: Path, notebook: Path, grid, names: list[str], parameter_sets: list[dict], code: str) -> None:
    """``out/sweep.json``: the notebook, the grid, and every run folder ever swept here with its
    parameters (earlier grids' runs kept).

    Raises:
        ValueError: if ``out`` holds a sweep of another notebook.
    """
    import json

    from paged.atomic import write_text

    path = out / MANIFEST
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        old = {}
    if old.get("notebook") and old["notebook"] != notebook.name:
        raise ValueError(f"{out} holds a sweep of {old['notebook']}; give {notebook.name} another output folder")
    runs = {**old.get("runs", {}), **dict(zip(names, parameter_sets))}
    manifest = {"notebook": notebook.name, "notebook_path": str(notebook), "grid": grid, "code": code,
                "created": old.get("created", now()), "updated": now(), "runs": runs}
    write_text(path, json.dumps(manifest, indent=1, default=str, allow_nan=True) + "\n")
