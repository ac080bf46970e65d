"""Property: whatever bad input a command of ``python -m paged`` is given (an option's value, a file's
content, a notebook's papermill parameter), it ends in exactly one ``error:`` line that names the file
(or the option) and the problem, with exit status 2 and no traceback, and nothing is printed to stdout.

The commands run in this process (``paged.cli.main``), so hypothesis can try many inputs quickly; the
subprocess tests in ``test_cli.py`` check the same contract end to end.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from paged.cli import main

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def run(argv: list[str]) -> tuple[int, str, str]:
    """``python -m paged *argv`` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_info:
        main(argv)
    return exit_info.value.code, out.getvalue(), err.getvalue()


def assert_one_error_line(argv: list[str], names: str | None = None) -> str:
    code, out, err = run(argv)
    assert code == 2, (argv, code, err)
    assert out == "", (argv, out)
    assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, (argv, err)
    assert "Traceback" not in err
    if names is not None:
        assert names in err, (argv, err)
    return err


# -- option values ------------------------------------------------------------------------------------
_WORDS = st.text(alphabet=string.ascii_letters + "_.:@", min_size=1, max_size=12)


def _not_positive_int(text: str) -> bool:
    try:
        return int(text) < 1
    except ValueError:
        return True


def _not_positive_float(text: str) -> bool:
    try:
        value = float(text)
    except ValueError:
        return True
    return not 0 < value < float("inf")


BAD_POSITIVE_INT = st.one_of(st.integers(max_value=0).map(str), _WORDS, st.floats(0.01, 1e6).map(lambda f: f"{f:.3f}"))
BAD_POSITIVE_FLOAT = st.one_of(st.floats(max_value=0, allow_nan=False).map(repr), st.sampled_from(["nan", "inf", "-inf"]),
                               _WORDS).filter(_not_positive_float)
BAD_SEED = st.one_of(st.integers(max_value=-1), st.integers(min_value=2**32)).map(str) | _WORDS.filter(_not_positive_int)
BAD_RATE = st.one_of(st.floats(max_value=0, allow_nan=False).map(repr), st.just("nan"), st.floats(0, 1e-9).map(repr),
                     _WORDS.filter(_not_positive_float))

# (command, option, bad values, fixed arguments that keep a run small if a value were accepted)
OPTIONS = [
    ("fragmentation", "--block-size", BAD_POSITIVE_INT),
    ("fragmentation", "--num-requests", BAD_POSITIVE_INT.filter(lambda t: t.strip().lower() != "all")),
    ("fragmentation", "--seed", BAD_SEED),
    ("fragmentation", "--rate", BAD_RATE),
    ("fragmentation", "--kv-cache-gib", BAD_POSITIVE_FLOAT),
    ("fragmentation", "--max-seq-len", BAD_POSITIVE_INT),
    ("fragmentation", "--tokenizer", _WORDS.filter(lambda t: t.lower() not in ("gpt2", "opt", "cl100k"))),
    ("fragmentation", "--model", _WORDS.filter(lambda t: t.lower() not in ("opt-13b", "opt-66b", "opt-175b", "llama-13b"))),
    ("simulate", "--block-size", BAD_POSITIVE_INT),
    ("simulate", "--num-requests", BAD_POSITIVE_INT.filter(lambda t: t.strip().lower() != "all")),
    ("simulate", "--seed", BAD_SEED),
    ("simulate", "--rate", BAD_RATE),
    ("simulate", "--tp", BAD_POSITIVE_INT),
    ("simulate", "--max-seq-len", BAD_POSITIVE_INT),
    ("simulate", "--n", BAD_POSITIVE_INT),
    ("simulate", "--beam-width", BAD_POSITIVE_INT),
    ("simulate", "--gpu", _WORDS.filter(lambda t: t.lower() not in ("a100-40gb", "a100-80gb", "h100-sxm", "h200", "l4"))),
    ("simulate", "--system", _WORDS),
    ("simulate", "--preemption", _WORDS),
    ("simulate", "--model", _WORDS),
    ("simulate", "--trace", _WORDS),
    ("sweep-notebook", "--workers", BAD_POSITIVE_INT),
    ("sweep-notebook", "--backend", _WORDS),
    ("claims", "--figures", _WORDS),
    ("manifest", "--figures", _WORDS),
    ("report", "--notebooks", _WORDS),
]
_NEEDS = {"sweep-notebook": ["notebooks/01_fragmentation.ipynb", "--grid", "{block_size: [8]}", "--out", "OUT"],
          "simulate": ["--num-requests", "5"], "fragmentation": ["--num-requests", "50"]}


