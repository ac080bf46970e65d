"""``make report``: one self-contained HTML file from the executed notebooks (nbconvert).

The report is one notebook assembled from the executed ones and rendered by nbconvert's HTML
exporter (the JupyterLab template), code hidden:

1. **Claims**: each notebook's claim (its first paragraph starting ``**Claim.**``);
2. **Figures**: every figure's paper number and one-line claim (from the figures' output metadata);
3. **Paper vs this run**: the section of that name of each notebook (its prose and tables);
4. each notebook in full: prose, tables and figures, without its code and progress bars.

Self-contained: images are embedded as ``data:`` URIs, the stylesheets are inlined, and the
template's scripts fetched from the web (require.js, MathJax, Mermaid, the widget manager) are left
out, so the file opens offline, sent by mail or attached to an issue. Widgets (the tour's sliders)
need a kernel and are dropped; their figures, saved at the default state, stay.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

from paged.atomic import write_text
from paged.experiments.notebook.manifest import REGENERATED, figure_outputs, git_state

__all__ = ["build_report", "report_notebook", "REGENERATED"]


_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{% block extra_css %}{{ super() }}<style>{{ resources.paged_table_css }}
.jp-RenderedHTMLCommon table td, .jp-RenderedHTMLCommon table th {text-align: left; white-space: normal; vertical-align: top;}
</style>{% endblock extra_css %}
{% block data_png scoped %}
{%- set info = output.metadata.get('paged_figure') or {} -%}
{%- set width = output | get_metadata('width', 'image/png') -%}
<div class="jp-RenderedImage jp-OutputArea-output {{ extra_class }}">
<img src="data:image/png;base64,{{ output.data['image/png'] | escape_html }}" alt="{{ (info.get('claim') or info.get('name') or 'figure') | escape_html }}"
{%- if width is not none %} width="{{ width | escape_html }}"{% endif %}>
</div>
{%- endblock data_png %}
"""
_WIDGET = "application/vnd.jupyter.widget-view+json"
_HEADING = re.compile(r"^(#+)\s+(.*)", re.MULTILINE)


def _cell(text: str):
    import nbformat

    return nbformat.v4.new_markdown_cell(text)


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _claim(nb) -> str | None:
    """The notebook's first ``**Claim.**`` paragraph, on one line."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for paragraph in cell.source.split("\n\n"):
                if paragraph.lstrip().startswith("**Claim.**"):
                    return _one_line(paragraph.lstrip()[len("**Claim.**"):])
    return None


def _title(nb, path: Path) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            match = _HEADING.search(cell.source)
            if match:
                return match.group(2).strip()
    return path.stem


def _clean(cell):
    """A copy of ``cell`` without widget views, stderr streams (progress bars, warnings) or code."""
    cell = copy.deepcopy(cell)
    if cell.cell_type == "code":
        cell.outputs = [o for o in cell.outputs
                        if not (o.output_type == "stream" and o.get("name") == "stderr")
                        and _WIDGET not in o.get("data", {})]
    return cell


def _paper_section(nb) -> list:
    """The cells of the notebook's "Paper vs this run" section (to the next heading of its level)."""
    cells, level = [], None
    for cell in nb.cells:
        heading = _HEADING.match(cell.source) if cell.cell_type == "markdown" else None
        if heading and level is not None and len(heading.group(1)) <= level:
            break
        if heading and level is None and "paper vs this run" in heading.group(2).lower():
            level = len(heading.group(1))
            continue
        if level is not None:
            cells.append(_clean(cell))
    return cells


def report_notebook(notebooks, *, title: str = "PagedAttention reproduction: report", root: str | Path = ".",
                    figures: str | Path | None = None):
    """The report (module docstring) as one ``nbformat`` notebook, from executed notebook paths
    (``root``: the git work tree whose commit the report names).

    Raises:
        ValueError: if ``notebooks`` is empty.
        OSError: for a missing notebook file.
    """
    import nbformat

    paths = sorted(Path(p) for p in notebooks)
    if not paths:
        raise ValueError("no executed notebooks to report on (run `make reproduce` first)")
    books = [(path, nbformat.read(str(path), as_version=4)) for path in paths]
    state = git_state(root, ignore=REGENERATED)
    if state["commit"] is None:
        code = "an unknown commit (no git repository)"
    else:
        code = f"commit `{state['commit'][:12]}`, " + ("with uncommitted changes to the code" if state["dirty"] else
                                                       "the code as committed")
    cells = [_cell(f"# {title}\n\nBuilt from {len(books)} executed notebooks at {code} (files the runs regenerate, "
                   f"under {' and '.join(f'`{f}/`' for f in REGENERATED)}, are not counted as code). Every number "
                   "below comes from those runs; `figures/MANIFEST.json` lists each figure's parameters and file hashes.")]
    rows = [f"| {_title(nb, p)} | {_claim(nb) or '—'} |" for p, nb in books]
    cells.append(_cell("## Claims\n\n| notebook | claim (from the paper) |\n| --- | --- |\n" + "\n".join(rows)))
    figure_rows = []
    for path, nb in books:
        for info in figure_outputs(nb):
            label = f"Fig. {info['number']}" if info.get("number") else info.get("section") or "—"
            figure_rows.append(f"| {label} | {_one_line(info.get('claim') or info['name'])} | `{info['name']}` | {path.stem} |")
    cells.append(_cell("## Figures\n\n| paper | what it shows | file | notebook |\n| --- | --- | --- | --- |\n"
                       + ("\n".join(figure_rows) or "| — | no figure found | | |")))
    cells.append(_cell("## Paper vs this run"))
    for path, nb in books:
        section = _paper_section(nb)
        if section:
            cells += [_cell(f"### {_title(nb, path)}"), *section]
    for path, nb in books:
        params = nb.metadata.get("papermill", {}).get("parameters", {})
        shown = ", ".join(f"`{k}={v!r}`" for k, v in sorted(params.items())) or "the notebook's defaults"
        cells.append(_cell(f"---\n\n*From `{path.name}`, run with {shown}.*"))
        cells += [_clean(cell) for cell in nb.cells]
    for i, cell in enumerate(cells):
        cell["id"] = f"report-{i}"  # the merged notebooks' ids collide
    report = nbformat.v4.new_notebook(cells=cells)
    report.metadata = {"kernelspec": books[0][1].metadata.get("kernelspec", {}), "language_info": {"name": "python"},
                       "title": title}
    return report


def build_report(notebooks, out: str | Path, *, title: str = "PagedAttention reproduction: report",
                 root: str | Path = ".", figures: str | Path | None = None) -> Path:
    """Write the report of the executed ``notebooks`` to ``out`` (one HTML file). Returns the path.

    Raises:
        ValueError, OSError: as :func:`report_notebook`.
    """
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab", extra_loaders=[DictLoader({"paged_report.html.j2": _TEMPLATE})],
                            template_file="paged_report.html.j2", exclude_input=True, exclude_input_prompt=True,
                            exclude_output_prompt=True, embed_images=True)
    from paged.experiments.notebook.tables import TABLE_CSS

    html, _ = exporter.from_notebook_node(report_notebook(notebooks, title=title, root=root, figures=figures),
                                          resources={"metadata": {"name": title}, "paged_table_css": TABLE_CSS})
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, html)  # atomically: an interrupted build leaves the old report
    return out
