"""``figures/MANIFEST.json``: where every figure in a folder came from, kept out of the image files.

A figure's PNG and PDF stay byte-stable (:func:`paged.experiments.notebook.plotting.save_figure` fixes
their metadata), so the provenance lives beside them, one entry per figure::

    {"name", "number", "section", "claim",       # what it shows
     "notebook", "parameters", "run",            # what made it: the notebook, its parameters, the runner
     "fingerprint",                              # the run's provenance.fingerprint (None outside a runner)
     "code", "environment", "commit", "dirty",   # code digest, environment key, git state
     "files": {"png": {"path", "sha256", "bytes"}, "pdf": ..., "csv": ...}}

plus, per notebook a runner ran (``notebooks``), the fingerprint's parts (the notebook's digest, every
code file it uses with its SHA-256, the data digest, the parameters) and the figures it made, and the
environments the entries name (``environments``: package versions, the pinned font, FreeType, zlib).
``unlisted`` names the figure files of the folder that no entry describes.

The manifest changes only together with the files it describes: a figure set is staged and
committed with its entries in one journaled step (:mod:`paged.experiments.notebook.figure_set`), under
the folder's lock (:func:`locked`), so it always describes what is on disk.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

from paged.atomic import sigint_held, write_text

__all__ = ["MANIFEST_NAME", "FIGURE_METADATA_KEY", "FIGURE_EXTENSIONS", "REGENERATED", "JOURNAL_NAME", "NEW_MANIFEST",
           "file_entry", "figure_outputs", "figure_files", "git_state", "read_manifest", "write_manifest", "dumps",
           "locked", "manifest_problems", "empty_manifest", "apply_journal", "recover"]

#: The manifest's file name in a figure folder.
MANIFEST_NAME = "MANIFEST.json"
#: Key of the output metadata that describes a figure in an executed notebook (written by
#: :func:`paged.experiments.notebook.plotting.save_figure`; here so that reading it needs no matplotlib).
FIGURE_METADATA_KEY = "paged_figure"
#: The journal of a figure-set commit in progress, in the figure folder
#: (:mod:`paged.experiments.notebook.figure_set`).
JOURNAL_NAME = ".figures-commit.json"
#: The new manifest of a commit, in its staging folder until the commit moves it.
NEW_MANIFEST = f".{MANIFEST_NAME}.new"
#: The files of one figure.
FIGURE_EXTENSIONS = ("png", "pdf", "csv")
#: What a run regenerates (figures, executed notebooks, the report; README.md's generated claims
#: table): changes to them are not code changes, so they do not make ``dirty`` true.
REGENERATED = ("figures", "build")


def empty_manifest() -> dict:
    """A manifest with no figure: ``{"environments": {}, "figures": [], "notebooks": {}, "unlisted": []}``."""
    return {"environments": {}, "figures": [], "notebooks": {}, "unlisted": []}


def file_entry(path: str | Path) -> dict:
    """``{"path": file name, "sha256", "bytes"}`` of a file (None for both where it is missing)."""
    path = Path(path)
    if not path.is_file():
        return {"path": path.name, "sha256": None, "bytes": None}
    data = path.read_bytes()
    return {"path": path.name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def figure_outputs(notebook) -> list[dict]:
    """The figures an executed notebook shows: for each PNG output with figure metadata, that
    metadata (``name``, ``number``, ``claim``, ``section``, ``files``, ``parameters``) plus
    ``png`` (the base64 image) and ``cell`` (the code cell's index), in notebook order.

    Args:
        notebook: a path to an ``.ipynb`` or an ``nbformat`` notebook.

    Raises:
        OSError, nbformat.reader.NotJSONError: for a missing or unreadable notebook file.
    """
    import nbformat

    nb = nbformat.read(str(notebook), as_version=4) if isinstance(notebook, (str, Path)) else notebook
    found = []
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            info = output.get("metadata", {}).get(FIGURE_METADATA_KEY)
            if info and "image/png" in output.get("data", {}):
                found.append({**info, "png": output["data"]["image/png"], "cell": index})
    return found


def _readme_changed_outside_claims(root: str | Path) -> bool:
    """True if README.md differs from HEAD's outside the generated claims table (which ``make
    reproduce`` rewrites); False when only the table changed."""
    from paged.experiments.notebook.claims import strip_claims_table

    try:
        head = subprocess.run(["git", "-C", str(root), "show", "HEAD:README.md"], capture_output=True, text=True,
                              timeout=30)
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                             timeout=30)
        now = (Path(top.stdout.strip()) / "README.md").read_text(encoding="utf-8")
    except (OSError, subprocess.TimeoutExpired):
        return True
    return head.returncode != 0 or strip_claims_table(head.stdout) != strip_claims_table(now)


def git_state(root: str | Path = ".", ignore=REGENERATED) -> dict:
    """``{"commit": sha, "dirty": bool, "changed": [paths]}`` of the git work tree at ``root``
    (``None`` for all three where git or a repository is missing).

    ``changed`` lists the tracked files with uncommitted changes, except those under the folders
    ``ignore`` names (relative to the work tree's top; default :data:`REGENERATED`) and README.md when
    only its generated claims table changed: what a run regenerates is not a code change.
    """
    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "HEAD")
        status = git("status", "--porcelain", "--untracked-files=no", "--", ":/",
                     *(f":(top,exclude){folder}" for folder in ignore))
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None, "changed": None}
    if head.returncode != 0 or status.returncode != 0:
        return {"commit": None, "dirty": None, "changed": None}
    changed = sorted(line[3:].split(" -> ")[-1] for line in status.stdout.splitlines() if line.strip())
    if "README.md" in changed and not _readme_changed_outside_claims(root):
        changed.remove("README.md")
    return {"commit": head.stdout.strip(), "dirty": bool(changed), "changed": changed}


def dumps(manifest: dict) -> str:
    """The manifest as written: JSON, sorted keys, 2-space indent, one trailing newline."""
    return json.dumps(manifest, indent=2, sort_keys=True, allow_nan=False) + "\n"


def apply_journal(target: Path, journal: dict) -> None:
    """Carry out a journal's renames (those not done yet), then drop the journal and the staging folder."""
    staging = target / journal["staging"]
    for name in journal["files"]:
        if (staging / name).exists():
            os.replace(staging / name, target / name)
    if (staging / NEW_MANIFEST).exists():
        os.replace(staging / NEW_MANIFEST, target / MANIFEST_NAME)
    (target / JOURNAL_NAME).unlink(missing_ok=True)
    shutil.rmtree(staging, ignore_errors=True)


def recover(target: str | Path) -> bool:
    """Finish a commit into ``target`` that was interrupted after its journal was written (module
    docstring). True if there was one. Idempotent; O(files of that commit)."""
    path = Path(target) / JOURNAL_NAME
    try:
        journal = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return False
    except ValueError:  # the journal is written atomically: unreadable means not ours; leave it
        return False
    with sigint_held():
        apply_journal(Path(target), journal)
    return True


def read_manifest(folder: str | Path) -> dict:
    """The manifest of ``folder`` (:func:`empty_manifest` where there is none, or it cannot be read
    as one, e.g. an older format without ``notebooks``), with any interrupted commit finished first
    (:func:`recover`)."""
    folder = Path(folder)
    recover(folder)
    try:
        manifest = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return empty_manifest()
    if not isinstance(manifest, dict) or not isinstance(manifest.get("figures"), list):
        return empty_manifest()
    return {**empty_manifest(), **manifest}


def write_manifest(folder: str | Path, manifest: dict) -> Path:
    """Write ``manifest`` to ``folder/MANIFEST.json`` atomically (:mod:`paged.atomic`). Returns the path."""
    out = Path(folder) / MANIFEST_NAME
    write_text(out, dumps(manifest))
    return out


@contextmanager
def locked(folder: str | Path):
    """An exclusive lock on ``folder``'s figures and manifest (``flock`` on the folder itself, held for
    the block, so no lock file is left among the figures): two notebooks committing figure sets into
    one folder (``make reproduce`` with two workers) take turns."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def figure_files(folder: str | Path) -> list[str]:
    """The names of the figure files (PNG, PDF, CSV) in ``folder``, sorted."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir()
                  if p.is_file() and p.suffix[1:] in FIGURE_EXTENSIONS and not p.name.startswith("."))


