"""``make report``: one self-contained HTML file from the executed notebooks (nbconvert).

The report is one notebook assembled from the executed ones and rendered by nbconvert's HTML
exporter (the JupyterLab template), code hidden:

0. **What it was built from**: the commit, and which code files (if any) differ from it (the files a
   run regenerates, ``figures/``, ``build/`` and README.md's claims table, are not code); the
   parameters each notebook ran with; whether the figure folder holds these runs' figures
   (:func:`paged.experiments.notebook.manifest.manifest_problems`, the runs' fingerprints);
1. **Claims**: the paper's claims beside this run's numbers (README.md's table, computed from the
   figure folder's CSVs: :func:`paged.experiments.notebook.claims.claims_table`), linked to the
   figures and notebooks below;
2. **Figures**: every figure's paper number and one-line claim (from the figures' output metadata);
3. **Paper vs this run**: the section of that name of each notebook (its prose and tables);
4. each notebook in full: prose, tables and figures, without its code and progress bars.

Every anchor is unique (the notebooks' sections share names such as "Paper vs this run"), and
tables wrap between words, left-aligned.

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

__all__ = ["build_report", "report_notebook", "unique_ids", "REGENERATED"]


_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{% block extra_css %}{{ super() }}<style>{{ resources.paged_table_css }}
.jp-RenderedHTMLCommon.jp-RenderedHTMLCommon table td, .jp-RenderedHTMLCommon.jp-RenderedHTMLCommon table th {
  text-align: left; white-space: normal; vertical-align: top; overflow-wrap: normal; word-break: normal;}
.jp-RenderedHTMLCommon table {table-layout: auto; max-width: 100%;}
</style>{% endblock extra_css %}
{% block data_png scoped %}
{%- set info = output.metadata.get('paged_figure') or {} -%}
{%- set width = output | get_metadata('width', 'image/png') -%}
<div class="jp-RenderedImage jp-OutputArea-output {{ extra_class }}"{% if info.get('name') %} id="figure-{{ info['name'] | escape_html }}"{% endif %}>
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


def _run_parameters(path: Path, nb) -> str:
    """How a notebook ran: "its defaults" or the parameters that differ from them (``output_dir`` aside)."""
    from paged.experiments.notebook.execute import notebook_defaults

    given = nb.metadata.get("papermill", {}).get("parameters", {})
    try:
        defaults = notebook_defaults(path)
    except (OSError, ValueError):
        defaults = {}
    changed = {k: v for k, v in sorted(given.items()) if k != "output_dir" and defaults.get(k, object()) != v}
    return ", ".join(f"`{k}={v!r}`" for k, v in changed.items()) or "its defaults"


def _figures_state(books, figures: Path) -> str:
    """One paragraph: whether ``figures`` holds the figures these notebooks made (their files as the
    manifest records them, and each entry carrying the fingerprint of one of these runs)."""
    from paged.experiments.notebook.manifest import MANIFEST_NAME, manifest_problems, read_manifest

    if not (figures / MANIFEST_NAME).is_file():
        return f"`{figures}/` has no {MANIFEST_NAME}: the figures' provenance is unknown."
    manifest = read_manifest(figures)
    problems = manifest_problems(figures, manifest)
    runs = {nb.metadata.get("paged", {}).get("fingerprint") for _, nb in books} - {None}
    shown = {info["name"] for _, nb in books for info in figure_outputs(nb)}
    foreign = sorted(f["name"] for f in manifest["figures"] if f["name"] in shown and f.get("fingerprint") not in runs)
    text = f"`{figures}/` holds {len(manifest['figures'])} figures"
    if not problems and not foreign:
        return text + f" whose files are those {MANIFEST_NAME} describes, each made by one of these runs."
    notes = []
    if not runs:
        notes.append("these notebooks were not run by `make reproduce` (their executed copies carry no run fingerprint), "
                     f"so which run made each figure rests on {MANIFEST_NAME}'s entries alone")
        foreign = []
    if foreign:
        notes.append(f"{len(foreign)} of the figures shown here were saved by another run than the notebook shown "
                     f"({', '.join(f'`{n}`' for n in foreign[:5])}{', ...' if len(foreign) > 5 else ''}); "
                     "`make reproduce` reruns their notebooks")
    if problems:
        notes.append(f"{len(problems)} file(s) disagree with {MANIFEST_NAME}: " + "; ".join(problems[:3]))
    return text + ". " + ". ".join(notes) + "."


def _claims_section(figures: Path | None) -> str:
    """This run's claims table (README.md's, from ``figures``' CSVs), its links pointing inside the
    report; a claim whose CSV lacks its rows (a small run) says so in its row."""
    from paged.experiments.notebook.claims import CLAIMS, claims_table

    if figures is None:
        return "## Claims\n\nNo figure folder given: this run's numbers are in each notebook's table below."
    lines = []
    for claim in CLAIMS:
        try:
            line = claims_table(figures, claims=[claim]).splitlines()[-1]
        except (OSError, KeyError, ValueError, IndexError):  # a small run: the CSV lacks the claim's rows
            line = f"| {claim.claim} | {claim.notebook} · {claim.figure} | {claim.paper} | — (not in this run's figures) |"
        lines.append(re.sub(r"\|\s*\|$", "| — |", line))  # an empty cell reads as missing
    table = "\n".join(["| paper claim | notebook · figure | paper | this run |", "| --- | --- | --- | --- |", *lines])
    table = re.sub(r"\]\(notebooks/([\w.-]+)\.ipynb\)", r"](#notebook-\1)", table)
    table = re.sub(r"\]\(figures/([\w.-]+)\.png\)", r"](#figure-\1)", table)
    return ("## Claims\n\nEach of the paper's claims beside this run's number, computed from the CSV files of "
            f"`{figures}/` (the table README.md carries, `python -m paged claims`).\n\n" + table)


def report_notebook(notebooks, *, title: str = "PagedAttention reproduction: report", root: str | Path = ".",
                    figures: str | Path | None = None):
    """The report (module docstring) as one ``nbformat`` notebook, from executed notebook paths
    (``root``: the git work tree whose commit the report names; ``figures``: the folder the runs'
    figures went to, for this run's claims table and the figures' provenance).

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
    elif state["changed"]:
        more = len(state["changed"]) - 5
        code = (f"commit `{state['commit'][:12]}`, with uncommitted changes to "
                + ", ".join(f"`{c}`" for c in state["changed"][:5]) + (f" and {more} more files" if more > 0 else ""))
    else:
        code = f"commit `{state['commit'][:12]}`, the code as committed"
    changed = [(p.stem, _run_parameters(p, nb)) for p, nb in books]
    changed = [(stem, how) for stem, how in changed if how != "its defaults"]
    ran = ("Every notebook ran with its default parameters" if not changed else
           "; ".join(f"{stem} with {how}" for stem, how in changed) + "; "
           + ("the others with their defaults" if len(changed) < len(books) else "none with its defaults"))
    header = [f"# {title}", "",
              f"Built from {len(books)} executed notebooks at {code} (what a run regenerates, `figures/`, `build/` and "
              "README.md's claims table, is not code). Every number below comes from those runs.", "",
              f"**Parameters.** {ran}."]
    if figures is not None:
        header += ["", f"**Figures.** {_figures_state(books, Path(figures))}"]
    cells = [_cell("\n".join(header)), _cell(_claims_section(None if figures is None else Path(figures)))]
    figure_rows = []
    for path, nb in books:
        for info in figure_outputs(nb):
            label = f"Fig. {info['number']}" if info.get("number") else info.get("section") or "—"
            figure_rows.append(f"| {label} | [{_one_line(info.get('claim') or info['name'])}](#figure-{info['name']}) | "
                               f"`{info['name']}` | [{path.stem}](#notebook-{path.stem}) |")
    cells.append(_cell("## Figures\n\n| paper | what it shows | file | notebook |\n| --- | --- | --- | --- |\n"
                       + ("\n".join(figure_rows) or "| — | no figure found | | |")))
    cells.append(_cell("## Paper vs this run"))
    for path, nb in books:
        section = _paper_section(nb)
        if section:
            cells += [_cell(f"### {_title(nb, path)}"), *section]
    for path, nb in books:
        cells.append(_cell(f"---\n\n<a id=\"notebook-{path.stem}\"></a>*From `{path.name}`, run with "
                           f"{_run_parameters(path, nb)}.*"))
        cells += [_clean(cell) for cell in nb.cells]
    for i, cell in enumerate(cells):
        cell["id"] = f"report-{i}"  # the merged notebooks' ids collide
    report = nbformat.v4.new_notebook(cells=cells)
    report.metadata = {"kernelspec": books[0][1].metadata.get("kernelspec", {}), "language_info": {"name": "python"},
                       "title": title}
    return report


