"""Every notebook runs top to bottom under papermill with tiny parameters.

Also: notebooks are committed without outputs, the first code cell is tagged ``parameters``,
and an unknown papermill parameter is refused with an error naming it.
"""

import json
from pathlib import Path

import papermill as pm
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))

#: Tiny parameters per notebook: seconds, not minutes.
TINY = {
    "01_fragmentation": {"num_requests": 80, "block_sizes": [8, 16], "kv_cache_gib": 2.0},
    "03_throughput": {"models": ["opt-13b"], "traces": ["sharegpt"], "curve_fractions": [0.5], "thresholds": [0.2],
                      "duration_scale": {"sharegpt": 0.02, "alpaca": 0.02, "sharegpt-chat": 0.02},
                      "cpu_scales": [2.0], "saturated_requests": 200, "block_sizes": [8, 16], "workers": 1},
    "04_kernel": {"device": "cpu", "context_lens": [16, 64], "batch_sizes": [2], "num_heads": 8,
                  "num_kv_heads": 8, "head_size": 64, "repeats": 1},
    "05_engine": {"num_requests": 6, "kv_cache_tokens": 2048, "rounds": 1, "validation_requests": 6,
                  "validation_fractions": [0.5], "sharing_num_requests": 2, "sharing_max_tokens": 4, "widths": [2],
                  "profile_batch_sizes": [1, 2]},
}


def _execute(nb: Path, tmp_path: Path, **params):
    out = tmp_path / nb.name
    figures = tmp_path / "figures"
    pm.execute_notebook(str(nb), str(out), parameters={**params, "output_dir": str(figures)},
                        cwd=str(nb.parent), kernel_name="python3", progress_bar=False)
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


@pytest.mark.slow
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_with_tiny_parameters(nb, tmp_path):
    assert nb.stem in TINY, f"add tiny parameters for {nb.stem} to TINY"
    _, figures = _execute(nb, tmp_path, **TINY[nb.stem])
    files = sorted(p.name for p in figures.iterdir())
    stems = {Path(f).stem for f in files}
    assert stems, "the notebook wrote no figure"
    for stem in stems:  # every figure comes with its PNG, PDF and CSV
        assert {f"{stem}.png", f"{stem}.pdf", f"{stem}.csv"} <= set(files)


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
