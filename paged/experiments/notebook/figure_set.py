"""Figure sets that change together: files staged beside their folder, then committed with their manifest entries in one step.

A figure is three files (PNG, PDF, CSV) and an entry in the folder's ``MANIFEST.json``; a notebook
makes several figures. Renaming one file is atomic (:mod:`paged.atomic`), renaming several is not, so
a set is committed the way a database commits a transaction:

1. :func:`new_staging` makes a hidden folder inside the target (same file system, so renames are
   atomic); the figures are written there, and :func:`stage_entry` records each one's manifest entry;
2. :func:`commit` takes the folder's lock, computes the new manifest, writes a journal (the list of
   renames, itself written atomically), renames every staged file and the new manifest into place
   and removes the journal. Ctrl-C is held back for those few renames (milliseconds);
3. :func:`~paged.experiments.notebook.manifest.recover` finishes a commit whose process was killed between the journal and its end
   (roll forward: every staged file is complete before the journal exists). Every commit and every
   :func:`paged.experiments.notebook.manifest.read_manifest` runs it first.

So a reader sees the old set or the new one, with a manifest that describes it; an interrupted
notebook leaves its staging folder, which :func:`discard` removes (the old set stays as it was).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from paged.atomic import sigint_held, write_text
from paged.experiments.notebook.manifest import (JOURNAL_NAME, MANIFEST_NAME, NEW_MANIFEST, apply_journal, dumps,
                                                 figure_files, file_entry, locked, read_manifest, recover)

__all__ = ["STAGING_PREFIX", "new_staging", "stage_entry", "staged_entries", "commit", "discard"]

#: Prefix of staging folders (hidden, inside the target folder).
STAGING_PREFIX = ".staging-"


def new_staging(target: str | Path, label: str = "figures") -> Path:
    """A new empty staging folder inside ``target`` (created if missing), e.g. ``figures/.staging-03_throughput-k2x9/``."""
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{label}-", dir=target))


def staged_entries(staging: str | Path) -> list[dict]:
    """The manifest entries recorded in ``staging`` so far (:func:`stage_entry`), in order."""
    try:
        return json.loads((Path(staging) / MANIFEST_NAME).read_text(encoding="utf-8"))["figures"]
    except (OSError, ValueError, KeyError):
        return []


def stage_entry(staging: str | Path, entry: dict) -> None:
    """Record ``entry`` (a manifest entry, ``name`` and ``files`` at least) in ``staging``; an earlier
    entry of the same name is replaced (a notebook that saves a figure twice keeps the last)."""
    entries = [e for e in staged_entries(staging) if e["name"] != entry["name"]] + [entry]
    write_text(Path(staging) / MANIFEST_NAME, dumps({"figures": entries}))


def discard(staging: str | Path | None) -> None:
    """Remove a staging folder and everything in it; nothing else changes. A staging folder whose
    commit had begun (its folder's journal names it) is not removed but committed
    (:func:`~paged.experiments.notebook.manifest.recover`)."""
    if staging is None:
        return
    staging = Path(staging)
    try:
        journal = json.loads((staging.parent / JOURNAL_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        journal = {}
    if journal.get("staging") == staging.name:
        recover(staging.parent)
    else:
        shutil.rmtree(staging, ignore_errors=True)


def _merge(manifest: dict, entries: list[dict], *, notebook: str | None, record: dict | None,
           environments: dict) -> dict:
    """``manifest`` with ``entries`` in place of the figures of the same names; with ``record`` (a
    runner's run of ``notebook``), that notebook's record replaced and its figures that the run did
    not make dropped (their files become unlisted). Environments no entry names are dropped."""
    figures = {f["name"]: f for f in manifest["figures"]}
    notebooks = dict(manifest.get("notebooks", {}))
    if record is not None and notebook is not None:
        made = {e["name"] for e in entries}
        for name in notebooks.get(notebook, {}).get("figures", []):
            if name not in made and figures.get(name, {}).get("notebook") == notebook:
                figures.pop(name, None)
        notebooks[notebook] = {**record, "figures": sorted(made)}
    for entry in entries:
        figures[entry["name"]] = entry
    envs = {**manifest.get("environments", {}), **environments}
    used = {f.get("environment") for f in figures.values()} | {r.get("environment") for r in notebooks.values()}
    return {"environments": {k: v for k, v in envs.items() if k in used},
            "figures": [figures[name] for name in sorted(figures)], "notebooks": notebooks, "unlisted": []}


def commit(staging: str | Path, target: str | Path, *, provenance: dict | None = None, notebook: str | None = None,
           record: dict | None = None, environments: dict | None = None) -> list[str]:
    """Move the figure set staged in ``staging`` into ``target`` with its manifest entries, as one step.

    Args:
        staging: a folder from :func:`new_staging` of ``target``, holding figure files and their
            entries (:func:`stage_entry`).
        target: the figure folder (its ``MANIFEST.json`` is created if missing).
        provenance: fields set on every staged entry (``run``, ``fingerprint``, ``notebook``, ...).
        notebook: the stem of the notebook that made the set (each entry's ``notebook``), for ``record``.
        record: the notebook's record in the manifest's ``notebooks`` (a runner's run): figures of
            that notebook which this run did not make lose their entries.
        environments: environment key -> description, for the entries' ``environment`` keys.

    Returns:
        The names of the figures committed.

    Raises:
        OSError: a rename failed (the journal stays; :func:`~paged.experiments.notebook.manifest.recover`
            finishes the commit).
    """
    staging, target = Path(staging), Path(target)
    entries = staged_entries(staging)
    with locked(target):
        manifest = read_manifest(target)  # finishes an interrupted commit first
        for entry in entries:
            entry.update(provenance or {})
            if notebook is not None:
                entry["notebook"] = notebook
            entry["files"] = {ext: {**file_entry(staging / info["path"]), "path": info["path"]}
                              for ext, info in sorted(entry["files"].items())}
        files = sorted(info["path"] for entry in entries for info in entry["files"].values()
                       if (staging / info["path"]).is_file())
        merged = _merge(manifest, entries, notebook=notebook, record=record, environments=environments or {})
        listed = {info["path"] for f in merged["figures"] for info in f["files"].values()}
        merged["unlisted"] = sorted((set(figure_files(target)) | set(files)) - listed)
        write_text(staging / NEW_MANIFEST, dumps(merged))
        journal = {"staging": staging.name, "files": files}
        with sigint_held():
            write_text(target / JOURNAL_NAME, json.dumps(journal))
            apply_journal(target, journal)
    return [e["name"] for e in entries]

