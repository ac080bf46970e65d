"""Files that are never half-written: write to a temporary file beside the target, then rename.

A reader (a person opening a figure, a notebook reading a CSV, ``git status``) sees the old complete
file or the new complete one, never a part, whatever interrupts the writer (``KeyboardInterrupt``, an
exception, a killed process): ``os.replace`` is atomic on POSIX and Windows when both names are in
one folder, and the temporary file is removed when the write fails. SQLite's rollback journal and
every careful storage engine do the same.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_path", "write_text", "write_bytes"]


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path in ``path``'s folder (``.NAME.XXXX.tmp.SUFFIX``: it ends in ``path``'s
    suffix, so tools that read the format from the name, papermill among them, still work); when the block ends normally it replaces ``path``; on any exception it is
    removed and ``path`` is left as it was. The folder must exist. O(1) beyond the write itself.

    Raises:
        whatever the block raises (after the clean-up); OSError if the rename fails.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (:func:`atomic_path`); returns ``path``."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (:func:`atomic_path`); returns ``path``."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding=encoding)
    return Path(path)
