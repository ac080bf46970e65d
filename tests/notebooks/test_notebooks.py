"""Every notebook runs top to bottom under papermill with tiny parameters, on this interpreter's kernel.

Also: notebooks are committed without outputs and name the ``python3`` kernel, the first code cell
is tagged ``parameters``, every parameter has a type papermill can show, an executed notebook holds
each of its figures as an image and nothing that looks broken (no stderr, no unfinished progress
bar, no stray repr: :func:`paged.experiments.notebook.outputs.output_problems`), and an unknown
papermill parameter is refused with an error naming it.
"""

import ast
import json
import logging
from pathlib import Path

import nbformat
import papermill as pm
import pytest

from paged.experiments.notebook.kernel import KERNEL_NAME, execute_notebook
from paged.experiments.notebook.manifest import figure_files, manifest_problems
from paged.experiments.notebook.outputs import output_problems
from paged.experiments.notebook.plotting import FIGURE_METADATA_KEY
from paged.experiments.notebook.quick import QUICK_PARAMETERS

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
#: Notebooks whose parameters carry type annotations (``name: type = value  # help``).
TYPED = {"00_tour", "01_fragmentation", "02_sharing", "03_throughput", "04_kernel", "05_engine", "06_today"}

#: Tiny parameters per notebook: seconds, not minutes (the sets `make quick` runs).
TINY = QUICK_PARAMETERS


def _execute(nb: Path, tmp_path: Path, **params):
    out = tmp_path / nb.name
    figures = tmp_path / "figures"
    execute_notebook(nb, out, {**params, "output_dir": str(figures)})
    return out, figures


def test_notebooks_found():
    assert NOTEBOOKS, "no notebooks found"
    missing = set(TINY) - {nb.stem for nb in NOTEBOOKS}
    assert not missing


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_clean(nb):
    data = json.loads(nb.read_text())
    code = [c for c in data["cells"] if c["cell_type"] == "code"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), "outputs committed"
    assert "parameters" in code[0]["metadata"].get("tags", []), "first code cell must be tagged parameters"
    # The kernel every environment with ipykernel has (a wheel install, conda, make venv), not a named one.
    assert data["metadata"]["kernelspec"]["name"] == KERNEL_NAME == "python3"


@pytest.mark.slow
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_with_tiny_parameters(nb, tmp_path):
    assert nb.stem in TINY, f"add tiny parameters for {nb.stem} to TINY"
    executed, figures = _execute(nb, tmp_path, **TINY[nb.stem])
    files = figure_files(figures)
    stems = {Path(f).stem for f in files}
    assert stems, "the notebook wrote no figure"
    for stem in stems:  # every figure comes with its PNG, PDF and CSV
        assert {f"{stem}.png", f"{stem}.pdf", f"{stem}.csv"} <= set(files)
    shown = {}  # every saved figure is also an image output of the executed notebook: the saved PNG
    for cell in nbformat.read(str(executed), as_version=4).cells:
        for output in cell.get("outputs", []):
            info = output.get("metadata", {}).get(FIGURE_METADATA_KEY)
            if info and "image/png" in output.get("data", {}):
                shown[info["name"]] = output["data"]["image/png"]
    assert set(shown) == stems
    import base64

    for stem, png in shown.items():
        assert base64.b64decode(png) == (figures / f"{stem}.png").read_bytes()
    assert output_problems(executed) == [], "the executed notebook must read like a finished paper section"
    assert manifest_problems(figures) == []  # every figure's entry describes its files


def test_unknown_parameter_is_refused(tmp_path):
    nb = ROOT / "notebooks" / "01_fragmentation.ipynb"
    with pytest.raises(pm.PapermillExecutionError) as err:
        _execute(nb, tmp_path, num_request=10)  # typo of num_requests
    assert "num_request" in str(err.value) and "unknown papermill parameter" in str(err.value)


def test_mistyped_parameter_is_refused_before_any_work(tmp_path):
    nb = ROOT / "notebooks" / "01_fragmentation.ipynb"
    with pytest.raises(pm.PapermillExecutionError) as err:
        _execute(nb, tmp_path, kv_cache_gib="twelve")
    assert "parameter 'kv_cache_gib' must be a float" in str(err.value)
    assert not (tmp_path / "figures").exists() or not any((tmp_path / "figures").iterdir())


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_bad_value_is_refused_in_the_first_cells(nb, tmp_path):
    with pytest.raises(pm.PapermillExecutionError) as err:
        _execute(nb, tmp_path, block_size=0)
    assert "parameter 'block_size' must be > 0, got 0" in str(err.value)
    assert err.value.exec_count <= 3  # the parameters, injected and checking cells; no heavy work ran


