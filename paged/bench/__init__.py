"""Benchmarks: ``python -m paged.bench.<name>`` prints its figures.

Each benchmark's ``main`` builds its parser with :func:`bench_parser` and runs through
:func:`paged.cli.run_command`, so bad arguments end in one ``error:`` line with exit status 2.
"""

from __future__ import annotations

from paged.cli import ArgumentParser

__all__ = ["bench_parser"]


def bench_parser(module: str, doc: str) -> ArgumentParser:
    """A parser whose usage line reads ``python -m <module>``, described by ``doc``'s first line; its
    argument errors are one line (:class:`paged.cli.ArgumentParser`)."""
    return ArgumentParser(prog=f"python -m {module}", description=doc.splitlines()[0])
