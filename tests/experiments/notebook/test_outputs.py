"""The clean-output check of executed notebooks (paged.experiments.notebook.outputs), on made-up outputs."""

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from paged.experiments.notebook.outputs import output_problems

WIDGET = {"application/vnd.jupyter.widget-view+json": {"model_id": "abc", "version_major": 2, "version_minor": 0}}


def _notebook(*outputs):
    return new_notebook(cells=[new_markdown_cell("# A section"), new_code_cell("x", outputs=list(outputs))])


def test_a_finished_notebook_is_clean():
    nb = _notebook(
        new_output("stream", name="stdout", text="hit rate 66.4%\n"),
        new_output("display_data", data={**WIDGET, "text/plain": "Fig. 14 sweep: 100%|██████████| 12/12 [00:03<00:00]"}),
        new_output("display_data", data={"image/png": "iVBOR", "text/plain": "<Figure size 640x480 with 1 Axes>"}),
        new_output("execute_result", data={"text/html": "<table/>", "text/plain": "   a\n0  1"}, execution_count=1),
        new_output("display_data", data={"text/markdown": "**x**", "text/plain": "<IPython.core.display.Markdown object>"}),
    )
    assert output_problems(nb) == []


def test_stderr_unfinished_bars_stray_reprs_and_errors_are_named(tmp_path):
    nb = _notebook(
        new_output("stream", name="stderr", text="sustained rate: 100%|██████████| 1/1\n"),
        new_output("display_data", data={**WIDGET, "text/plain": "Fig. 14 sweep:   0%|          | 0/28 [00:00<?, ?it/s]"}),
        new_output("display_data", data={**WIDGET, "text/plain": "Loading weights:  50%|█████     | 2/4 [00:01<00:01]"}),
        new_output("display_data", data={**WIDGET, "text/plain": "Fig. 13: 0it [00:00, ?it/s]"}),
        new_output("stream", name="stdout", text="\rsweep:  10%|█         | 1/10 [00:01<00:09]"),
        new_output("execute_result", data={"text/plain": "{'png': PosixPath('figures/a.png')}"}, execution_count=1),
        new_output("execute_result", data={"text/plain": "<paged.engine.llm.LLM object at 0x7f00aa>"}, execution_count=2),
        new_output("error", ename="ValueError", evalue="bad", traceback=[]),
    )
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    problems = output_problems(path)
    kinds = [p.split(": ")[1] for p in problems]
    assert kinds == ["stderr", "unfinished progress bar", "unfinished progress bar", "unfinished progress bar",
                     "unfinished progress bar", "stray repr", "stray repr", "error"]
    assert all(p.startswith("cell 1: ") for p in problems)
    assert "0/28" in problems[1] and "PosixPath" in problems[5]


def test_a_widget_saved_as_its_raw_repr_is_named():
    raw = "HBox(children=(IntSlider(value=3, description='prompt tokens', max=15, min=1),), layout=Layout(flex_flow='row wrap'))"
    readable = "Controls (live with a running kernel): prompt tokens = 3. The figure below is drawn at these values."
    assert [p.split(": ")[1] for p in output_problems(_notebook(new_output("display_data", data={**WIDGET, "text/plain": raw})))] \
        == ["raw widget repr"]
    assert output_problems(_notebook(new_output("display_data", data={**WIDGET, "text/plain": readable}))) == []
