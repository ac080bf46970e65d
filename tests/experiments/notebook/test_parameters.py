"""Papermill parameter checks (``paged.experiments.notebook.parameters``): unknown names and mistyped values are refused."""

from __future__ import annotations

import math
import re

import pytest

from paged.experiments.notebook.parameters import ParameterTypeError, UnknownParameterError, check_parameters, record_parameters


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


@pytest.mark.parametrize("name, value, where", [
    ("block_size", 16.5, "'block_size'"), ("block_size", "16", "'block_size'"), ("block_size", True, "'block_size'"),
    ("kv_cache_gib", "twelve", "'kv_cache_gib'"), ("block_sizes", 16, "'block_sizes'"),
    ("block_sizes", [1, 2.5], "block_sizes[1]"), ("rates", ["fast"], "rates[0]"), ("trace", 3, "'trace'"),
    ("flag", 1, "'flag'"), ("rates_by_trace", [1.0], "'rates_by_trace'"),
    ("rates_by_trace", {"sharegpt": "3"}, "rates_by_trace['sharegpt']"), ("num_threads", "two", "'num_threads'"),
])
def test_mistyped_parameter_named(name, value, where):
    ns = _recorded(block_size=16, kv_cache_gib=12.0, block_sizes=[1, 2, 4], rates=[0.5, 1.0], trace="sharegpt",
                   flag=False, rates_by_trace={"sharegpt": 3.0}, num_threads=1, model_path=None)
    ns[name] = value
    with pytest.raises(ParameterTypeError, match=f"parameter {re.escape(where)} must be"):
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
    ("block_sizes", [16, 0], r"block_sizes\[1\] must be > 0, got 0 in"), ("block_sizes", [], "'block_sizes' must not be empty"),
    ("rates_by_trace", {"sharegpt": 0.0}, r"rates_by_trace\['sharegpt'\] must be > 0"),
    ("rates_by_trace", {"foo": 1.0}, "'foo' is not one of"), ("system", "pagd", "'pagd' is not one of"),
    ("systems", ["paged", "x"], "'x' is not one of"),
    ("systems", [], r"'systems' must not be empty; choose from \['paged'\]"),
])
def test_bad_values_named(name, value, match):
    from paged.experiments.notebook.parameters import ParameterValueError

    ns = _recorded(block_size=16, rate=2.0, seed=0, block_sizes=[8, 16], rates_by_trace={"sharegpt": 3.0},
                   system="paged", systems=["paged"], num_threads=1)
    ns[name] = value
    with pytest.raises(ParameterValueError, match=match):
        check_parameters(ns, positive=["block_size", "rate", "block_sizes", "rates_by_trace", "num_threads"],
                         nonnegative=["seed"], choices={"rates_by_trace": ("sharegpt", "alpaca"),
                                                        "system": ("paged",), "systems": ("paged",)})


def test_a_sweep_axis_with_a_value_twice_is_refused():
    from paged.experiments.notebook.parameters import ParameterValueError

    ns = _recorded(block_sizes=[8, 16], systems=["paged"])
    check_parameters(ns, distinct=["block_sizes", "systems"])
    ns["block_sizes"] = [16, 8, 16]
    with pytest.raises(ParameterValueError, match=r"'block_sizes' has a value twice \(16 in \[16, 8, 16\]\)"):
        check_parameters(ns, distinct=["block_sizes", "systems"])


def test_imports_after_record_are_not_parameters():
    ns = _recorded(block_size=16)
    ns["math"] = math  # a module imported in the checking cell
    ns["isclose"] = math.isclose
    check_parameters(ns, positive=["block_size"])


# -- annotations (the form papermill --help-notebook reads), values inside dicts and lists ---------
def _annotated(annotations, **defaults):
    ns = dict(defaults)
    record_parameters(namespace=ns, annotations=annotations)
    return ns


@pytest.mark.parametrize("annotation, value, message", [
    (dict[str, float], {"sharegpt": "3"}, "rates['sharegpt'] must be a float (declared dict[str, float]), got '3'"),
    ("dict[str, float]", {"sharegpt": 3.0, 7: 1.0}, "'rates' has the key 7, which is not a str"),
    ("list[int]", [8, "16"], "rates[1] must be an int (declared list[int]), got '16'"),
    ("dict[str, list[int]]", {"a": [1, 2.5]}, "rates['a'][1] must be an int"),
    ("Optional[int]", "two", "'rates' must be an int or None (declared Optional[int])"),
    (float, None, "'rates' must be a float"),
])
def test_annotated_values_checked_and_named(annotation, value, message):
    default = {"list[int]": [1], "Optional[int]": 1, float: 1.0}.get(annotation, {"sharegpt": 1.0})
    if annotation == "dict[str, list[int]]":
        default = {"a": [1]}
    ns = _annotated({"rates": annotation}, rates=default)
    ns["rates"] = value
    with pytest.raises(ParameterTypeError) as err:
        check_parameters(ns)
    assert message in str(err.value)


