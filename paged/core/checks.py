"""Argument checks shared by the library: integers that may come from Python, numpy or torch.

Some paths would otherwise accept a float, string or bool where a count or token id belongs
(``int(1.7)`` truncates; ``True`` indexes as 1) and corrupt state later.
"""

from __future__ import annotations

import operator

__all__ = ["as_int", "as_positive_int", "as_token_ids"]


def as_int(value, what: str) -> int:
    """``value`` as a Python int: any integer type with ``__index__`` (numpy too), not a bool.
    Raises TypeError, naming ``what`` and the value, for anything else (bool, float, string, None)."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"{what} must be an integer, got {value!r}")


def as_positive_int(value, what: str) -> int:
    """``value`` as a Python int ≥ 1 (a count or a size): any integer type with ``__index__``, not a bool.
    Raises ValueError, naming ``what`` and the value, for anything else (float, string, None, bool, ≤ 0)."""
    if not isinstance(value, bool):
        try:
            value = operator.index(value)
        except TypeError:
            pass
        else:
            if value >= 1:
                return value
    raise ValueError(f"{what} must be a positive integer, got {value!r}")


def as_token_ids(values, what: str) -> list[int]:
    """Every item of ``values`` as a Python int (:func:`as_int`), as a list. Raises TypeError, naming ``what``
    and the first few values, if ``values`` is not iterable or an item is not an integer."""
    try:
        values = list(values)
    except TypeError:
        raise TypeError(f"{what} must be a sequence of integers, got {values!r}") from None
    try:
        return [as_int(v, what) for v in values]
    except TypeError:
        raise TypeError(f"{what} must be integers, got {values[:8]!r}{' ...' if len(values) > 8 else ''}") from None
