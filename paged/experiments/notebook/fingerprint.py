"""The package's code and data as one short hash, for results kept between calls in one process.

:func:`~paged.experiments.notebook.jobs.run_jobs` keys the results it keeps for a rerun of a failed
sweep on it (a notebook's runs use :mod:`paged.experiments.notebook.provenance`, which follows the
modules a notebook reaches). The hash covers every file of the installed
``paged`` package and of its data (``paged.data``: traces, model configs, the shipped model),
``__pycache__`` and compiled objects aside, so a worker with another version of the package gets
another hash. Reading them costs about 0.1 s once per process (about 20 MB, mostly the model).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

__all__ = ["code_fingerprint"]

_SKIP_SUFFIXES = {".pyc", ".pyo", ".so", ".dll", ".dylib"}


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """16 hex digits of a BLAKE2b hash over the relative paths and bytes of the package's files."""
    from importlib import resources

    package = Path(__file__).resolve().parents[2]  # paged/experiments/notebook/ -> paged/
    digest = hashlib.blake2b(digest_size=8)
    for root in (package, Path(str(resources.files("paged.data")))):
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            rel = path.relative_to(root)
            if "__pycache__" in rel.parts or path.suffix in _SKIP_SUFFIXES or any(s.startswith(".") for s in rel.parts):
                continue
            digest.update(f"{root.name}/{rel.as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()
