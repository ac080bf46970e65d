"""Papermill helpers: refuse unknown or mistyped parameters instead of running with them.

Papermill injects ``-p name value`` parameters as a cell after the one tagged ``parameters``,
and only warns about names the notebook does not declare. A typo (``-p num_request 10``) would
then run the defaults without anyone noticing, and a mistyped value (``-p block_size 16.5``)
would fail deep in the library with a message that does not name the parameter. The parameters
cell declares each parameter on one line, ``name: type = default  # help`` (the form papermill's
``--help-notebook`` reads: it shows the type and the help), and ends with
``record_parameters(namespace=globals())`` (one ``=`` on the line, so papermill neither warns
about it nor reads it as a parameter). The next cell calls ``check_parameters(globals(), ...)``,
which raises if the injected cell introduced a name the parameters cell did not declare, or gave
a declared parameter a value of another type.

Types: the annotation when there is one, else the default's type. Understood annotations:
``int``, ``float`` (an int is accepted), ``str``, ``bool``, ``list[T]``, ``tuple[T, ...]``,
``dict[K, V]``, ``Optional[T]`` (write it quoted, ``"Optional[T]"``, so the cell runs without
importing typing) and ``Any``. Values inside lists and dicts are checked too, and an error names
the item: ``block_size_rates['sharegpt']``. From a default without annotation: a list's type is
that of its items when they all have one type, a dict's that of its values likewise. A parameter
whose default is None, or one named in ``optional``, also takes None; a None default without an
annotation takes anything.

Value rules (``positive``, ``nonnegative``, ``choices``, ``required_keys``, ``distinct``: see
:func:`check_parameters`) make a bad value fail in the first cells, before any heavy work.

The figure folder: a notebook left at its default ``output_dir = "../figures"`` writes to the
checkout's ``figures/`` when its kernel works in ``notebooks/``, and to ``./figures`` from any other
folder (:func:`default_figures_dir`); an ``output_dir`` the user gives is used as given (relative
paths from the kernel's working folder: where papermill runs, unless ``--cwd``).
"""

from __future__ import annotations

import math
import types
import typing
from pathlib import Path

__all__ = ["record_parameters", "check_parameters", "checked_parameters", "check_notebook_parameters", "trace_choices",
           "default_figures_dir", "NOTEBOOK_FIGURES",
           "UnknownParameterError", "ParameterTypeError", "ParameterValueError"]

_KEY = "__paged_declared_parameters__"
#: The parameters of the last successful :func:`check_parameters` (JSON-safe), for figure provenance.
_CHECKED: dict = {}


class UnknownParameterError(ValueError):
    """A papermill parameter that the notebook does not declare."""


class ParameterTypeError(TypeError):
    """A papermill parameter whose value has another type than the notebook declares."""


class ParameterValueError(ValueError):
    """A papermill parameter whose value breaks the notebook's rule for it (e.g. a block size of 0)."""


def _public(namespace: dict) -> set[str]:
    return {k for k in namespace if not k.startswith("_") and k not in {"In", "Out", "get_ipython", "exit", "quit", "open"}}


def _is_parameter(value) -> bool:
    return not callable(value) and not isinstance(value, types.ModuleType)


# -- types ------------------------------------------------------------------------------------
_NAMES = {"int": int, "float": float, "str": str, "bool": bool, "list": list, "dict": dict, "tuple": tuple,
          "None": type(None), "Optional": typing.Optional, "Union": typing.Union, "Any": typing.Any,
          "List": typing.List, "Dict": typing.Dict, "Tuple": typing.Tuple}  # noqa: UP006


def _resolve(annotation, name: str):
    """The type object of an annotation (a string annotation is evaluated over :data:`_NAMES`).

    Raises:
        TypeError: for an annotation outside the understood forms (module docstring).
    """
    if isinstance(annotation, str):
        try:
            annotation = eval(annotation, {"__builtins__": {}}, dict(_NAMES))  # noqa: S307 - the notebook's own text
        except Exception as err:  # noqa: BLE001 - any failure means the same thing here
            raise TypeError(f"parameter {name!r}: cannot read the annotation {annotation!r} ({err})") from None
    if annotation is None:
        return type(None)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation in (int, float, str, bool, type(None), typing.Any, list, dict, tuple):
        return annotation
    if origin in (list, tuple, dict, typing.Union, types.UnionType):
        for arg in args:
            if arg is not Ellipsis:
                _resolve(arg, name)
        return annotation
    raise TypeError(f"parameter {name!r}: the annotation {annotation!r} is not one of int, float, str, bool, "
                    f"list[T], tuple[T, ...], dict[K, V], Optional[T], Any")