@pytest.mark.parametrize("annotation, value", [
    ("Optional[int]", None), ("Optional[int]", 3), ("dict[str, float]", {"alpaca": 30}), ("list[float]", [1, 2.5]),
    ("Any", object()), ("int | None", None),
])
def test_annotated_values_accepted(annotation, value):
    ns = _annotated({"x": annotation}, x=1 if "int" in annotation or annotation == "Any" else
                    ({"a": 1.0} if "dict" in annotation else [1.0]))
    ns["x"] = value
    check_parameters(ns)


def test_default_dict_values_checked_without_annotation():
    ns = _recorded(block_size_rates={"sharegpt": 3.0, "alpaca": 30.0})
    ns["block_size_rates"] = {"sharegpt": "3"}
    with pytest.raises(ParameterTypeError, match=r"block_size_rates\['sharegpt'\] must be a float"):
        check_parameters(ns)


def test_required_dict_keys_named():
    from paged.experiments.notebook.parameters import ParameterValueError

    ns = _recorded(traces=["sharegpt", "alpaca"], block_size_rates={"sharegpt": 3.0, "alpaca": 30.0})
    ns["block_size_rates"] = {"sharegpt": 3.0}
    with pytest.raises(ParameterValueError, match=r"block_size_rates\['alpaca'\] is missing"):
        check_parameters(ns, required_keys={"block_size_rates": ns["traces"]})
    ns["traces"] = ["sharegpt"]  # fewer traces need fewer keys
    check_parameters(ns, required_keys={"block_size_rates": ns["traces"]})


def test_value_rule_names_the_dict_key():
    from paged.experiments.notebook.parameters import ParameterValueError

    ns = _recorded(block_size_rates={"sharegpt": 3.0})
    ns["block_size_rates"] = {"sharegpt": 0.0}
    with pytest.raises(ParameterValueError, match=r"block_size_rates\['sharegpt'\] must be > 0"):
        check_parameters(ns, positive=["block_size_rates"])


@pytest.mark.parametrize("annotation, default, match", [
    ("int", 1.5, "default of 'x' does not match its annotation"),
    ("Literal['a']", "a", "cannot read the annotation"),
    (set[int], {1}, "is not one of int, float"),
])
def test_bad_annotations_are_the_notebooks_error(annotation, default, match):
    with pytest.raises(TypeError, match=re.escape(match)):
        _annotated({"x": annotation}, x=default)


def test_checked_parameters_are_json_safe():
    import json

    from paged.experiments.notebook.parameters import checked_parameters

    ns = _recorded(rate=math.inf, sizes=(1, 2), name="x")
    check_parameters(ns)
    assert json.loads(json.dumps(checked_parameters(), allow_nan=False)) == {"rate": "inf", "sizes": [1, 2], "name": "x"}


def test_the_default_figure_folder_is_beside_notebooks_or_in_the_working_folder(tmp_path, monkeypatch):
    from paged.experiments.notebook.parameters import default_figures_dir
    from paged.experiments.notebook.provenance import RUN_ENV

    (tmp_path / "notebooks").mkdir()
    assert default_figures_dir(str(tmp_path / "notebooks")) == "../figures"  # Lab, make: the checkout's figures/
    assert default_figures_dir(str(tmp_path)) == "figures"  # papermill from the clone's root or elsewhere

    def checked(cwd):
        monkeypatch.chdir(cwd)
        ns = {"output_dir": "../figures"}
        record_parameters(ns)
        check_parameters(ns)
        return ns["output_dir"]

    monkeypatch.delenv(RUN_ENV, raising=False)
    assert checked(tmp_path) == "figures" and checked(tmp_path / "notebooks") == "../figures"
    monkeypatch.setenv(RUN_ENV, '{"target": "/somewhere", "staging": "/somewhere/.s"}')
    assert checked(tmp_path) == "../figures"  # a runner's output_dir is its own


def test_an_output_dir_that_is_a_file_is_refused_before_anything_runs(tmp_path):
    from paged.experiments.notebook.parameters import ParameterValueError

    a_file = tmp_path / "afile"
    a_file.write_text("x")
    ns = {"output_dir": "../figures"}
    record_parameters(ns)
    ns["output_dir"] = str(a_file)
    with pytest.raises(ParameterValueError, match="output_dir.*is a file"):
        check_parameters(ns)
