"""The simulator's fast path changes no result: the simulating notebooks, run with their tiny parameters and
the fast path switched off (``PAGED_SIM_FAST=0``: the reference scheduler, managers and loop, one iteration
at a time), write the same figure data as with it on.

Every column of every figure's CSV is equal, but those derived from sums of busy seconds (the average
batch per second of busy time, the seconds per iteration), which the fast path adds a run of decode
iterations at a time: they agree to 1e-9. Wall-clock columns are left out.
"""

from pathlib import Path

import pandas as pd
import pytest

from paged.experiments.notebook.kernel import execute_notebook
from paged.experiments.notebook.quick import QUICK_PARAMETERS

ROOT = Path(__file__).resolve().parents[2]
#: The notebooks whose figures come from the simulator's cost-model runs (the fast path's users).
SIMULATING = ("02_sharing", "03_throughput", "06_today")
#: Columns summed over busy seconds, equal to 1e-9 relative; and wall-clock columns, not compared.
SUMMED = ("time_avg_batched_requests", "seconds_per_iteration")
WALL = ("sim_wall_seconds",)
#: Columns timed on the real engine's wall clock (notebook 02 runs the engine beside the simulator).
ENGINE_WALL = {"prefix_caching_engine": ("seconds", "prefill_seconds")}


def _figure_data(name: str, tmp_path: Path, fast: bool, monkeypatch) -> dict[str, pd.DataFrame]:
    monkeypatch.setenv("PAGED_SIM_FAST", "1" if fast else "0")  # read by the kernel when it imports paged
    figures = tmp_path / ("fast" if fast else "reference")
    execute_notebook(ROOT / "notebooks" / f"{name}.ipynb", tmp_path / f"{name}-{figures.name}.ipynb",
                     {**QUICK_PARAMETERS[name], "output_dir": str(figures)})
    return {p.stem: pd.read_csv(p) for p in sorted(figures.glob("*.csv"))}


@pytest.mark.slow
@pytest.mark.parametrize("name", SIMULATING)
def test_the_fast_path_off_gives_the_same_figures(name, tmp_path, monkeypatch):
    fast = _figure_data(name, tmp_path, True, monkeypatch)
    reference = _figure_data(name, tmp_path, False, monkeypatch)
    assert fast and fast.keys() == reference.keys()
    for stem, table in fast.items():
        other = reference[stem]
        assert list(table.columns) == list(other.columns), stem
        for column in table.columns:
            if column in WALL or "wall" in column or column in ENGINE_WALL.get(stem, ()):
                continue
            if column in SUMMED:
                pd.testing.assert_series_equal(table[column], other[column], rtol=1e-9, check_exact=False,
                                               obj=f"{stem}.{column}")
            else:
                pd.testing.assert_series_equal(table[column], other[column], check_exact=True,
                                               obj=f"{stem}.{column}")
