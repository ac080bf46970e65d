"""``figures/MANIFEST.json``: where every figure came from, kept out of the image files.

A figure's PNG and PDF stay byte-stable (:func:`paged.experiments.notebook.plotting.save_figure` fixes
their metadata), so the provenance a reader needs lives beside them: for each figure, the notebook
that made it, the parameters it ran with, its title (paper figure number and claim) and the SHA-256
of each of its files; once for all, the git commit (and whether the tree had uncommitted changes),
Python's and the main packages' versions. It is read from the executed notebooks (``make
reproduce`` writes them to ``build/notebooks/``): each figure's PNG output there carries its
description as output metadata (:data:`FIGURE_METADATA_KEY`).

The manifest stays true between full runs too: it is written atomically (:mod:`paged.atomic`), and
every figure a notebook saves into a folder with a manifest updates that figure's file hashes
there at once (:func:`update_manifest_entry`, under a lock so two notebooks run by ``make -j2`` do
not lose each other's update), so an interrupted notebook never leaves a manifest that describes
files other than those on disk.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import platform
import subprocess
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

from paged.atomic import write_text

__all__ = ["REGENERATED", "FIGURE_METADATA_KEY", "figure_outputs", "package_versions", "git_state", "build_manifest", "write_manifest",
           "update_manifest_entry", "PACKAGES", "MANIFEST_NAME"]

#: The manifest's file name in a figure folder.
MANIFEST_NAME = "MANIFEST.json"

#: Key of the output metadata that describes a figure in an executed notebook (written by
#: :func:`paged.experiments.notebook.plotting.save_figure`; here so that reading it needs no matplotlib).
FIGURE_METADATA_KEY = "paged_figure"
#: Distributions whose versions the manifest records.
PACKAGES = ("paged", "numpy", "pandas", "matplotlib", "seaborn", "torch", "triton", "transformers", "papermill",
            "nbconvert", "ipykernel", "ipywidgets", "joblib")


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


def package_versions() -> dict[str, str | None]:
    """``{"python": version, distribution: version or None}`` for :data:`PACKAGES`."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


#: Folders a run regenerates (figures, executed notebooks, the report): their changes are not code
#: changes, so they do not make the manifest's or the report's ``dirty`` true.
REGENERATED = ("figures", "build")


def git_state(root: str | Path = ".", ignore=()) -> dict:
    """``{"commit": sha or None, "dirty": bool or None}`` of the git work tree at ``root``
    (None where git or a repository is missing).

    Args:
        ignore: folders (relative to the work tree's top) whose changes do not count as dirty,
            e.g. ``("figures", "build")``: files a run regenerates are not code.
    """
    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "HEAD")
        status = git("status", "--porcelain", "--untracked-files=no", "--", ":/",
                     *(f":(top,exclude){folder}" for folder in ignore))
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None}
    if head.returncode != 0:
        return {"commit": None, "dirty": None}
    return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip())}


def _file_entry(path: Path) -> dict:
    if not path.is_file():
        return {"path": path.name, "sha256": None, "bytes": None}
    data = path.read_bytes()
    return {"path": path.name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def build_manifest(notebooks, figures_dir: str | Path, *, root: str | Path = ".") -> dict:
    """The manifest (module docstring) of the figures in ``figures_dir`` shown by ``notebooks``.

    Args:
        notebooks: executed notebooks (paths).
        figures_dir: the folder holding the figure files.
        root: the git work tree to read the commit from.

    Returns:
        ``{"commit", "dirty", "packages", "figures": [...], "unlisted": [...]}`` (``dirty``: the code had
        uncommitted changes; regenerated folders, :data:`REGENERATED`, do not count): one entry per
        figure (by name; a figure shown twice is listed once), and the figure files of
        ``figures_dir`` that no notebook shows.

    Raises:
        FileNotFoundError: if ``figures_dir`` does not exist.
    """
    import nbformat

    figures_dir = Path(figures_dir)
    if not figures_dir.is_dir():
        raise FileNotFoundError(f"figure folder {str(figures_dir)!r} does not exist")
    figures = {}
    for path in sorted(Path(p) for p in notebooks):
        nb = nbformat.read(str(path), as_version=4)
        source = nb.metadata.get("papermill", {}).get("input_path") or str(path)
        for info in figure_outputs(nb):
            figures.setdefault(info["name"], {
                "name": info["name"], "number": info.get("number"), "section": info.get("section"),
                "claim": info.get("claim"), "notebook": source, "executed": str(path),
                "parameters": info.get("parameters", {}),
                "files": {ext: _file_entry(figures_dir / name) for ext, name in sorted(info["files"].items())}})
    shown = {entry["path"] for figure in figures.values() for entry in figure["files"].values()}
    unlisted = sorted(p.name for p in figures_dir.iterdir()
                      if p.suffix in (".png", ".pdf", ".csv") and p.name not in shown)
    return {**git_state(root, ignore=REGENERATED), "packages": package_versions(),
            "figures": [figures[name] for name in sorted(figures)], "unlisted": unlisted}


def write_manifest(notebooks, figures_dir: str | Path, out: str | Path | None = None, *, root: str | Path = ".") -> Path:
    """Write :func:`build_manifest` as JSON (sorted keys, 2-space indent, one trailing newline) to
    ``out`` (default ``figures_dir/MANIFEST.json``). Returns the path.

    Raises:
        FileNotFoundError: as :func:`build_manifest`.
    """
    manifest = build_manifest(notebooks, figures_dir, root=root)
    out = Path(out) if out is not None else Path(figures_dir) / MANIFEST_NAME
    with _locked(out.parent):
        write_text(out, _dumps(manifest))
    return out


def _dumps(manifest: dict) -> str:
    return json.dumps(manifest, indent=2, sort_keys=True, allow_nan=False) + "\n"


@contextmanager
def _locked(folder: Path):
    """An exclusive lock on ``folder``'s manifest (a lock file beside it, held for the block)."""
    with open(folder / f".{MANIFEST_NAME}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def update_manifest_entry(figures_dir: str | Path, name: str, paths: dict[str, Path]) -> bool:
    """Give the figure ``name`` in ``figures_dir/MANIFEST.json`` the SHA-256 and sizes of the files it
    was just saved to (``paths``: extension → path). True if the manifest lists the figure and was
    rewritten; False (nothing written) when there is no manifest, it cannot be read, or it does not
    list the figure: the next ``make reproduce`` adds it. O(manifest size + the files' bytes)."""
    out = Path(figures_dir) / MANIFEST_NAME
    if not out.is_file():
        return False
    with _locked(out.parent):
        try:
            manifest = json.loads(out.read_text(encoding="utf-8"))
            entry = next(f for f in manifest["figures"] if f.get("name") == name)
        except (OSError, ValueError, KeyError, TypeError, StopIteration):
            return False
        entry["files"] = {ext: _file_entry(Path(path)) for ext, path in sorted(paths.items())}
        write_text(out, _dumps(manifest))
    return True