@settings(max_examples=150, **SETTINGS)
@given(data=st.data())
def test_a_bad_option_value_is_one_error_line(data, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the committed notebooks and traces, by relative path
    command, option, values = data.draw(st.sampled_from(OPTIONS), label="option")
    value = data.draw(values, label="value")
    assume(not Path(value).exists())  # a word that happens to name a file is another test's input
    fixed = [str(tmp_path / "out") if a == "OUT" else a for a in _NEEDS.get(command, [])]
    if option in fixed:
        i = fixed.index(option)
        fixed = fixed[:i] + fixed[i + 2:]
    argv = [command, *fixed, f"{option}={value}"]
    if option == "--gpu":
        argv += ["--model", "llama-3.1-8b"]
    if option == "--model" and command == "simulate":
        argv += ["--gpu", "h100-sxm"]  # an unknown name, not a Table 1 server question
    err = assert_one_error_line(argv)
    shown = value if len(value) < 40 else value[:20]
    assert option in err or shown in err or repr(value)[1:-1] in err or "rate" in err, err


# -- file contents ------------------------------------------------------------------------------------
_TEXT_LINE = st.text(alphabet=string.ascii_letters + string.digits + " ,.-_:#\"'{}[]", max_size=30)
CSV_TEXT = st.one_of(
    st.just(""),
    st.lists(_TEXT_LINE, min_size=1, max_size=6).map("\n".join),
    st.tuples(st.sampled_from(["prompt_len,output_len", "prompt_len,output_len,arrival_time",
                               "prompt_len,output_len,prefix_len", "prompt_len", "a,b"]),
              st.lists(st.lists(st.one_of(st.integers(-5, 10**7), st.sampled_from(["x", "", "1.5", "nan", "-0"])),
                                min_size=1, max_size=4).map(lambda row: ",".join(map(str, row))),
                       min_size=0, max_size=4)).map(lambda h: "\n".join([h[0], *h[1]])),
)
BINARY = st.binary(min_size=1, max_size=40).filter(lambda b: not b.isascii())
JSON_VALUES = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6), st.text(max_size=8)),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                        max_size=3), max_leaves=8)
CONFIG_JSON = st.one_of(
    JSON_VALUES.map(json.dumps),
    st.fixed_dictionaries({"model_type": st.sampled_from(["bert", "t5", "mixtral", "falcon", "nosuch", "llama", "gpt2",
                                                          "opt", "gpt_neox"])},
                          optional={"hidden_size": st.integers(-3, 50), "num_attention_heads": st.integers(-1, 7),
                                    "num_hidden_layers": st.integers(-1, 3), "vocab_size": st.integers(-1, 30),
                                    "num_key_value_heads": st.integers(-1, 7), "num_local_experts": st.integers(0, 3),
                                    "torch_dtype": st.sampled_from(["float16", "int3", "bfloat16"]),
                                    "max_position_embeddings": st.integers(-2, 10**9),
                                    "intermediate_size": st.integers(-1, 64), "head_dim": st.integers(-1, 9)}
                          ).map(json.dumps),
    st.text(max_size=30),
)


def _file(tmp_path: Path, name: str, content) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


@settings(max_examples=80, **SETTINGS)
@given(content=st.one_of(CSV_TEXT, BINARY), suffix=st.sampled_from([".csv", ".json", ".txt"]),
       command=st.sampled_from(["fragmentation", "simulate"]))
def test_a_bad_trace_file_is_one_error_line_naming_it(content, suffix, command, tmp_path):
    path = _file(tmp_path, f"trace{suffix}", content)
    code, out, err = run([command, "--trace", str(path), "--num-requests", "3", "--json"])
    if code == 0:  # content that happens to be a valid trace of at least 3 requests
        return
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: "), err
    assert str(path) in err, err