def _from_default(default):
    """The type a default implies when the parameter has no annotation (module docstring)."""
    if default is None:
        return typing.Any
    if isinstance(default, (list, tuple)):
        kinds = {_from_default(item) for item in default}
        return list[kinds.pop()] if len(kinds) == 1 else list
    if isinstance(default, dict):
        kinds = {_from_default(value) for value in default.values()}
        return dict[str, kinds.pop()] if len(kinds) == 1 else dict
    return type(default)


def _noun(tp) -> str:
    """A short name of a type for a list's items or a dict's values: ``int``, ``list of floats``..."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is typing.Any:
        return "value"
    if tp is type(None):
        return "None"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_noun(arg) for arg in args)
    if tp in (list, tuple) or origin in (list, tuple):
        return f"list of {_noun(args[0]) if args else 'value'}s"
    if tp is dict or origin is dict:
        return f"dict of {_noun(args[1]) if len(args) == 2 else 'value'}s"
    return tp.__name__


def _describe(tp) -> str:
    """``an int``, ``a float``, ``a list of ints``, ``a dict of floats``, ``an int or None``, ``anything``."""
    if tp is typing.Any:
        return "anything"
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in typing.get_args(tp))
    noun = _noun(tp)
    return noun if noun == "None" else f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _where(path: tuple) -> str:
    """``'name'`` for a parameter, ``name['key'][0]`` for an item inside it."""
    return repr(path[0]) if len(path) == 1 else path[0] + "".join(f"[{key!r}]" for key in path[1:])


def _check_type(value, tp, path: tuple, declared: str) -> None:
    """Raise ParameterTypeError naming ``path`` (parameter name, then keys or indices) unless ``value`` is a ``tp``."""
    def fail():
        raise ParameterTypeError(f"papermill parameter {_where(path)} must be {_describe(tp)} ({declared}), "
                                 f"got {_shown(value)}")

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is typing.Any:
        return
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            try:
                _check_type(value, arg, path, declared)
                return
            except ParameterTypeError:
                pass
        fail()
    if tp is bool or tp is str or tp is type(None):
        if not isinstance(value, tp):
            fail()
    elif tp is int:
        if not isinstance(value, int) or isinstance(value, bool):
            fail()
    elif tp is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            fail()
    elif tp in (list, tuple) or origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            fail()
        item = args[0] if args else typing.Any
        for i, element in enumerate(value):
            _check_type(element, item, (*path, i), declared)
    elif tp is dict or origin is dict:
        if not isinstance(value, dict):
            fail()
        key_type, value_type = args if len(args) == 2 else (typing.Any, typing.Any)
        for key, element in value.items():
            if key_type is not typing.Any and not isinstance(key, key_type):
                raise ParameterTypeError(f"papermill parameter {_where(path)} has the key {key!r}, which is not "
                                         f"{_describe(key_type)} ({declared})")
            _check_type(element, value_type, (*path, key), declared)


# -- the two calls of a notebook ---------------------------------------------------------------
def record_parameters(namespace: dict, optional: tuple[str, ...] | set[str] = (), *,
                      annotations: dict | None = None) -> None:
    """Remember the parameters defined so far, their defaults and types; call last in the parameters cell.

    Args:
        namespace: the notebook's ``globals()``.
        optional: parameters that also accept None although their default is not None (or
            annotate them ``"Optional[T]"``, which needs no second ``=`` on this line).
        annotations: the parameters' annotations; default: ``namespace["__annotations__"]``
            (where Python puts the annotations of a notebook's cells).

    Raises:
        TypeError: if an annotation is not understood, or a default does not have its annotated type
            (the notebook's own mistake, reported before papermill's values are looked at).
    """
    annotations = namespace.get("__annotations__", {}) if annotations is None else annotations
    defaults = {name: namespace[name] for name in _public(namespace)}
    declared = {}
    for name, default in defaults.items():
        if not _is_parameter(default):
            continue
        if name in annotations:
            tp = _resolve(annotations[name], name)
            try:
                _check_type(default, tp, (name,), "its annotation")
            except ParameterTypeError as err:
                raise TypeError(f"parameters cell: the default of {name!r} does not match its annotation: {err}") from None
            declared[name] = (tp, f"declared {_annotation_text(annotations[name])}")
        else:
            declared[name] = (_from_default(default), f"its default is {_shown(default)}")
    namespace[_KEY] = (defaults, frozenset(optional), declared)


def _annotation_text(annotation) -> str:
    if isinstance(annotation, str) or typing.get_args(annotation) or not isinstance(annotation, type):
        return str(annotation)
    return annotation.__name__


def trace_choices(values) -> list[str]:
    """The trace names a parameter may hold (``choices`` of :func:`check_parameters`): every named trace
    of :func:`paged.workloads.get_trace` and those of ``values`` that are paths of existing files (a
    length CSV, a ShareGPT or Alpaca JSON). A value that is neither is then refused by name."""
    import os

    from paged.workloads import NAMED_TRACES

    given = values if isinstance(values, (list, tuple)) else []
    return [*NAMED_TRACES, *[v for v in given if isinstance(v, str) and os.path.isfile(v)]]


def check_parameters(namespace: dict, *, positive=(), nonnegative=(), choices=None, required_keys=None,
                     distinct=()) -> None:
    """Raise if a parameter is unknown (added after :func:`record_parameters`), of the wrong type,
    or breaks a value rule (module docstring).

    Args:
        namespace: the notebook's ``globals()``.
        positive, nonnegative: parameter names whose numbers must be > 0 / ≥ 0 (for a list, every item,
            and the list must not be empty; for a dict, every value).
        choices: ``{name: allowed values}`` (for a list, every item, and it must not be empty; for a dict,
            every key).
        required_keys: ``{dict parameter: keys it must have}``.
        distinct: list parameters that must not hold a value twice (a sweep's axis).

    Raises:
        UnknownParameterError: naming the unknown parameters and listing the accepted ones.
        ParameterTypeError: naming the parameter (and the list item or dict key), the declared type,
            and the value given.
        ParameterValueError: naming the parameter (and key), the rule, and the value given.
        RuntimeError: if :func:`record_parameters` was not called first.
    """
    recorded = namespace.get(_KEY)
    if recorded is None:
        raise RuntimeError("record_parameters(namespace=globals()) must end the parameters cell")
    defaults, optional, declared = recorded
    # Names bound to modules, functions or classes since (imports) cannot be papermill parameters.
    unknown = sorted(n for n in _public(namespace) - set(defaults) if _is_parameter(namespace[n]))
    if unknown:
        accepted = sorted(n for n, v in defaults.items() if _is_parameter(v))
        raise UnknownParameterError(
            f"unknown papermill parameter(s): {', '.join(unknown)}; this notebook accepts: {', '.join(accepted)}"
        )
    for name, (tp, how) in sorted(declared.items()):
        value = namespace.get(name)
        if value is None and name in optional:
            continue
        _check_type(value, tp, (name,), how)
    for names, low, rule in ((positive, 0, "> 0"), (nonnegative, None, "≥ 0")):
        for name in names:
            _check_numbers(name, namespace.get(name), low, rule)
    for name, allowed in (choices or {}).items():
        value = namespace.get(name)
        if isinstance(value, (list, tuple)) and not value:
            raise ParameterValueError(f"papermill parameter {name!r} must not be empty; choose from {list(allowed)}")
        items = list(value) if isinstance(value, (list, tuple, dict)) else [value]
        bad = [item for item in items if item not in allowed]
        if bad:
            raise ParameterValueError(f"papermill parameter {name!r}: {bad[0]!r} is not one of {list(allowed)}")
    for name, keys in (required_keys or {}).items():
        value = namespace.get(name)
        missing = [key for key in keys if not isinstance(value, dict) or key not in value]
        if missing:
            raise ParameterValueError(f"papermill parameter {name}[{missing[0]!r}] is missing: {name!r} needs a "
                                      f"key for each of {list(keys)}, got {_shown(value)}")
    for name in distinct:
        value = namespace.get(name)
        if isinstance(value, (list, tuple)):
            seen = [v for i, v in enumerate(value) if v in value[:i]]
            if seen:
                raise ParameterValueError(f"papermill parameter {name!r} has a value twice ({seen[0]!r} in {_shown(value)}): "
                                          f"each value is one point of the sweep")
    out = namespace.get("output_dir")
    if "output_dir" in defaults and isinstance(out, str) and Path(out).exists() and not Path(out).is_dir():
        raise ParameterValueError(f"papermill parameter 'output_dir': {out!r} is a file, not a folder for the figures")
    if "output_dir" in defaults and namespace.get("output_dir") == defaults["output_dir"] == NOTEBOOK_FIGURES:
        from paged.experiments.notebook.provenance import run_context

        if not (run_context() or {}).get("target"):  # a runner names its folder itself
            namespace["output_dir"] = default_figures_dir()
    _CHECKED.clear()
    _CHECKED.update({name: _json_safe(namespace.get(name)) for name in sorted(declared)})


#: The notebooks' default ``output_dir``: the checkout's ``figures/``, beside ``notebooks/``.
NOTEBOOK_FIGURES = "../figures"


def default_figures_dir(cwd: str | None = None) -> str:
    """Where a notebook's default ``output_dir`` (:data:`NOTEBOOK_FIGURES`) puts its figures, for a
    kernel working in ``cwd`` (default: the current folder): ``"../figures"`` when that folder is a
    ``notebooks`` folder (JupyterLab, ``make``, ``cd notebooks && papermill ...``: the checkout's
    ``figures/``), else ``"figures"`` in the working folder (``papermill notebooks/01.ipynb out.ipynb``
    from a clone's root writes the clone's ``figures/``, and from any other folder never its parent).
    :func:`check_parameters` applies it when the notebook runs with its default."""
    import os

    return NOTEBOOK_FIGURES if os.path.basename(os.path.abspath(cwd or os.getcwd())) == "notebooks" else "figures"


def _check_numbers(name: str, value, low, rule: str) -> None:
    """Every number of ``value`` (a number, list or dict) must be > ``low`` (or ≥ 0 when None)."""
    if value is None:
        return
    if isinstance(value, (list, tuple)) and not value:
        raise ParameterValueError(f"papermill parameter {name!r} must not be empty")
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)]
    for key, item in items:
        if not (item > low if low is not None else item >= 0) or item != item:
            where = repr(name) if key is None else f"{name}[{key!r}]"
            shown = f"{item!r} in {value!r}" if key is not None else repr(item)
            raise ParameterValueError(f"papermill parameter {where} must be {rule}, got {shown}")


def _json_safe(value):
    """``value`` with non-finite floats as strings ("inf") and tuples as lists, for JSON files."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    return value if value is None or isinstance(value, (bool, int, float, str)) else repr(value)


def checked_parameters() -> dict:
    """The parameter values of the last successful :func:`check_parameters` in this process
    (JSON-safe: ``inf`` as the string ``"inf"``), or ``{}``; :func:`paged.experiments.notebook.plotting.save_figure`
    records them with each figure."""
    return dict(_CHECKED)


def check_notebook_parameters(notebook, values: dict) -> None:
    """Check papermill parameter ``values`` against ``notebook``'s own checks without running it: its
    parameters cell, the values as papermill's injected cell would set them, then the next cell's
    statements up to and including its ``check_parameters(...)`` call, here in this process. A sweep
    (``python -m paged sweep-notebook``) refuses a bad value this way before any run starts; the checks
    the notebook makes later (those that need its data) still run in the notebook.

    Cost: the two cells' imports, once per process; nothing heavy runs.

    Raises:
        ValueError: one line naming the notebook and the problem (the parameter, the rule or type, the
            value): an unknown name, a value of the wrong type or one that breaks the notebook's rule.
    """
    import ast
    import contextlib
    from pathlib import Path

    import nbformat

    path = Path(notebook)
    cells = [c for c in nbformat.read(str(path), as_version=4).cells if c.cell_type == "code"]
    if not cells or "parameters" not in cells[0].metadata.get("tags", []):
        return  # papermill injects any name into a notebook without a parameters cell
    checks = ast.parse(cells[1].source) if len(cells) > 1 else ast.Module(body=[], type_ignores=[])
    calls = [i for i, node in enumerate(checks.body) if any(
        isinstance(n, ast.Call) and getattr(n.func, "id", None) == "check_parameters" for n in ast.walk(node))]
    if not calls:
        return
    prelude = ast.Module(body=checks.body[: calls[0] + 1], type_ignores=[])
    namespace: dict = {"__name__": "__papermill_check__"}
    checked = dict(_CHECKED)  # this process's record of the last notebook checked stays as it was
    try:
        with contextlib.chdir(path.parent or "."):  # papermill runs a notebook in its folder: relative paths too
            # dont_inherit: compiled as the kernel compiles a cell, without this module's __future__ annotations
            exec(compile(cells[0].source, f"{path} (parameters cell)", "exec", dont_inherit=True), namespace)  # noqa: S102
            namespace.update(values)  # what papermill's injected-parameters cell does
            exec(compile(prelude, f"{path} (checks)", "exec", dont_inherit=True), namespace)  # noqa: S102
    except (UnknownParameterError, ParameterTypeError, ParameterValueError) as err:
        raise ValueError(f"{path}: {' '.join(str(err).split())}") from None
    finally:
        _CHECKED.clear()
        _CHECKED.update(checked)