@pytest.mark.parametrize("params,message", [
    (dict(traces=["nosuch"]), "parameter 'traces': 'nosuch' is not one of"),
    (dict(duration_scale={"nosuch": 1.0}), "parameter 'duration_scale': 'nosuch' is not one of"),
    (dict(thresholds=[0.3]), "parameter 'thresholds' must include the headline 0.2"),
    (dict(rel_tol=5.0), "parameter 'rel_tol' must be in (0, 1)"),
    (dict(thresholds=[0.2, 0.2]), "parameter 'thresholds' has a value twice"),
    (dict(traces=[]), "parameter 'traces' must not be empty"),
    (dict(block_sizes=[16, 16]), "parameter 'block_sizes' has a value twice"),
])
def test_throughput_names_a_bad_trace_or_threshold(params, message, tmp_path):
    nb = ROOT / "notebooks" / "03_throughput.ipynb"
    with pytest.raises(pm.PapermillExecutionError) as err:
        _execute(nb, tmp_path, **params)
    assert message in str(err.value) and err.value.ename == "ParameterValueError"
    assert err.value.exec_count <= 3


@pytest.mark.parametrize("name, overrides, message", [
    ("01_fragmentation", dict(block_sizes=[16, 16]), "parameter 'block_sizes' has a value twice"),
    ("02_sharing", dict(saving_traces=["wmt16-1shot"]), "parameter 'saving_rates': no request rate for trace(s) ['wmt16-1shot']"),
    ("02_sharing", dict(saving_traces=["nosuch"]), "parameter 'saving_traces': 'nosuch' is not one of"),
    ("05_engine", dict(widths=[2, 2]), "parameter 'widths' has a value twice"),
])
def test_a_bad_sweep_list_is_refused_in_the_first_cells(name, overrides, message, tmp_path):
    with pytest.raises(pm.PapermillExecutionError) as err:
        _execute(ROOT / "notebooks" / f"{name}.ipynb", tmp_path, **overrides)
    assert message in str(err.value) and err.value.ename == "ParameterValueError"
    assert err.value.exec_count <= 3


@pytest.mark.parametrize("params,message", [
    (dict(batch_prompt_lens=[2, 5], batch_output_lens=[3]), "need one value per request: got 2 and 1"),
    (dict(sched_num_slots=2), "parameter 'sched_num_slots' (2 tokens) must hold one block"),
])
def test_tour_refuses_inconsistent_views_in_the_first_cells(params, message, tmp_path):
    nb = ROOT / "notebooks" / "00_tour.ipynb"
    with pytest.raises(pm.PapermillExecutionError) as err:
        _execute(nb, tmp_path, **params)
    assert message in str(err.value) and err.value.ename == "ParameterValueError"
    assert err.value.exec_count <= 3


def _parameter_names(nb: Path) -> list[str]:
    """The names the parameters cell assigns, read with ast."""
    cell = next(c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code")
    tree = ast.parse("".join(cell["source"]))
    names = []
    for node in tree.body:
        if isinstance(node, ast.AnnAssign):
            names.append(node.target.id)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return names


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_help_notebook_shows_a_type_for_every_parameter(nb, caplog):
    if nb.stem not in TYPED:
        pytest.skip(f"{nb.stem}: parameters not annotated yet (add the stem to TYPED when they are)")
    with caplog.at_level(logging.WARNING, logger="papermill"):
        found = pm.inspect_notebook(str(nb))
    assert not [r for r in caplog.records if "Unable to parse" in r.getMessage()]
    assert list(found) == _parameter_names(nb), "papermill must find every parameter, and nothing else"
    untyped = [name for name, p in found.items() if p["inferred_type_name"] in ("None", "")]
    assert not untyped, f"parameters without a type annotation: {untyped}"


def test_a_kernel_keeps_its_inline_backend(tmp_path):
    """Importing the plotting module inside a kernel must not switch matplotlib to Agg."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import paged.experiments.notebook.plotting, matplotlib\nprint(matplotlib.get_backend())")],
        metadata={"language_info": {"name": "python"}})
    path = tmp_path / "backend.ipynb"
    nbformat.write(nb, path)
    execute_notebook(path, path)
    out = nbformat.read(str(path), as_version=4).cells[0].outputs[0]["text"]
    assert "inline" in out, out
