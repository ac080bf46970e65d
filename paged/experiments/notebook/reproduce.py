"""``make reproduce`` and ``make nb``: rerun exactly the notebooks whose figures are not what their code makes now.

A notebook is up to date when its executed copy (``build/notebooks/NAME.ipynb``), its record in
``figures/MANIFEST.json`` and the entry of every figure it made carry the fingerprint a run would have
now (:func:`paged.experiments.notebook.provenance.fingerprint`: its cells, the package code it
imports, the data, the environment, its default parameters), and the figure files are those the
entries describe. Anything else is a reason to rerun it, and :func:`plan` says which:

* a change to a file of ``paged`` the notebook uses (``paged/cli.py`` reruns none), its cells, the
  data or the environment;
* a figure made by another run: JupyterLab or plain papermill with other parameters (the entry says
  which parameters differ), a sweep, an older run;
* a figure file changed, missing or not described by the manifest; no executed copy (a fresh clone).

Each notebook runs through :func:`paged.experiments.notebook.execute.run_notebook` (its figures
committed as one set when it ends), then README.md's claims table is rewritten from the figures.
Ctrl-C prints one line, ``interrupted``, and exits with status 130: each notebook's figures are
its previous set or its new one, and the executed notebooks are whole.

Command line (``make reproduce``, ``make nb NB=03``, ``make -j2 reproduce``)::

    python -m paged.experiments.notebook.reproduce [--only 03] [--force] [--workers 2] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Step", "plan", "reproduce", "main"]


@dataclass
class Step:
    """One notebook of a reproduce run: why it runs (``reasons``; empty: up to date)."""

    notebook: Path
    reasons: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.notebook.stem


#: How a manifest entry's ``run`` reads in a reason.
_RUNS = {"interactive": "a JupyterLab run", "kernel": "a run outside make (papermill or a Jupyter kernel)",
         "script": "a script", None: "an earlier run"}


def _names(names: list[str]) -> str:
    return f"{names[0]}" if len(names) == 1 else f"{len(names)} figures ({', '.join(names[:2])}{', ...' if len(names) > 2 else ''})"


def _changed_code(old: dict, new: dict) -> list[str]:
    return sorted(p for p in set(old) | set(new) if old.get(p) != new.get(p))


def _parameter_difference(parameters: dict, defaults: dict) -> str:
    """``"block_size=16 (default 4)"``-like text of the parameters that differ from the defaults."""
    diff = [f"{k}={parameters[k]!r} (default {defaults[k]!r})" for k in sorted(parameters)
            if k in defaults and k != "output_dir" and parameters[k] != defaults[k]]
    return ", ".join(diff[:3]) + (f" and {len(diff) - 3} more" if len(diff) > 3 else "")


def _reasons(notebook: Path, figures: Path, executed: Path, manifest: dict, current: dict, defaults: dict) -> list[str]:
    """Why ``notebook`` must run again (module docstring); ``[]`` when it is up to date."""
    from paged.experiments.notebook.manifest import file_entry

    name, reasons = notebook.stem, []
    record = manifest["notebooks"].get(name)
    if record is None:
        return [f"{figures}/MANIFEST.json has no run of it by make reproduce"]
    if record.get("fingerprint") != current["fingerprint"]:
        code = _changed_code(record.get("code", {}), current["code"])
        if code:
            reasons.append(f"code changed: {', '.join(code[:3])}" + (f" and {len(code) - 3} more" if len(code) > 3 else ""))
        if record.get("notebook_sha256") != current["notebook"]:
            reasons.append("its cells changed")
        if record.get("data") != current["data"]:
            reasons.append("the package data changed")
        if record.get("environment") != current["environment"]:
            reasons.append("the environment changed (package versions, font or libraries: see MANIFEST.json)")
        if json.loads(json.dumps(record.get("parameters"), default=str)) != current["parameters"]:
            reasons.append("its parameters changed")
        if not reasons:
            reasons.append("its fingerprint changed")
    entries = {f["name"]: f for f in manifest["figures"]}
    foreign: dict[str, list[str]] = {}  # how another run made figures -> which
    for fig in record.get("figures", []):
        entry = entries.get(fig)
        if entry is None:
            reasons.append(f"{fig}: no manifest entry")
        elif entry.get("fingerprint") != record.get("fingerprint"):
            diff = _parameter_difference(entry.get("parameters") or {}, defaults)
            foreign.setdefault(_RUNS.get(entry.get("run"), f"a {entry.get('run')} run")
                               + (f" with {diff}" if diff else ""), []).append(fig)
        else:
            for info in entry.get("files", {}).values():
                if file_entry(figures / info["path"])["sha256"] != info.get("sha256"):
                    reasons.append(f"{info['path']} is missing or not the file its manifest entry describes")
    for how, names in foreign.items():
        reasons.append(f"{_names(names)} made by {how}")
    others = sorted(f["name"] for f in manifest["figures"]
                    if f.get("notebook") == name and f["name"] not in record.get("figures", []))
    if others:
        reasons.append(f"{_names(others)} made by another run of it")
    copy = executed / f"{name}.ipynb"
    if not copy.is_file():
        reasons.append(f"no executed copy in {executed}/")
    elif not reasons:
        try:
            stamp = json.loads(copy.read_text(encoding="utf-8"))["metadata"].get("paged", {})
        except (OSError, ValueError, KeyError):
            stamp = {}
        if stamp.get("fingerprint") != current["fingerprint"]:
            reasons.append(f"{copy} is from another run")
    return reasons


def plan(notebooks: list[Path], figures: str | Path, executed: str | Path, *, force: bool = False) -> list[Step]:
    """One :class:`Step` per notebook: the reasons it must run (module docstring), in order."""
    from paged.experiments.notebook.execute import figure_folder, notebook_defaults
    from paged.experiments.notebook.manifest import read_manifest
    from paged.experiments.notebook.provenance import environment, fingerprint

    figures, executed = Path(figures), Path(executed)
    manifest = read_manifest(figures)
    env = environment()
    steps = []
    for notebook in notebooks:
        if force:
            steps.append(Step(notebook, ["asked for"]))
            continue
        _, params = figure_folder(notebook.resolve(), {}, figures, notebook.resolve().parent)
        current = fingerprint(notebook, params, env=env)
        steps.append(Step(notebook, _reasons(notebook, figures, executed, manifest, current, notebook_defaults(notebook))))
    return steps


def _run_here(step: Step, figures: Path, executed: Path, runner: str):
    from paged.experiments.notebook.execute import run_notebook

    return run_notebook(step.notebook, executed / step.notebook.name, figures=figures, runner=runner,
                        failed_output=executed / "partial" / step.notebook.name)


def _command(step: Step, figures: Path, executed: Path, runner: str) -> list[str]:
    return [sys.executable, "-m", "paged.experiments.notebook.execute", str(step.notebook),
            str(executed / step.notebook.name), "--figures", str(figures), "--runner", runner,
            "--failed-output", str(executed / "partial" / step.notebook.name), "--json"]


def _report(name: str, run, width: int) -> bool:
    if run["error"]:
        print(f"{name:<{width}} FAILED after {run['seconds']:.0f} s: {run['error']}\n{'':<{width}} see {run['output']}"
              + (f" and {run['log']}" if run.get("log") else ""), flush=True)
        return False
    print(f"{name:<{width}} done in {run['seconds']:.0f} s ({len(run['made'])} figures)", flush=True)
    return True


def reproduce(notebooks_dir: str | Path = "notebooks", figures: str | Path = "figures",
              executed: str | Path = "build/notebooks", *, readme: str | Path | None = "README.md",
              only: str | None = None, force: bool = False, workers: int = 1, dry_run: bool = False,
              runner: str = "make reproduce") -> int:
    """Rerun the notebooks :func:`plan` finds out of date, printing one line per notebook; then
    rewrite ``readme``'s claims table from ``figures`` (None: leave it).

    Args:
        only: run only the notebook whose name starts with this (``"03"``); with ``force``, run it
            even when it is up to date (``make nb``).
        workers: notebooks at once (each in its own process when > 1).
        dry_run: print the plan, run nothing.

    Returns:
        0 when every notebook is up to date or ran to its end; 1 when one failed (its figures keep
        their previous set; its executed copy is in ``executed/partial/``); 2 for ``only`` matching
        no notebook or several.

    Raises:
        KeyboardInterrupt: Ctrl-C (after every running notebook has cleaned up).
    """
    from dataclasses import asdict

    notebooks = sorted(Path(notebooks_dir).glob("[0-9][0-9]_*.ipynb"))
    if only is not None:
        chosen = [nb for nb in notebooks if nb.stem.startswith(only)]
        if len(chosen) != 1:
            names = ", ".join(nb.stem for nb in notebooks)
            print(f"error: {'no notebook' if not chosen else 'more than one notebook'} matches {only!r}; "
                  f"choose one of: {names}", file=sys.stderr)
            return 2
        notebooks = chosen
    figures, executed = Path(figures), Path(executed)
    steps = plan(notebooks, figures, executed, force=force)
    width = max(len(s.name) for s in steps) + 2
    todo = [s for s in steps if s.reasons]
    for step in steps:
        if not step.reasons:
            print(f"{step.name:<{width}} up to date", flush=True)
        else:
            shown = "; ".join(step.reasons[:3]) + (f"; and {len(step.reasons) - 3} more" if len(step.reasons) > 3 else "")
            print(f"{step.name:<{width}} {'would run' if dry_run else 'runs'}: {shown}", flush=True)
    if dry_run:
        return 0
    ok = True
    if workers <= 1:
        for step in todo:
            ok &= _report(step.name, asdict(_run_here(step, figures, executed, runner)), width)
    else:
        ok = _run_parallel(todo, figures, executed, runner, workers, width)
    if readme is not None and todo:
        from paged.experiments.notebook.claims import update_readme

        try:
            changed = update_readme(readme, figures)
        except (OSError, KeyError, ValueError) as err:
            print(f"claims table of {readme} not rewritten: {err}", flush=True)
        else:
            print(f"claims table of {readme}: {'rewritten' if changed else 'unchanged'}", flush=True)
    return 0 if ok else 1


def _run_parallel(steps: list[Step], figures: Path, executed: Path, runner: str, workers: int, width: int) -> bool:
    """Run ``steps`` ``workers`` at once, each notebook in its own process (they share the terminal's
    Ctrl-C, clean up and exit 130 silently; their stderr is read here)."""
    pending, running, ok = list(steps), {}, True
    try:
        while pending or running:
            while pending and len(running) < workers:
                step = pending.pop(0)
                running[step.name] = subprocess.Popen(_command(step, figures, executed, runner), stdout=subprocess.PIPE,
                                                      stderr=subprocess.PIPE, text=True)
            for name, proc in list(running.items()):
                if proc.poll() is None:
                    continue
                out, err = proc.communicate()
                del running[name]
                if proc.returncode == 130:
                    raise KeyboardInterrupt
                try:
                    ok &= _report(name, json.loads(out.strip().splitlines()[-1]), width)
                except (ValueError, IndexError):
                    print(f"{name:<{width}} FAILED: {(err.strip().splitlines() or ['no output'])[-1]}", flush=True)
                    ok = False
            time.sleep(0.2)
    except KeyboardInterrupt:
        from paged.experiments.notebook.execute import interrupted

        for proc in running.values():  # they had the same Ctrl-C; let them clean up
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        raise
    return ok


def main(argv: list[str] | None = None) -> int:
    """``python -m paged.experiments.notebook.reproduce``: see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m paged.experiments.notebook.reproduce",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--notebooks", default="notebooks", help="folder of the notebooks (NN_name.ipynb)")
    parser.add_argument("--figures", default="figures", help="the figure folder (with its MANIFEST.json)")
    parser.add_argument("--executed", default="build/notebooks", help="folder of the executed notebooks")
    parser.add_argument("--readme", default="README.md", help="file whose claims table is rewritten ('' for none)")
    parser.add_argument("--only", help="one notebook, by the start of its name (03)")
    parser.add_argument("--force", action="store_true", help="run even what is up to date")
    parser.add_argument("--workers", type=int, default=1, help="notebooks at once")
    parser.add_argument("--dry-run", action="store_true", help="say what would run and why; run nothing")
    parser.add_argument("--runner", default="make reproduce", help="the label figures record as their run")
    parser.add_argument("--backend", default="loky", choices=("loky", "dask", "ray"),
                        help="where the notebooks' simulations run: loky (this machine's processes), or a Dask / Ray "
                             "cluster (--address, else a local one of --cluster-workers processes)")
    parser.add_argument("--address", default=None, help="the cluster: tcp://scheduler:8786 (dask), auto (ray)")
    parser.add_argument("--cluster-workers", type=int, default=2, help="processes of a local cluster")
    args = parser.parse_args(argv)
    from paged.experiments.notebook.jobs import cluster_for_children

    try:
        with cluster_for_children(args.backend, args.address, n_workers=args.cluster_workers):
            return reproduce(args.notebooks, args.figures, args.executed, readme=args.readme or None, only=args.only,
                             force=args.force, workers=args.workers, dry_run=args.dry_run, runner=args.runner)
    except ImportError as err:  # the backend's package is missing: one line
        print(f"error: --backend {args.backend}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return interrupted()


if __name__ == "__main__":
    sys.exit(main())