@settings(max_examples=60, **SETTINGS)
@given(content=st.one_of(CONFIG_JSON, BINARY))
def test_a_bad_config_json_is_one_error_line_naming_it(content, tmp_path):
    path = _file(tmp_path, "config.json", content)
    code, out, err = run(["simulate", "--model", str(path), "--gpu", "h200", "--num-requests", "3", "--json"])
    if code == 0:  # a config transformers completes into a real model (e.g. {"model_type": "llama"})
        return
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: "), err
    assert str(path) in err, err


@pytest.fixture(scope="module")
def figures(tmp_path_factory) -> Path:
    """A copy of the committed figures' CSV files (the claims table reads them)."""
    folder = tmp_path_factory.mktemp("figures")
    for csv in (ROOT / "figures").glob("*.csv"):
        shutil.copy(csv, folder / csv.name)
    return folder


@settings(max_examples=25, **SETTINGS)
@given(content=st.one_of(CSV_TEXT, BINARY), which=st.integers(0, 100))
def test_claims_with_a_bad_csv_is_one_error_line_naming_it(content, which, figures, tmp_path):
    from paged.experiments.notebook.claims import BEGIN, CLAIMS, END

    claim = CLAIMS[which % len(CLAIMS)]
    folder = tmp_path / "figures"
    if not folder.exists():
        shutil.copytree(figures, folder)
    path = _file(folder, f"{claim.figure}.csv", content)
    readme = _file(tmp_path, "README.md", f"{BEGIN}\n{END}\n")
    try:
        assert_one_error_line(["claims", "--figures", str(folder), "--readme", str(readme), "--check"], names=str(path))
    finally:
        shutil.copy(figures / path.name, path)


@pytest.mark.parametrize("content, problem", [("", "not a readable CSV"), ("system,token_states\n", "no rows"),
                                              ("system,token_states\norca-max,0.5\n", "lacks the rows or columns")])
def test_claims_names_an_empty_or_partial_csv(content, problem, figures, tmp_path):
    """The two cases that printed "No columns to parse from file" (no file named) and a KeyError traceback."""
    from paged.experiments.notebook.claims import BEGIN, END

    folder = tmp_path / "figures"
    shutil.copytree(figures, folder)
    path = _file(folder, "fig02_memory_waste.csv", content)
    readme = _file(tmp_path, "README.md", f"{BEGIN}\n{END}\n")
    err = assert_one_error_line(["claims", "--figures", str(folder), "--readme", str(readme)], names=str(path))
    assert problem in err
    assert readme.read_text() == f"{BEGIN}\n{END}\n"  # nothing written


@settings(max_examples=30, **SETTINGS)
@given(content=st.one_of(JSON_VALUES.map(json.dumps), st.text(max_size=30), BINARY),
       command=st.sampled_from(["report", "sweep-notebook"]))
def test_a_bad_notebook_file_is_one_error_line_naming_it(content, command, tmp_path):
    folder = tmp_path / "nbs"
    folder.mkdir(exist_ok=True)
    path = _file(folder, "bad.ipynb", content)
    argv = {"report": ["report", "--notebooks", str(folder), "--out", str(tmp_path / "r.html")],
            "sweep-notebook": ["sweep-notebook", str(path), "--grid", "{x: [1]}", "--out", str(tmp_path / "o")]}[command]
    assert_one_error_line(argv, names=str(path))
    assert not (tmp_path / "o").exists() and not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("content", ["garbage{", "[1]", '{"figures": 3}', b"\xff\xfe"])
def test_a_manifest_that_is_not_one_is_one_error_line_naming_it(content, tmp_path):
    path = _file(tmp_path, "MANIFEST.json", content)
    assert_one_error_line(["manifest", "--figures", str(tmp_path)], names=str(path))


