"""Run one notebook with parameters: figures committed as one set, the executed copy written whole, quiet on Ctrl-C.

:func:`run_notebook` is what every runner of the project calls (``make reproduce``, ``make nb``,
sweeps). It runs the notebook with papermill on this interpreter's kernel
(:class:`~paged.experiments.notebook.kernel.ThisPythonKernelManager`) and:

* **figures as one set**: the folder the notebook's ``output_dir`` names is staged
  (:mod:`paged.experiments.notebook.figure_set`): every figure the notebook saves goes to a hidden
  staging folder inside it, and only a run that reaches its end moves them in, with their manifest
  entries, in one journaled step. A failed or interrupted run leaves the folder's previous set;
* **provenance**: each entry records the run's fingerprint (the notebook, the code it uses, the data,
  the environment, the parameters: :func:`paged.experiments.notebook.provenance.fingerprint`) and the
  runner's label; the notebook's record in the manifest lists every code file with its SHA-256;
* **the executed notebook** is written to a temporary name after every cell and renamed to
  ``output`` when the run ends without error (``failed_output`` when a cell raised; nothing on Ctrl-C),
  with the fingerprint in its metadata (``metadata.paged``);
* **quiet**: the kernel's own stdout and stderr (ipykernel's log lines, worker processes' tracebacks
  after an interrupt) go to a log kept only beside a failed run; the kernel is never interrupted at
  the end of a run, and Ctrl-C shuts it down and re-raises ``KeyboardInterrupt`` with nothing printed.

Command line, one notebook (one line of output; Ctrl-C prints ``interrupted`` and exits 130)::

    python -m paged.experiments.notebook.execute notebooks/03_throughput.ipynb build/03.ipynb \\
        --figures build/figures_03 -p block_size 32 -y 'models: [opt-13b]'
"""

from __future__ import annotations

import argparse
import ast
import gc
import json
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from paged.atomic import mode_for, sigint_held
from paged.experiments.notebook import figure_set
from paged.experiments.notebook.kernel import KERNEL_NAME, ThisPythonKernelManager

__all__ = ["NotebookRun", "run_notebook", "notebook_defaults", "figure_folder", "interrupted", "main"]


@dataclass
class NotebookRun:
    """What :func:`run_notebook` did.

    Attributes:
        notebook: the notebook run (absolute path).
        output: the executed notebook (``output`` after a run to the end, ``failed_output`` after an
            error).
        parameters: the parameters it ran with (``output_dir`` included).
        figures: the staged figure folder (absolute).
        made: the figures committed to it (none after an error).
        seconds: wall time of the run.
        error: None, or the error's ``"Name: message"`` when a cell raised.
        fingerprint: the run's provenance fingerprint (SHA-256).
        log: the kernel's log, kept beside a failed run when it holds anything; else None.
    """

    notebook: str
    output: str
    parameters: dict
    figures: str
    made: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None
    fingerprint: str = ""
    log: str | None = None


def notebook_defaults(notebook: str | Path) -> dict:
    """The default values of the notebook's papermill parameters (its cell tagged ``parameters``),
    as Python values (those that are literals; ``float("inf")`` too).

    Raises:
        OSError: the notebook cannot be read.
    """
    import nbformat
    from papermill.translators import papermill_translators

    nb = nbformat.read(str(notebook), as_version=4)
    cell = next((c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])), None)
    if cell is None:
        return {}
    spec = nb.metadata.get("kernelspec", {})
    language = spec.get("language") or nb.metadata.get("language_info", {}).get("name") or "python"
    found = {}
    for parameter in papermill_translators.find_translator(spec.get("name") or KERNEL_NAME, language).inspect(cell):
        text = parameter.default
        try:
            found[parameter.name] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            if text.replace(" ", "") in ('float("inf")', "float('inf')"):
                found[parameter.name] = float("inf")
    return found


def figure_folder(notebook: Path, parameters: dict, figures, cwd: Path) -> tuple[Path, dict]:
    """The folder the run's figures go to (absolute) and the parameters with its ``output_dir``.

    ``figures`` (relative to this process's working folder) becomes ``output_dir`` relative to the
    kernel's working folder ``cwd``; without it, ``output_dir`` (given, or the notebook's default) is
    read relative to ``cwd``.
    """
    parameters = dict(parameters)
    if figures is not None:
        target = Path(figures).resolve()
        given = parameters.get("output_dir")
        if given is not None and (cwd / given).resolve() != target:
            raise ValueError(f"output_dir {given!r} (from {cwd}) and figures {str(figures)!r} name different folders")
        # relative to the kernel's folder where both lie in one tree (recorded parameters then read the
        # same on every machine: "../figures"), else absolute
        inside = target.is_relative_to(cwd.parent)
        parameters["output_dir"] = os.path.relpath(target, cwd) if inside else str(target)
        return target, parameters
    output_dir = parameters.get("output_dir", notebook_defaults(notebook).get("output_dir"))
    if not isinstance(output_dir, str):
        raise ValueError(f"{notebook.name} declares no output_dir parameter; give figures=")
    return (cwd / output_dir).resolve(), parameters


