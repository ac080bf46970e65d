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

Value rules, given to :func:`check_parameters` so that a bad value fails in the first cells,
before any heavy work: ``positive`` names must be > 0 and ``nonnegative`` names ≥ 0 (for a list,
every item, and the list must not be empty; for a dict, every value); ``choices`` maps a name to
its allowed values (for a list, every item; for a dict, every key).
"""

from __future__ import annotations

import types

__all__ = ["record_parameters", "check_parameters", "UnknownParameterError", "ParameterTypeError",
           "ParameterValueError"]

_KEY = "__paged_declared_parameters__"


class UnknownParameterError(ValueError):
    """A papermill parameter that the notebook does not declare."""


class ParameterTypeError(TypeError):
    """A papermill parameter whose value has another type than the notebook's default."""


class ParameterValueError(ValueError):
    """A papermill parameter whose value breaks the notebook's rule for it (e.g. a block size of 0)."""


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


def check_parameters(namespace: dict, *, positive=(), nonnegative=(), choices=None) -> None:
    """Raise if a parameter is unknown (added after :func:`record_parameters`), of the wrong type,
    or breaks a value rule (module docstring).

    Args:
        namespace: the notebook's ``globals()``.
        positive, nonnegative: parameter names whose numbers must be > 0 / ≥ 0.
        choices: ``{name: allowed values}``.

    Raises:
        UnknownParameterError: naming the unknown parameters and listing the accepted ones.
        ParameterTypeError: naming the parameter, the type its default has, and the value given.
        ParameterValueError: naming the parameter, the rule, and the value given.
        RuntimeError: if :func:`record_parameters` was not called first.
    """
    recorded = namespace.get(_KEY)
    if recorded is None:
        raise RuntimeError("record_parameters(namespace=globals()) must end the parameters cell")
    defaults, optional = recorded
    # Names bound to modules, functions or classes since (imports) cannot be papermill parameters.
    unknown = sorted(n for n in _public(namespace) - set(defaults) if _is_parameter(namespace[n]))
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
    for names, low, rule in ((positive, 0, "> 0"), (nonnegative, None, "≥ 0")):
        for name in names:
            _check_numbers(name, namespace.get(name), low, rule)
    for name, allowed in (choices or {}).items():
        value = namespace.get(name)
        items = list(value) if isinstance(value, (list, tuple, dict)) else [value]
        bad = [item for item in items if item not in allowed]
        if bad:
            raise ParameterValueError(f"papermill parameter {name!r}: {bad[0]!r} is not one of {list(allowed)}")


def _check_numbers(name: str, value, low, rule: str) -> None:
    """Every number of ``value`` (a number, list or dict) must be > ``low`` (or ≥ 0 when None)."""
    if value is None:
        return
    if isinstance(value, (list, tuple)) and not value:
        raise ParameterValueError(f"papermill parameter {name!r} must not be empty")
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
    for item in items:
        if not (item > low if low is not None else item >= 0) or item != item:
            shown = f"{item!r} in {value!r}" if item is not value else repr(item)
            raise ParameterValueError(f"papermill parameter {name!r} must be {rule}, got {shown}")
