"""Progress of long steps (paged.experiments.notebook.progress, through run_jobs): in an executed
notebook, one bar per step whose saved text is its last frame, none inside another step or in a
worker process; a worker's printed output and warnings come back to the caller, once each."""

import warnings

import nbformat
import pytest

from paged.experiments.notebook.kernel import execute_notebook
from paged.experiments.notebook.outputs import output_problems
from paged.experiments.notebook.sweep import parameter_grid, run_jobs

WIDGET = "application/vnd.jupyter.widget-view+json"

_CELLS = [
    # One step of 5 jobs, each a nested step of its own (in this process): one bar, 5/5.
    "from paged.experiments.notebook.sweep import run_jobs, parameter_grid\n"
    "def nested(spec):\n"
    "    return run_jobs(parameter_grid, [{'spec': spec}] * 3, workers=1, desc='inner')\n"
    "_ = run_jobs(nested, [{'spec': {'a': [i]}} for i in range(5)], workers=1, desc='outer')",
    # Jobs in worker processes that run steps of their own: one bar here, none from the workers.
    "from paged.experiments import serving\n"
    "_ = serving.sustained_rate(['paged', 'orca-max'], num_requests=20, saturated_requests=20, lo=0.5, rel_tol=0.3,\n"
    "                           workers=2)",
    # A step of one job: no bar.
    "_ = run_jobs(parameter_grid, [{'spec': {'a': 1}}], workers=1, desc='one')",
]


@pytest.mark.slow
def test_an_executed_notebook_keeps_one_finished_bar_per_step(tmp_path):
    path = tmp_path / "progress.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in _CELLS],
                                            metadata={"language_info": {"name": "python"}}), path)
    nb = execute_notebook(path, path, cwd=tmp_path)
    assert output_problems(nb) == []
    bars = [[o["data"]["text/plain"] for o in cell.outputs if WIDGET in o.get("data", {})] for cell in nb.cells]
    assert len(bars[0]) == 1 and bars[0][0].startswith("outer: 100%|") and "5/5" in bars[0][0]
    assert len(bars[1]) == 1 and bars[1][0].startswith("sustained rate: 100%|") and "2/2" in bars[1][0]
    assert bars[2] == []
    assert all(o["output_type"] != "stream" for cell in nb.cells for o in cell.outputs)


def test_worker_output_and_warnings_come_back_in_order_once_each(capsys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        run_jobs(print, [{"end": f"job {i}\n"} for i in range(4)], workers=2)
        run_jobs(warnings.warn, [{"message": m, "category": UserWarning} for m in ("careful", "careful", "other")],
                 workers=2)
    assert capsys.readouterr().out == "job 0\njob 1\njob 2\njob 3\n"
    assert sorted(str(w.message) for w in caught) == ["careful", "other"]


def test_results_keep_the_order_of_the_jobs_in_and_out_of_process():
    jobs = [{"spec": {"a": [i]}} for i in range(5)]
    assert run_jobs(parameter_grid, jobs, workers=2) == run_jobs(parameter_grid, jobs, workers=1) == \
        [[{"a": i}] for i in range(5)]