def _manager_class(env: dict, log) -> type:
    """A kernel manager class for one run: :class:`ThisPythonKernelManager` whose kernel gets ``env``
    added to its environment and writes its stdout and stderr to the open file ``log``."""

    class RunKernelManager(ThisPythonKernelManager):
        async def start_kernel(self, **kw):
            kw["env"] = {**kw.get("env", os.environ), **env}
            kw.setdefault("stdout", log)
            kw.setdefault("stderr", log)
            return await super().start_kernel(**kw)

    return RunKernelManager


class _Interrupts:
    """Ctrl-C during a run: the kernel manager shuts the kernel down at once (no graceful wait), and
    ``KeyboardInterrupt`` is raised as usual. Main thread only; elsewhere a no-op."""

    #: Loggers that report the abandoned kernel's death ("Kernel died while waiting for execute reply",
    #: an orphaned task's DeadKernelError): silent from Ctrl-C to the end of the run.
    QUIET = ("papermill", "nbclient", "traitlets", "asyncio")

    def __enter__(self):
        ThisPythonKernelManager.abandoned.clear()
        self.previous = None
        self.silenced = {}
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.getsignal(signal.SIGINT)

            def handler(signum, frame):
                ThisPythonKernelManager.abandoned.set()
                for name in self.QUIET:
                    logger = logging.getLogger(name)
                    self.silenced.setdefault(name, logger.disabled)
                    logger.disabled = True
                if callable(self.previous):
                    self.previous(signum, frame)
                else:
                    raise KeyboardInterrupt

            signal.signal(signal.SIGINT, handler)
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
        if self.silenced:
            gc.collect()  # an orphaned task reports its exception when collected: while its logger is silent
            for name, disabled in self.silenced.items():
                logging.getLogger(name).disabled = disabled
        ThisPythonKernelManager.abandoned.clear()
        return False


def run_notebook(notebook: str | Path, output: str | Path, parameters: dict | None = None, *,
                 figures: str | Path | None = None, cwd: str | Path | None = None, kernel: str | None = None,
                 runner: str = "run_notebook", failed_output: str | Path | None = None,
                 log_output: bool = False) -> NotebookRun:
    """Run ``notebook`` with ``parameters`` into ``output``, its figures committed as one set (module docstring).

    Args:
        notebook: the ``.ipynb`` to run.
        output: where the executed notebook goes when the run ends without error (folder created).
        parameters: papermill parameters (checked by the notebook's own first cells).
        figures: the folder for the figures; it becomes the ``output_dir`` parameter (relative to
            the kernel's working folder). None: the ``output_dir`` given in ``parameters``, else the
            notebook's default, relative to ``cwd``.
        cwd: the kernel's working folder (default: the notebook's folder, where the notebooks'
            relative defaults such as ``output_dir="../figures"`` start).
        kernel: a kernel name; None: this interpreter's (:data:`~paged.experiments.notebook.kernel.KERNEL_NAME`).
        runner: the label each figure's manifest entry records as ``run`` (``"make reproduce"``, ``"sweep"``).
        failed_output: where the executed notebook of a run that failed goes (default ``output``).
        log_output: also log each cell's output, as it comes, to papermill's logger (``"papermill"``;
            a sweep's per-run log).

    Returns:
        The :class:`NotebookRun`. A cell that raises does not raise here: ``error`` says what failed
        and the figure folder keeps its previous set.

    Raises:
        KeyboardInterrupt: on Ctrl-C, after the kernel is shut down and the staged figures and the
            temporary notebook are removed (nothing printed; the previous figures and ``output`` stay).
        FileNotFoundError: the notebook does not exist.
        ValueError: ``figures`` and ``parameters["output_dir"]`` name different folders, or the
            notebook has no ``output_dir`` parameter and ``figures`` is None.
        papermill and jupyter_client errors other than a cell's (no kernel could start, the kernel died).
    """
    import papermill as pm

    from paged.experiments.notebook.manifest import git_state
    from paged.experiments.notebook.provenance import PACKAGE_ROOT, RUN_ENV, digest, environment, fingerprint

    notebook = Path(notebook).resolve()
    if not notebook.is_file():
        raise FileNotFoundError(f"notebook {str(notebook)!r} does not exist")
    output = Path(output).resolve()
    failed = Path(failed_output).resolve() if failed_output is not None else output
    cwd = Path(cwd).resolve() if cwd is not None else notebook.parent
    target, params = figure_folder(notebook, parameters or {}, figures, cwd)
    env = environment()
    print_ = fingerprint(notebook, params, env=env)
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = figure_set.new_staging(target, notebook.stem)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{output.stem}.", suffix=".tmp.ipynb", dir=output.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    log = tempfile.NamedTemporaryFile(mode="w+b", prefix=f".{output.stem}.", suffix=".log", dir=output.parent,
                                      delete=False)
    context = {"notebook": notebook.stem, "fingerprint": print_["fingerprint"], "runner": runner,
               "target": str(target), "staging": str(staging)}
    run = NotebookRun(str(notebook), str(output), params, str(target), fingerprint=print_["fingerprint"])
    start = time.perf_counter()
    try:
        with _Interrupts():
            for attempt in (1, 2):
                try:
                    pm.execute_notebook(str(notebook), str(tmp), parameters=params, cwd=str(cwd),
                                        kernel_name=kernel or KERNEL_NAME, progress_bar=False, log_output=log_output,
                                        kernel_manager_class=_manager_class({RUN_ENV: json.dumps(context)}, log))
                except pm.PapermillExecutionError as err:  # a cell raised: the notebook shows it
                    run.error = f"{err.ename}: {err.evalue}"
                except RuntimeError as err:
                    # Kernels started at once (a sweep's workers) can be handed the same free port; the one
                    # that loses dies before its first reply, having run nothing: it is started once more.
                    if attempt == 1 and "before replying to kernel_info" in str(err):
                        continue
                    raise
                break
        run.seconds = time.perf_counter() - start
        if run.error is None:
            state = git_state(PACKAGE_ROOT.parent)
            where = os.path.relpath(notebook, PACKAGE_ROOT.parent) if notebook.is_relative_to(PACKAGE_ROOT.parent) \
                else str(notebook)
            record = {"path": where, "fingerprint": print_["fingerprint"], "notebook_sha256": print_["notebook"],
                      "code": print_["code"], "data": print_["data"], "environment": print_["environment"],
                      "parameters": params, "run": runner, "commit": state["commit"], "dirty": state["dirty"],
                      "executed": os.path.relpath(output, PACKAGE_ROOT.parent)
                      if output.is_relative_to(PACKAGE_ROOT.parent) else str(output)}
            _stamp(tmp, {k: v for k, v in record.items() if k != "code"})
            os.chmod(tmp, mode_for(output))
            with sigint_held():  # the figures and the executed notebook change together
                run.made = figure_set.commit(
                    staging, target, notebook=notebook.stem, record=record, environments={print_["environment"]: env},
                    provenance={"run": runner, "fingerprint": print_["fingerprint"], "code": digest(print_["code"]),
                                "environment": print_["environment"], "commit": state["commit"],
                                "dirty": state["dirty"]})
                os.replace(tmp, output)
        else:
            failed.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(tmp, mode_for(failed))
            os.replace(tmp, failed)
            run.output = str(failed)
            log.flush()
            if Path(log.name).stat().st_size:
                kept = failed.with_suffix(".log")
                os.replace(log.name, kept)
                run.log = str(kept)
    finally:
        log.close()
        figure_set.discard(staging)
        tmp.unlink(missing_ok=True)
        Path(log.name).unlink(missing_ok=True)
    return run


