"""Papermill helpers: refuse unknown parameters instead of silently ignoring them.

Papermill injects ``-p name value`` parameters as a cell after the one tagged ``parameters``,
and only warns about names the notebook does not declare. A typo (``-p num_request 10``) would
then run the defaults without anyone noticing. The parameters cell ends with
``record_parameters(globals())``; the next cell calls ``check_parameters(globals())``, which raises
if the injected cell introduced a name the parameters cell did not declare.
"""

from __future__ import annotations

import types

__all__ = ["record_parameters", "check_parameters", "UnknownParameterError"]

_KEY = "__paged_declared_parameters__"


class UnknownParameterError(ValueError):
    """A papermill parameter that the notebook does not declare."""


def _public(namespace: dict) -> set[str]:
    return {k for k in namespace if not k.startswith("_") and k not in {"In", "Out", "get_ipython", "exit", "quit", "open"}}


def record_parameters(namespace: dict) -> None:
    """Remember the names defined so far (the declared parameters); call last in that cell."""
    namespace[_KEY] = frozenset(_public(namespace))


def check_parameters(namespace: dict) -> None:
    """Raise if any name was added after :func:`record_parameters` ran (an unknown parameter).

    Raises:
        UnknownParameterError: naming the unknown parameters and listing the accepted ones.
        RuntimeError: if :func:`record_parameters` was not called first.
    """
    declared = namespace.get(_KEY)
    if declared is None:
        raise RuntimeError("record_parameters(globals()) must end the parameters cell")
    unknown = sorted(_public(namespace) - declared)
    if unknown:
        accepted = sorted(
            n for n in declared
            if not callable(namespace.get(n)) and not isinstance(namespace.get(n), types.ModuleType)
        )
        raise UnknownParameterError(
            f"unknown papermill parameter(s): {', '.join(unknown)}; this notebook accepts: {', '.join(accepted)}"
        )
