"""What an executed notebook must not hold: the check that it reads like a finished paper section.

An executed notebook (``build/notebooks/``, ``build/quick/``, a sweep's runs) is read by people in
JupyterLab, on GitHub and in the report. :func:`output_problems` lists every output that would
look broken there:

* **stderr**: a stream output on stderr (warnings, a worker process's lines, a third-party
  progress bar drawn as text);
* **unfinished progress bars**: a bar whose saved text stopped short of its total
  (``0%| | 0/28``, ``Loading weights: 0%``, ``0it [00:00, ?it/s]``), as a widget's text or as text;
* **stray reprs**: a cell's value shown only as a Python repr nobody meant to show
  (``{'png': PosixPath(...)}``, ``<Figure size 640x480 with 1 Axes>``, ``<... object at 0x...>``;
  a value with a rich view, a table or an image, is meant), and a widget whose text form (what a
  viewer without a kernel shows) is its raw repr (``HBox(children=(IntSlider(...``);
* **errors**: an error output.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

__all__ = ["output_problems"]

#: tqdm's meter: "desc:  42%|████      | 5/12 [..." (percentage, count and total).
_BAR = re.compile(r"(\d+)%\|[^|]*\|\s*(\d+(?:\.\d+)?[kMG]?)/(\d+(?:\.\d+)?[kMG]?)")
#: tqdm's meter without a total that counted nothing: "desc: 0it [00:00, ?it/s]".
_EMPTY_BAR = re.compile(r"(?:^|:\s)0(?:it|[a-zA-Z]+) \[\d")
#: A widget's raw repr: what JupyterLab shows for a saved widget output without a kernel.
_WIDGET_REPR = re.compile(r"^\s*[A-Z]\w*\((?:children|value|description|layout|options|style)=")
_WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
#: Reprs of values a cell returned by accident.
_STRAY = re.compile(r"PosixPath\(|WindowsPath\(|<Figure size \d|<matplotlib\.[\w.]+ object at 0x| object at 0x[0-9a-f]+>")


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


def _unfinished(text: str) -> bool:
    for match in _BAR.finditer(text):
        percent, done, total = match.groups()
        if int(percent) < 100 or done != total:
            return True
    return bool(_EMPTY_BAR.search(text))


def output_problems(notebook) -> list[str]:
    """Every output of ``notebook`` (a path or an ``nbformat`` node) that an executed notebook must
    not hold (see the module doc), as ``"cell N: what: text"`` lines; ``[]`` for a clean notebook.

    Cells are numbered from 0 among all cells, as nbformat counts them. Cost: one pass over the outputs.
    """
    if isinstance(notebook, (str, Path)):
        notebook = nbformat.read(str(notebook), as_version=4)
    problems = []
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            kind = output.get("output_type")
            if kind == "stream":
                text = _text(output.get("text"))
                if output.get("name") == "stderr":
                    problems.append(f"cell {index}: stderr: {text.strip()[:200]}")
                elif _unfinished(text):
                    problems.append(f"cell {index}: unfinished progress bar: {text.strip()[:200]}")
            elif kind == "error":
                problems.append(f"cell {index}: error: {output.get('ename')}: {_text(output.get('evalue'))[:200]}")
            elif kind in ("display_data", "execute_result"):
                data = output.get("data", {})
                text = _text(data.get("text/plain"))
                if _unfinished(text):
                    problems.append(f"cell {index}: unfinished progress bar: {text.strip()[:200]}")
                elif _WIDGET_VIEW in data and _WIDGET_REPR.search(text):
                    problems.append(f"cell {index}: raw widget repr: {text.strip()[:200]}")
                elif kind == "execute_result" and set(data) == {"text/plain"} and _STRAY.search(text):
                    problems.append(f"cell {index}: stray repr: {text.strip()[:200]}")
    return problems
