"""Papermill parameter checks (``paged.experiments.notebook``): unknown names and mistyped values are refused."""

from __future__ import annotations

import math

import pytest

from paged.experiments.notebook import ParameterTypeError, UnknownParameterError, check_parameters, record_parameters


def _recorded(**defaults):
    ns = dict(defaults)
    record_parameters(namespace=ns, optional={"num_threads"})
    return ns


def test_unknown_parameter_named():
    ns = _recorded(num_requests=10, seed=0)
    ns["num_requests"] = 20  # an injected known parameter is fine
    check_parameters(ns)
    ns["num_request"] = 5  # a typo
    with pytest.raises(UnknownParameterError, match="num_request.*accepts: num_requests, seed"):
        check_parameters(ns)


def test_check_without_record():
    with pytest.raises(RuntimeError, match="record_parameters"):
        check_parameters({})


@pytest.mark.parametrize("name, value", [
    ("block_size", 16.5), ("block_size", "16"), ("block_size", True), ("kv_cache_gib", "twelve"),
    ("block_sizes", 16), ("block_sizes", [1, 2.5]), ("rates", ["fast"]), ("trace", 3), ("flag", 1),
    ("rates_by_trace", [1.0]), ("num_threads", "two"),
])
def test_mistyped_parameter_named(name, value):
    ns = _recorded(block_size=16, kv_cache_gib=12.0, block_sizes=[1, 2, 4], rates=[0.5, 1.0], trace="sharegpt",
                   flag=False, rates_by_trace={"sharegpt": 3.0}, num_threads=1, model_path=None)
    ns[name] = value
    with pytest.raises(ParameterTypeError, match=f"parameter '{name}' must be"):
        check_parameters(ns)


@pytest.mark.parametrize("name, value", [
    ("kv_cache_gib", 12), ("rates", [1, 2]), ("rates", (1.5,)), ("rate", math.inf), ("num_threads", None),
    ("model_path", "/some/where"), ("block_sizes", []),
])
def test_well_typed_parameter_accepted(name, value):
    ns = _recorded(kv_cache_gib=12.0, rates=[0.5, 1.0], rate=2.0, num_threads=1, model_path=None, block_sizes=[1, 2])
    ns[name] = value
    check_parameters(ns)


def test_long_values_are_shortened_in_the_message():
    ns = _recorded(block_size=16)
    ns["block_size"] = "x" * 10_000
    with pytest.raises(ParameterTypeError) as err:
        check_parameters(ns)
    assert len(str(err.value)) < 300


@pytest.mark.parametrize("name, value, match", [
    ("block_size", 0, "'block_size' must be > 0, got 0"), ("rate", -1.0, "'rate' must be > 0"),
    ("rate", math.nan, "'rate' must be > 0"), ("seed", -1, "'seed' must be ≥ 0"),
    ("block_sizes", [16, 0], "'block_sizes' must be > 0, got 0 in"), ("block_sizes", [], "'block_sizes' must not be empty"),
    ("rates_by_trace", {"sharegpt": 0.0}, "'rates_by_trace' must be > 0"),
    ("rates_by_trace", {"foo": 1.0}, "'foo' is not one of"), ("system", "pagd", "'pagd' is not one of"),
    ("systems", ["paged", "x"], "'x' is not one of"),
])
def test_bad_values_named(name, value, match):
    from paged.experiments.notebook import ParameterValueError

    ns = _recorded(block_size=16, rate=2.0, seed=0, block_sizes=[8, 16], rates_by_trace={"sharegpt": 3.0},
                   system="paged", systems=["paged"], num_threads=1)
    ns[name] = value
    with pytest.raises(ParameterValueError, match=match):
        check_parameters(ns, positive=["block_size", "rate", "block_sizes", "rates_by_trace", "num_threads"],
                         nonnegative=["seed"], choices={"rates_by_trace": ("sharegpt", "alpaca"),
                                                        "system": ("paged",), "systems": ("paged",)})


def test_imports_after_record_are_not_parameters():
    ns = _recorded(block_size=16)
    ns["math"] = math  # a module imported in the checking cell
    ns["isclose"] = math.isclose
    check_parameters(ns, positive=["block_size"])