def manifest_problems(folder: str | Path, manifest: dict | None = None) -> list[str]:
    """Where ``folder``'s files and its manifest disagree, one line each: a listed file missing or
    with other bytes than recorded, a figure file no entry lists. ``[]`` when the manifest is true.

    Args:
        manifest: the manifest to check (default: :func:`read_manifest` of ``folder``).
    """
    folder = Path(folder)
    manifest = read_manifest(folder) if manifest is None else manifest
    problems, listed = [], set()
    for i, figure in enumerate(manifest["figures"]):
        files = figure.get("files") if isinstance(figure, dict) else None
        entries = list(files.values()) if isinstance(files, dict) else None
        if entries is None or not all(isinstance(e, dict) and isinstance(e.get("path"), str) for e in entries):
            name = figure.get("name", "?") if isinstance(figure, dict) else "?"
            problems.append(f"figure entry {i} ({name}) of {MANIFEST_NAME} is malformed: it needs a 'files' "
                            "mapping of entries with a 'path'")
            continue
        for entry in entries:
            listed.add(entry["path"])
            now = file_entry(folder / entry["path"])
            if now["sha256"] is None:
                problems.append(f"{entry['path']}: listed in {MANIFEST_NAME} but missing")
            elif now["sha256"] != entry.get("sha256"):
                problems.append(f"{entry['path']}: its bytes are not those {MANIFEST_NAME} records "
                                "(written by something other than save_figure)")
    problems += [f"{name}: a figure file {MANIFEST_NAME} does not list" for name in figure_files(folder)
                 if name not in listed]
    return problems
