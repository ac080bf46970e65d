"""Papermill helpers: refuse unknown or mistyped parameters instead of running with them.

Papermill injects ``-p name value`` parameters as a cell after the one tagged ``parameters``,
and only warns about names the notebook does not declare. A typo (``-p num_request 10``) would
then run the defaults without anyone noticing, and a mistyped value (``-p block_size 16.5``)
would fail deep in the library with a message that does not name the parameter. The parameters
cell ends with ``record_parameters(namespace=globals())``; the next cell calls
``check_parameters(globals())``, which raises if the injected cell introduced a name the
parameters cell did not declare, or gave a declared parameter a value of another type than its
default.

Type rule (from the default's type): an int parameter takes an int; a float parameter an int or
a float; a str a str; a bool a bool; a list a list (or tuple) whose items have the type of the
default's items (ints allowed where the items are floats); a parameter whose default is None, or
one named in ``optional``, also takes None; a None default takes anything.
"""

from __future__ import annotations

import types

__all__ = ["record_parameters", "check_parameters", "UnknownParameterError", "ParameterTypeError"]

_KEY = "__paged_declared_parameters__"


class UnknownParameterError(ValueError):
    """A papermill parameter that the notebook does not declare."""


class ParameterTypeError(TypeError):
    """A papermill parameter whose value has another type than the notebook's default."""


def _public(namespace: dict) -> set[str]:
    return {k for k in namespace if not k.startswith("_") and k not in {"In", "Out", "get_ipython", "exit", "quit", "open"}}


def _is_parameter(value) -> bool:
    return not callable(value) and not isinstance(value, types.ModuleType)


def record_parameters(namespace: dict, optional: tuple[str, ...] | set[str] = ()) -> None:
    """Remember the parameters defined so far and their defaults; call last in the parameters cell.

    Args:
        namespace: the notebook's ``globals()``.
        optional: parameters that also accept None although their default is not None.
    """
    namespace[_KEY] = ({name: namespace[name] for name in _public(namespace)}, frozenset(optional))


def _matches(value, default) -> bool:
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, (list, tuple)):
        if not isinstance(value, (list, tuple)):
            return False
        kinds = {type(item) for item in default}
        return len(kinds) != 1 or all(_matches(item, default[0]) for item in value)
    if isinstance(default, (str, dict)):
        return isinstance(value, type(default))
    return True


def check_parameters(namespace: dict) -> None:
    """Raise if a parameter is unknown (added after :func:`record_parameters`) or of the wrong type.

    Raises:
        UnknownParameterError: naming the unknown parameters and listing the accepted ones.
        ParameterTypeError: naming the parameter, the type its default has, and the value given.
        RuntimeError: if :func:`record_parameters` was not called first.
    """
    recorded = namespace.get(_KEY)
    if recorded is None:
        raise RuntimeError("record_parameters(namespace=globals()) must end the parameters cell")
    defaults, optional = recorded
    unknown = sorted(_public(namespace) - set(defaults))
    if unknown:
        accepted = sorted(n for n, v in defaults.items() if _is_parameter(v))
        raise UnknownParameterError(
            f"unknown papermill parameter(s): {', '.join(unknown)}; this notebook accepts: {', '.join(accepted)}"
        )
    for name, default in sorted(defaults.items()):
        value = namespace.get(name)
        if default is None or not _is_parameter(default) or (value is None and name in optional):
            continue
        if not _matches(value, default):
            shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
            kind = f"a list like {default!r}" if isinstance(default, (list, tuple)) else f"a {type(default).__name__}"
            raise ParameterTypeError(
                f"papermill parameter {name!r} must be {kind} (its default is {default!r}), got {shown}"
            )
