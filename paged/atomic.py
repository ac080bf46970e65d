"""Files that are never half-written: write to a temporary file beside the target, then rename.

A reader (a person opening a figure, a notebook reading a CSV, ``git status``) sees the old complete
file or the new complete one, never a part, whatever interrupts the writer (``KeyboardInterrupt``, an
exception, a killed process): ``os.replace`` is atomic on POSIX and Windows when both names are in
one folder, and the temporary file is removed when the write fails. SQLite's rollback journal and
every careful storage engine do the same.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_path", "write_text", "write_bytes", "mode_for", "sigint_held"]


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path in ``path``'s folder (``.NAME.XXXX.tmp.SUFFIX``: it ends in ``path``'s
    suffix, so tools that read the format from the name, papermill among them, still work); when the
    block ends normally it replaces ``path`` with the permission bits of the file it replaces (or, for a
    new file, those the umask gives); on any exception it is removed and ``path`` is left as it was. The folder must exist. O(1) beyond the write itself.

    Raises:
        whatever the block raises (after the clean-up); OSError if the rename fails.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, mode_for(path))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def mode_for(path: str | Path) -> int:
    """The permission bits ``path`` gets: those of the file it replaces, else what ``open`` would give a
    new file under the process's umask (``mkstemp``'s own 0600 would make every figure private)."""
    try:
        return Path(path).stat().st_mode & 0o7777
    except FileNotFoundError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """The process's umask: read from /proc on Linux (setting it to read it back is not thread-safe),
    else set and restored at once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


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


@contextmanager
def sigint_held() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) back for the block and deliver it at its end, to the handler that was in
    place: a few renames that belong together (a figure set and its manifest) all happen or none.
    Main thread only (Python runs signal handlers there; elsewhere the block runs as it is). Nests.

    Raises:
        KeyboardInterrupt (or what the previous handler raises) at the end of the block, if Ctrl-C came.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            if callable(previous):
                previous(signal.SIGINT, None)
            else:
                raise KeyboardInterrupt