@settings(max_examples=30, **SETTINGS)
@given(content=st.one_of(st.text(alphabet=string.printable, max_size=30), BINARY))
def test_a_bad_grid_file_is_one_error_line_naming_it(content, tmp_path):
    path = _file(tmp_path, "grid.yaml", content)
    code, out, err = run(["sweep-notebook", "notebooks/01_fragmentation.ipynb", "--grid", str(path),
                          "--out", str(tmp_path / "o")])
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: "), err
    assert str(path) in err or "01_fragmentation.ipynb" in err, err  # the grid file, or the notebook its names miss
    assert not (tmp_path / "o").exists()


# -- papermill parameters -----------------------------------------------------------------------------
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))


def _declared(nb: Path) -> dict:
    """The notebook's parameters and their declared type names, as papermill reads its parameters cell."""
    import papermill as pm

    return {name: info["inferred_type_name"] for name, info in pm.inspect_notebook(str(nb)).items()}


DECLARED = {nb.stem: _declared(nb) for nb in NOTEBOOKS}
#: Values of the wrong type for a declared type (bool is no int here, as the notebooks' checks say).
WRONG = {"int": ["x", 1.5, [1], {"a": 1}, True], "float": ["x", [1.0], {"a": 1.0}, True],
         "str": [1, 2.5, [1], {"a": "b"}], "bool": [1, "yes", [True]], "list": ["x", 3, {"a": 1}, [{"a": 1}]],
         "dict": ["x", 3, [1]]}


def _wrong_values(type_name: str) -> list:
    """Values a parameter declared ``type_name`` (papermill's text: ``int``, ``list[int]``,
    ``Optional[int]``, ``dict[str, float]``) refuses; [] when it takes anything."""
    if type_name.startswith("Optional[") and type_name.endswith("]"):  # what T refuses, never None
        return _wrong_values(type_name[len("Optional["):-1])
    if type_name.startswith(("list", "tuple")):
        item = type_name[type_name.find("[") + 1:-1] if "[" in type_name else ""
        return WRONG["list"] + [[v] for v in WRONG.get(item, [])[:2]]
    if type_name.startswith("dict"):
        return WRONG["dict"]
    return WRONG.get(type_name, [])


@settings(max_examples=60, **SETTINGS)
@given(data=st.data())
def test_a_bad_papermill_parameter_is_one_error_line_naming_the_notebook(data, tmp_path, monkeypatch):
    """A sweep's parameter of the wrong type, or one the notebook does not declare, is refused before any
    run: one line naming the notebook and the parameter."""
    monkeypatch.chdir(ROOT)
    stem = data.draw(st.sampled_from(sorted(DECLARED)), label="notebook")
    declared = DECLARED[stem]
    unknown = data.draw(st.booleans(), label="unknown name")
    if unknown:
        name = data.draw(st.from_regex(r"[a-z][a-z_]{2,10}", fullmatch=True).filter(lambda n: n not in declared))
        value = 1
    else:
        name = data.draw(st.sampled_from(sorted(n for n, tp in declared.items() if _wrong_values(tp))), label="name")
        value = data.draw(st.sampled_from(_wrong_values(declared[name])), label="value")
    notebook = f"notebooks/{stem}.ipynb"
    grid = json.dumps({name: [value]})
    err = assert_one_error_line(["sweep-notebook", notebook, "--grid", grid, "--out", str(tmp_path / "o")])
    assert f"{stem}.ipynb" in err and name in err, err
    assert not (tmp_path / "o").exists()  # nothing ran


def test_a_missing_grid_file_and_a_word_for_a_number_are_named_plainly(tmp_path):
    err = assert_one_error_line(["sweep-notebook", "notebooks/01_fragmentation.ipynb", "--grid",
                                 str(tmp_path / "nofile.yaml"), "--out", str(tmp_path / "o")])
    assert "nofile.yaml does not exist" in err
    err = assert_one_error_line(["simulate", "--block-size", "abc"])
    assert "--block-size: must be an integer ≥ 1, got 'abc'" in err and "positive_int" not in err