def interrupted() -> int:
    """A command line's end after Ctrl-C: prints ``interrupted`` (the one line) and returns 130. The process
    is ending, so asyncio stays silent about the abandoned kernel's orphaned task, which it would report
    when collected at exit."""
    logging.getLogger("asyncio").disabled = True
    print("interrupted", file=sys.stderr)
    return 130


def _stamp(path: Path, record: dict) -> None:
    """Add the run's provenance to an executed notebook's metadata (``metadata.paged``)."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    nb.metadata["paged"] = record
    nbformat.write(nb, str(path))


def _value(text: str):
    """A ``-p`` value as papermill's command line reads it: int, float, bool, None or a string."""
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return {"True": True, "False": False, "None": None}.get(text, text)


def main(argv: list[str] | None = None) -> int:
    """``python -m paged.experiments.notebook.execute``: one notebook, one line of output.

    Returns 0 when the notebook ran to the end, 1 when a cell raised, 130 on Ctrl-C (``interrupted``).
    """
    import yaml

    parser = argparse.ArgumentParser(prog="python -m paged.experiments.notebook.execute",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("notebook")
    parser.add_argument("output", help="the executed notebook")
    parser.add_argument("--figures", help="the figure folder (the notebook's output_dir); default: its output_dir")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    parser.add_argument("-y", "--yaml", action="append", default=[], help="parameters as YAML, e.g. 'widths: [2, 4]'")
    parser.add_argument("--cwd", help="the kernel's working folder (default: the notebook's folder)")
    parser.add_argument("--runner", default="python -m paged.experiments.notebook.execute")
    parser.add_argument("--failed-output", help="where a failed run's notebook goes (default: OUTPUT)")
    parser.add_argument("--json", action="store_true", help="print the run as one JSON object")
    args = parser.parse_args(argv)
    params = {name: _value(value) for name, value in args.parameter}
    for text in args.yaml:
        params.update(yaml.safe_load(text) or {})
    try:
        run = run_notebook(args.notebook, args.output, params, figures=args.figures, cwd=args.cwd,
                           runner=args.runner, failed_output=args.failed_output)
    except KeyboardInterrupt:
        return interrupted()
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(asdict(run)))
    elif run.error:
        print(f"{Path(run.notebook).stem}: FAILED after {run.seconds:.0f} s: {run.error} (see {run.output})")
    else:
        print(f"{Path(run.notebook).stem}: {run.seconds:.0f} s, {len(run.made)} figures in {run.figures}")
    return 1 if run.error else 0


if __name__ == "__main__":
    sys.exit(main())
