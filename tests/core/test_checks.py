"""The library's shared argument checks (paged.core.checks)."""

import numpy as np
import pytest

from paged.core.checks import as_int, as_positive_int


def test_as_positive_int_takes_any_integer_type_and_returns_a_python_int():
    for value in (1, 7, np.int64(3), np.int32(2)):
        out = as_positive_int(value, "count")
        assert out == int(value) and type(out) is int


@pytest.mark.parametrize("bad", [0, -2, 2.5, 3.0, "4", None, True, np.float64(2.0)])
def test_as_positive_int_refuses_by_name(bad):
    with pytest.raises(ValueError, match="num_blocks must be a positive integer"):
        as_positive_int(bad, "num_blocks")


def test_as_int_refuses_a_bool_and_a_float():
    assert as_int(np.int64(-3), "x") == -3
    for bad in (True, 1.5, "2"):
        with pytest.raises(TypeError, match="x must be an integer"):
            as_int(bad, "x")
