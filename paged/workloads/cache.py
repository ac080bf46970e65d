"""The trace cache: a dataset file loaded and tokenized once, then read back in milliseconds.

A sweep that loads a user's ShareGPT JSON at every point would otherwise pay ~10 s of parsing and
tokenizing each time. Each entry is one JSON file ``<cache>/traces/<fingerprint>.json`` holding the
trace's lengths, its provenance and its load report. The fingerprint (:func:`cache_fingerprint`)
is a sha256 over everything that decides the trace:

* the file's content (sha256 of its bytes; its path and modification time do not matter);
* what is read from it (dataset, prompt format, pair mode) and the length filters;
* the tokenizer (:func:`paged.workloads.tokenizers.tokenizer_identity`: name, library versions,
  vocabulary files);
* the ``paged`` package version and a sha256 of the source of the modules that compute the
  trace (``datasets`` cannot see code changes; this does).

So a stale entry is never read: any change gives a new fingerprint, and an entry is only used
when its stored fingerprint equals the one asked for. Entries are written to a temporary file
and renamed (atomic), so a crash leaves no half entry; a corrupt one is ignored and rebuilt.

Where: ``$PAGED_CACHE_DIR`` if set, else ``.cache/paged/`` in the project checkout (git-ignored),
else ``~/.cache/paged/`` for an installed package.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from paged.workloads.tokenizers import tokenizer_identity

__all__ = ["CACHE_FORMAT", "cache_dir", "cache_fingerprint", "file_sha256", "read_entry", "write_entry"]

#: Bumped when the entry layout changes.
CACHE_FORMAT = 1
#: Modules whose source decides a cached trace (hashed into every fingerprint).
_SOURCES = ("alpaca.py", "cache.py", "conversation_parts.py", "filters.py", "json_records.py", "loader.py",
            "sharegpt.py", "tokenizers.py", "trace.py")


def cache_dir() -> Path:
    """The cache folder (not created): ``$PAGED_CACHE_DIR``, else ``<checkout>/.cache/paged``
    when the package runs from a source checkout, else ``~/.cache/paged``."""
    if os.environ.get("PAGED_CACHE_DIR"):
        return Path(os.environ["PAGED_CACHE_DIR"])
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "paged").is_dir():
        return checkout / ".cache" / "paged"
    return Path.home() / ".cache" / "paged"


@lru_cache(maxsize=32)
def _sha256_of(path: str, size: int, mtime_ns: int) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes, remembered per (path, size, modification time) within a process.

    Cost: ~0.1–0.25 s for the 125 MB ShareGPT file on the first call, then O(1).

    Raises:
        FileNotFoundError: no such file.
    """
    st = os.stat(path)
    return _sha256_of(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=1)
def _source_sha256() -> str:
    here = Path(__file__).parent
    h = hashlib.sha256()
    for name in _SOURCES:
        h.update(name.encode() + b"\0" + (here / name).read_bytes())
    return h.hexdigest()


def _paged_version() -> str:
    try:
        return metadata.version("paged")
    except metadata.PackageNotFoundError:
        return "not installed"


def cache_fingerprint(path: str | Path, what: dict[str, Any], tokenizer: str | os.PathLike) -> tuple[str, dict]:
    """The fingerprint of the trace built from ``path`` as ``what`` says, counted with ``tokenizer``.

    Args:
        path: the dataset file.
        what: JSON-serialisable description of what is read and how it is filtered (dataset,
            prompt format, mode, filter limits).
        tokenizer: as :func:`paged.workloads.tokenizers.count_tokens` takes it.

    Returns:
        ``(fingerprint, inputs)``: 40 hex digits, and the inputs it hashes (stored in the entry).

    Raises:
        FileNotFoundError: no such file; ValueError: an unknown tokenizer.
    """
    inputs = {"format": CACHE_FORMAT, "paged": _paged_version(), "source_sha256": _source_sha256(),
              "file_sha256": file_sha256(path), "what": what, "tokenizer": tokenizer_identity(tokenizer)}
    blob = json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:40], inputs


def _entry_path(fingerprint: str, root: Path | None) -> Path:
    return (cache_dir() if root is None else Path(root)) / "traces" / f"{fingerprint}.json"


def read_entry(fingerprint: str, root: Path | None = None) -> dict | None:
    """The stored entry of ``fingerprint``, or None when there is none, it is unreadable, or its
    stored fingerprint differs (then it is never used). Cost: one JSON read (~10 ms for 33k requests)."""
    path = _entry_path(fingerprint, root)
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("fingerprint") != fingerprint:
        return None
    return entry


def write_entry(fingerprint: str, entry: dict, root: Path | None = None) -> Path | None:
    """Store ``entry`` (JSON-serialisable) under ``fingerprint``, atomically (temporary file +
    rename). Returns its path, or None when the cache folder cannot be written (nothing is lost:
    the caller still has its trace)."""
    path = _entry_path(fingerprint, root)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({**entry, "fingerprint": fingerprint}, f, separators=(",", ":"))
        os.replace(tmp, path)
    except OSError:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        return None
    return path