_ID = re.compile(r'\bid="([^"]*)"')


def unique_ids(html: str) -> str:
    """``html`` with every repeated ``id`` made unique (``-2``, ``-3``, ... in document order); a
    heading's own ``¶`` link (``href="#id"`` before its closing tag) follows its heading's new id."""
    seen: dict[str, int] = {}
    out, pos = [], 0
    for match in _ID.finditer(html):
        name = match.group(1)
        seen[name] = seen.get(name, 0) + 1
        if seen[name] == 1:
            continue
        new = f"{name}-{seen[name]}"
        while new in seen:
            seen[name] += 1
            new = f"{name}-{seen[name]}"
        seen[new] = 1
        out.append(html[pos:match.start()])
        out.append(f'id="{new}"')
        pos = match.end()
        close = html.find("</h", pos)  # the heading's anchor link, if this id is a heading's
        link = html.find(f'href="#{name}"', pos)
        if 0 <= link < close and html[match.start() - 4:match.start()].lstrip().startswith("<h"):
            out.append(html[pos:link])
            out.append(f'href="#{new}"')
            pos = link + len(f'href="#{name}"')
    out.append(html[pos:])
    return "".join(out)


def build_report(notebooks, out: str | Path, *, title: str = "PagedAttention reproduction: report",
                 root: str | Path = ".", figures: str | Path | None = None) -> Path:
    """Write the report of the executed ``notebooks`` to ``out`` (one HTML file; ``figures``: the
    folder their figures went to, as :func:`report_notebook`). Returns the path.

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
    html = unique_ids(html)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, html)  # atomically: an interrupted build leaves the old report
    return out
