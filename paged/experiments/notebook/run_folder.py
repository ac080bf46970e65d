"""A notebook sweep on disk: run folders named by their parameters, each run's record, the sweep's lock.

::

    OUT/
      sweep.json            the sweep: notebook, code, the grid, every run folder and its parameters
      summary.csv           one row per run (summary.png: a headline number against the swept parameter)
      .lock                 held by the sweep writing here (host, pid)
      block_size=8/         one finished or failed run, never part of one
        run.json            parameters, status, seconds, the error's last line, code and notebook hashes
        03_throughput.ipynb the executed notebook (a failed one shows its error)
        run.log             what its cells printed, as they ran
        figures/            its figures (the notebook's output_dir)
      block_size=16.partial-1a2b3c/   a run under way or interrupted (run.json says which)

A run executes in its own ``NAME.partial-ATTEMPT`` folder and is renamed to ``NAME`` when it
ends, so a reader (or a sweep resumed while a cluster worker still finishes an interrupted run)
never finds half a run under a run's name.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import time
from pathlib import Path

from paged.atomic import write_text

__all__ = ["run_name", "RunRecord", "read_record", "write_record", "SweepLock", "SweepLocked",
           "STATUSES", "PARTIAL", "sweep_identity"]

#: A run's status in its record: finished, failed (its notebook raised), interrupted (Ctrl-C or a
#: stopped sweep), running; ``pending`` in a summary: not started.
STATUSES = ("finished", "failed", "interrupted", "running", "pending")
#: Infix of the folder a run executes in: ``NAME.partial-ATTEMPT``.
PARTIAL = ".partial-"
_SAFE = re.compile(r"[^A-Za-z0-9._+=,-]+")
_MAX_NAME = 120  # characters of the readable part; file systems allow 255 bytes


def _text(value) -> str:
    """A parameter value as it reads in a folder name: numbers and strings as written, lists joined by ``+``."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, (list, tuple)):
        return "+".join(_text(v) for v in value)
    if isinstance(value, dict):
        return "+".join(f"{k}-{_text(v)}" for k, v in value.items())
    return str(value)


def _canonical(params: dict) -> str:
    return json.dumps(params, sort_keys=True, default=str, allow_nan=True)


def run_name(params: dict) -> str:
    """The folder name of the run with ``params``: ``name=value`` pairs in name order, joined by ``,``
    (``block_size=8,num_requests=200``), the same for the same parameters whatever the grid holds.

    Characters other than letters, digits and ``._+=,-`` become ``-``; where that loses anything
    (a path, a string that reads as a number, a list of strings) or the name would pass
    :data:`_MAX_NAME` characters, ``~`` and 8 hex digits of a hash of the exact parameters follow,
    so two parameter sets never share a folder. ``{}`` is ``defaults``.
    """
    if not params:
        return "defaults"
    parts = [f"{k}={_text(v)}" for k, v in sorted(params.items())]
    raw = ",".join(parts)
    safe = _SAFE.sub("-", raw)
    ambiguous = any(isinstance(v, str) and _looks_typed(v) for v in params.values()) or any(
        isinstance(v, (list, tuple, dict)) and any(isinstance(x, str) for x in (v.values() if isinstance(v, dict) else v))
        for v in params.values())
    if safe == raw and not ambiguous and len(safe) <= _MAX_NAME:
        return safe
    import hashlib

    digest = hashlib.blake2b(_canonical(params).encode(), digest_size=4).hexdigest()
    return f"{safe[:_MAX_NAME].rstrip('-')}~{digest}"


def _looks_typed(text: str) -> bool:
    """True for a string that would read back as another type (``"8"``, ``"true"``, ``"inf"``)."""
    try:
        float(text)
        return True
    except ValueError:
        return text.lower() in {"true", "false", "null", "none"}


RunRecord = dict  # the JSON of run.json: see :func:`write_record`


def write_record(folder: Path, **fields) -> dict:
    """Write (atomically) and return ``folder/run.json``: the fields given over the ones already there.

    Fields: ``parameters``, ``status`` (:data:`STATUSES`), ``seconds``, ``error`` (the error's last
    line or None), ``started`` / ``ended`` (ISO times), ``host``, ``pid``, ``code`` and
    ``notebook_hash`` (:mod:`paged.experiments.notebook.fingerprint`), ``attempt``.
    """
    record = {**read_record(folder), **fields}
    write_text(folder / "run.json", json.dumps(record, indent=1, default=str, allow_nan=True) + "\n")
    return record


def read_record(folder: Path) -> dict:
    """``folder/run.json`` as a dict; {} when it is missing or unreadable (a run that never started)."""
    try:
        return json.loads((folder / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def now() -> str:
    """The local time, ISO 8601 to the second, with its offset."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class SweepLocked(ValueError):
    """Another sweep is writing to the folder."""


class SweepLock:
    """``OUT/.lock``, held while a sweep writes to ``OUT``: created exclusively (``O_EXCL``), holding
    the host, pid and start time. A lock left by a process of this host that no longer runs is
    taken over; one of another host is refused (this host cannot tell whether it still runs).

    Raises (on ``with``):
        SweepLocked: naming the holder and the file to delete if that sweep is gone.
    """

    def __init__(self, folder: Path):
        self.path = Path(folder) / ".lock"
        self.held = False

    def __enter__(self):
        me = {"host": socket.gethostname(), "pid": os.getpid(), "since": now()}
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder()
                if holder.get("host") == me["host"] and not _alive(holder.get("pid")):
                    self.path.unlink(missing_ok=True)  # its sweep is gone: take the lock over
                    continue
                raise SweepLocked(f"{self.path.parent} is in use by another sweep (pid {holder.get('pid', '?')} on "
                                  f"{holder.get('host', '?')} since {holder.get('since', '?')}); wait for it, or delete "
                                  f"{self.path} if that sweep is gone") from None
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            self.held = True
            return self
        raise SweepLocked(f"could not take {self.path}")

    def _holder(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def __exit__(self, *exc):
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False


def _alive(pid) -> bool:
    """True if a process ``pid`` runs on this host (or may: it belongs to another user)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_identity(notebook: str | Path) -> tuple[str, str]:
    """``(code, notebook)``: hashes of what a sweep's runs depend on besides their parameters (the
    package modules the notebook reaches, the package data, the environment; the notebook's cells:
    :mod:`paged.experiments.notebook.provenance`). A run is reused only when both match."""
    from paged.experiments.notebook.provenance import (code_dependencies, data_digest, digest, environment_digest,
                                                       notebook_digest)

    code = digest({"code": code_dependencies(notebook), "data": data_digest(), "environment": environment_digest()})
    return code[:16], notebook_digest(notebook)[:16]