@pytest.mark.parametrize("figure", [3, {"name": "fig99"}, {"name": "fig99", "files": {"png": {"sha256": "x"}}}])
def test_a_malformed_manifest_entry_is_named(figure, tmp_path):
    """A manifest whose figure entry lacks its files (or their paths) is a problem naming that entry, exit 1."""
    _file(tmp_path, "MANIFEST.json", json.dumps({"figures": [figure]}))
    code, out, err = run(["manifest", "--figures", str(tmp_path)])
    assert code == 1 and err == "", err
    assert "figure entry 0" in out and "malformed" in out and ("fig99" in out or "(?)" in out), out


@pytest.mark.parametrize("target,problem", [("afile/x", "'afile/x' has a file where a folder is needed"),
                                            ("afile", "'afile' exists and is not a folder")])
def test_an_output_folder_under_a_file_is_named_without_errno(target, problem, tmp_path, monkeypatch):
    """An output folder that is a file, or lies under one: the path the user gave and what is wrong with
    it, not an errno number; nothing is created."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    (tmp_path / "sharegpt.json").write_text("[]")
    err = assert_one_error_line(["traces", "--out-dir", target, "--path", "sharegpt.json"])
    assert problem in err and "Errno" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "sharegpt.json"]


def test_an_atomic_write_onto_a_folder_names_the_folder_not_its_temporary_file():
    from paged.cli import os_error_text

    err = IsADirectoryError(21, "Is a directory", "/out/.report.x93mfmkp.tmp", None, "/out/report.html")
    assert os_error_text(err) == "'/out/report.html' is a folder (a file path is needed)"
    assert os_error_text(FileNotFoundError(2, "No such file or directory", "README.md")) == "'README.md' does not exist"
    assert os_error_text(OSError("disk on fire")) == "disk on fire"


def test_claims_outside_the_repository_says_where_to_run_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = assert_one_error_line(["claims", "--check"])
    assert "run it from the repository's root, or give --readme PATH" in err, err


def test_a_malformed_sharegpt_file_leaves_no_folder_behind(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sharegpt.json").write_text('{"not": "a list"}')
    err = assert_one_error_line(["traces", "--out-dir", "new/out", "--path", "sharegpt.json"])
    assert "sharegpt.json" in err and "not a JSON list" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sharegpt.json"]


@pytest.mark.parametrize("argv,names", [
    (["--paper-length", "--num-requests", "1000"], "--paper-length sets the number of requests"),
    (["--system", "orca-max", "--preemption", "swap"], "'orca-max' reserves each request's space"),
    (["--num-requests", "100000000"], "at most 1,000,000 requests"),
])
def test_simulate_refuses_settings_it_would_ignore_or_could_not_hold(argv, names):
    assert_one_error_line(["simulate", *argv], names)


def test_sweep_notebook_names_a_kernel_that_does_not_exist_before_any_run(tmp_path):
    err = assert_one_error_line(["sweep-notebook", str(ROOT / "notebooks" / "00_tour.ipynb"), "--grid", "{seed: [0]}",
                                 "--out", str(tmp_path / "out"), "--kernel", "no-such-kernel"])
    assert "--kernel 'no-such-kernel': no such Jupyter kernel" in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [
    ["traces", "--out-dir", ""],
    ["sweep-notebook", "notebooks/00_tour.ipynb", "--grid", "{sched_num_requests: [6]}", "--out", " "],
    ["report", "--out", ""],
    ["claims", "--readme", ""],
    ["manifest", "--figures", ""],
])
def test_an_empty_path_is_refused_before_anything_is_written(argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = assert_one_error_line(argv, "must be a path, got an empty string")
    assert "error: argument" in err and list(tmp_path.iterdir()) == []


def test_sweep_notebook_refuses_a_cluster_address_without_a_cluster_backend(tmp_path):
    assert_one_error_line(["sweep-notebook", str(ROOT / "notebooks" / "00_tour.ipynb"), "--grid", "{seed: [0]}",
                           "--out", str(tmp_path / "out"), "--address", "tcp://x:1"], "--address names a cluster")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("gib", ["1e30", "1e18", "2048"])
def test_a_kv_cache_too_large_to_book_keep_is_refused(gib):
    assert_one_error_line(["fragmentation", "--num-requests", "50", "--kv-cache-gib", gib], "must be at most 1024 GiB")
