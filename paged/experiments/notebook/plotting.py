"""One figure style for every notebook; figures titled for a report, shown in their cell and saved.

* :func:`save_figure` writes ``NAME.png``, ``NAME.pdf`` and ``NAME.csv`` with fixed metadata, so a
  rerun with the same inputs rewrites them byte for byte. Inside a Jupyter kernel (JupyterLab,
  papermill) it also displays the saved PNG in the cell, so executed notebooks hold every figure.
* :func:`title_figure` titles a figure with its paper figure number and a one-line claim
  ("Fig. 2 · KV cache memory by use, ShareGPT, OPT-13B / 12 GiB"), so a figure pasted into a
  report says what it shows.
* :func:`mark_computed` marks bars or lines whose values are computed (from a formula or another
  measurement) rather than measured, with a hatch and a legend entry.
* :func:`show_figure` displays a figure in a cell, or updates an earlier display in place (the
  interactive explorers of ``notebooks/00_tour.ipynb``).

Backend: outside a kernel matplotlib is switched to the headless Agg backend; inside one the
kernel's own backend (inline) is kept. ``matplotlib.use("Agg", force=False)`` would switch the
backend in a kernel too (``force`` only silences errors), so :func:`in_kernel` decides instead.

Provenance (notebook, parameters, code, environment, file hashes) is kept out of the image files,
which stay byte-stable: each saved figure's entry in its folder's ``MANIFEST.json``
(:mod:`paged.experiments.notebook.manifest`), and the displayed PNG's output metadata
(:data:`FIGURE_METADATA_KEY`), which the report reads.
"""

from __future__ import annotations

import io
import sys
import textwrap
from pathlib import Path

import matplotlib


def in_kernel() -> bool:
    """True inside a Jupyter kernel (JupyterLab, papermill, nbclient), False in a script or a
    terminal IPython: IPython is running with a kernel attached. Imports nothing new."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return shell is not None and getattr(shell, "kernel", None) is not None


if not in_kernel():
    matplotlib.use("Agg")  # headless outside a kernel; a kernel keeps its inline backend

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.layout_engine import ConstrainedLayoutEngine  # noqa: E402

from paged.atomic import atomic_path  # noqa: E402
from paged.experiments.notebook.manifest import FIGURE_METADATA_KEY  # noqa: E402
from paged.experiments.notebook.provenance import FILE_RC, FONT_FAMILY, pinned_font  # noqa: E402

__all__ = ["use_style", "pinned_font", "FONT_FAMILY", "FILE_RC", "SavedFigure", "save_figure", "title_figure", "figure_title", "mark_computed", "show_figure",
           "figure_png", "figure_metadata", "in_kernel", "SYSTEM_COLORS", "COMPUTED_LABEL", "FIGURE_METADATA_KEY"]

#: One colour per serving system, the same in every figure.
SYSTEM_COLORS = {
    "paged": "#1b7837",
    "orca-oracle": "#2166ac",
    "orca-pow2": "#67a9cf",
    "orca-max": "#b2182b",
    "fastertransformer": "#8c510a",
}

#: Legend text of values that are computed, not measured (:func:`mark_computed`).
COMPUTED_LABEL = "computed, not measured"
_COMPUTED_HATCH = "///"


def use_style() -> None:
    """The project's seaborn style (white grid, paper context, colour-blind palette) in the pinned
    font (:data:`FONT_FAMILY`, mathtext too); PDFs embed TrueType fonts (``pdf.fonttype`` 42), not
    Type 3, which many publishers' checks reject. In a kernel, DataFrames display as whole,
    left-aligned tables (:func:`~paged.experiments.notebook.tables.use_table_format`)."""
    from paged.experiments.notebook.tables import use_table_format

    use_table_format()
    sns.set_theme(context="paper", style="whitegrid", palette="colorblind", font_scale=1.1)
    plt.rcParams.update({"figure.dpi": 110, **FILE_RC, "font.family": "sans-serif", "font.sans-serif": [FONT_FAMILY],
                         "mathtext.fontset": "dejavusans"})


def figure_title(claim: str, number: str | int | None = None, *, section: str | None = None) -> str:
    """``"Fig. {number} · {claim}"``; ``"{section} · {claim}"`` for a mechanism the paper shows
    without a figure number (e.g. ``section="§4.5"``); the claim alone when neither is given.

    Raises:
        ValueError: if ``claim`` is empty or not one line.
    """
    if not isinstance(claim, str) or not claim.strip() or "\n" in claim:
        raise ValueError(f"a figure claim must be one non-empty line, got {claim!r}")
    label = f"Fig. {number}" if number is not None else section
    return f"{label} · {claim.strip()}" if label else claim.strip()


def title_figure(fig: Figure, claim: str, number: str | int | None = None, *, section: str | None = None) -> Figure:
    """Title ``fig`` with :func:`figure_title` (a suptitle, wrapped to the figure's width) and
    redo a tight layout (unless the figure uses constrained layout) so the title does not cover
    the axes. Returns ``fig``.

    Raises:
        ValueError: as :func:`figure_title`.
    """
    text = figure_title(claim, number, section=section)
    width = max(40, int(fig.get_figwidth() * 13))  # characters per line at the suptitle's size
    fig.suptitle("\n".join(textwrap.wrap(text, width)), fontsize="medium", fontweight="bold")
    if not isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
        fig.tight_layout()  # constrained layout makes room for a suptitle by itself
    return fig


def mark_computed(ax, artists, label: str = COMPUTED_LABEL) -> list:
    """Mark ``artists`` (bars, patches or lines of ``ax``) as computed rather than measured:
    patches get a hatch and a lighter face, lines a dashed style with open markers, and the legend
    of ``ax`` gains one ``label`` entry. Returns the artists.

    Raises:
        TypeError: for an artist that is neither a patch nor a line.
    """
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    artists = list(artists)
    for artist in artists:
        if isinstance(artist, Patch):
            artist.set_hatch(_COMPUTED_HATCH)
            artist.set_alpha(0.55)
            artist.set_edgecolor("0.25")
        elif isinstance(artist, Line2D):
            artist.set_linestyle("--")
            artist.set_markerfacecolor("none")
        else:
            raise TypeError(f"mark_computed marks patches or lines, got {type(artist).__name__}")
    handles, labels = ax.get_legend_handles_labels()
    if label not in labels:
        handles.append(Patch(facecolor="white", edgecolor="0.25", hatch=_COMPUTED_HATCH, label=label))
        ax.legend(handles=handles, fontsize=8)
    return artists


def figure_png(fig: Figure) -> bytes:
    """``fig`` as PNG bytes, with the same fixed metadata as the saved files."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def _image(png: bytes):
    """An IPython Image of ``png`` shown at the figure's screen size (``figure.dpi``), not the
    saved file's pixel size (``savefig.dpi``)."""
    from IPython.display import Image

    width = int.from_bytes(png[16:20], "big")  # PNG IHDR: width in pixels
    saved, screen = plt.rcParams["savefig.dpi"], plt.rcParams["figure.dpi"]
    scale = screen / saved if isinstance(saved, (int, float)) and saved > 0 else 1.0
    return Image(data=png, format="png", width=max(1, round(width * scale)))


def show_figure(fig: Figure | bytes, *, handle=None, metadata: dict | None = None):
    """Display ``fig`` (a Figure, or PNG bytes) in the current cell, or replace the display
    ``handle`` returned by an earlier call (an explorer's figure, redrawn when a slider moves).

    Returns:
        The IPython ``DisplayHandle`` (pass it back as ``handle`` to update in place).
    """
    from IPython.display import display

    image = _image(fig if isinstance(fig, bytes) else figure_png(fig))
    if handle is not None:
        handle.update(image, metadata=metadata or {})
        return handle
    return display(image, metadata=metadata or {}, display_id=True)


class SavedFigure(dict):
    """``{"png": path, "pdf": path, "csv": path}`` of a saved figure, with the PNG's bytes as
    ``png_bytes`` (the files may still be staged for a runner's commit when the call returns)."""

    png_bytes: bytes = b""


def save_figure(fig: Figure, data: pd.DataFrame, name: str, output_dir: str | Path = "figures", *,
                number: str | int | None = None, claim: str | None = None, section: str | None = None,
                show: bool | None = None) -> SavedFigure:
    """Save ``fig`` as PNG and PDF and ``data`` as CSV under ``output_dir``, with the figure's
    manifest entry; in a kernel, show it.

    Metadata that would change between runs (creation dates, software versions in PNG text)
    is fixed or dropped, and the font is pinned (:func:`use_style`), so identical inputs give
    identical bytes. The three files and the entry in ``output_dir/MANIFEST.json`` (name, claim,
    the notebook's parameters, what ran it, code and environment digests, the files' SHA-256)
    change together (:mod:`paged.experiments.notebook.figure_set`): an interrupted save leaves the
    old set and its entry, or the new set and its entry. When a runner
    (:func:`paged.experiments.notebook.execute.run_notebook`) stages this folder, the files go to its
    staging folder and appear with the rest of the notebook's figures when the notebook ends.

    Args:
        fig: a matplotlib Figure.
        data: the numbers the figure plots (one row per plotted point or bar).
        name: file stem, e.g. ``"fig02_memory_waste"``.
        output_dir: folder, created if missing.
        number, claim, section: when ``claim`` is given, the figure is titled first
            (:func:`title_figure`); all three also go into the display metadata, for the report.
        show: display the saved PNG in the cell and close ``fig`` (so the inline backend does not
            show it a second time). None: only inside a Jupyter kernel (:func:`in_kernel`);
            outside one the figure stays open for the caller.

    Returns:
        The :class:`SavedFigure` (``{"png": path, "pdf": path, "csv": path}`` in ``output_dir``).

    Raises:
        ValueError: if ``name`` is empty or contains a path separator, or the claim is not one line.
    """
    from paged.experiments.notebook import figure_set
    from paged.experiments.notebook.parameters import checked_parameters
    from paged.experiments.notebook.provenance import run_context

    if not name or "/" in name or "\\" in name:
        raise ValueError(f"figure name must be a plain file stem, got {name!r}")
    if claim is not None:
        title_figure(fig, claim, number, section=section)
    out = Path(output_dir)
    context = run_context()
    by_runner = bool(context and context.get("staging") and _same_folder(out, context.get("target")))
    staging = Path(context["staging"]) if by_runner else figure_set.new_staging(out, name)
    staged = {ext: staging / f"{name}.{ext}" for ext in ("png", "pdf", "csv")}
    try:
        with atomic_path(staged["png"]) as tmp:
            fig.savefig(tmp, format="png", metadata={"Software": None})
        with atomic_path(staged["pdf"]) as tmp, plt.rc_context({"pdf.fonttype": 42}):  # TrueType, never Type 3
            fig.savefig(tmp, format="pdf", metadata={"CreationDate": None, "ModDate": None, "Producer": None,
                                                     "Creator": None})
        with atomic_path(staged["csv"]) as tmp:
            data.to_csv(tmp, index=False, float_format="%.6g", lineterminator="\n")
        png = staged["png"].read_bytes()
        figure_set.stage_entry(staging, {"name": name, "number": None if number is None else str(number),
                                         "claim": claim, "section": section, "parameters": checked_parameters(),
                                         "files": {ext: {"path": path.name} for ext, path in staged.items()}})
        if not by_runner:
            provenance, environments = _provenance_outside_runner()
            figure_set.commit(staging, out, provenance=provenance, environments=environments)
    finally:
        if not by_runner:
            figure_set.discard(staging)
    paths = SavedFigure({ext: out / f"{name}.{ext}" for ext in ("png", "pdf", "csv")})
    paths.png_bytes = png
    if in_kernel() if show is None else show:
        show_figure(png, metadata=figure_metadata(name, paths, number, claim, section))
        plt.close(fig)
    return paths


def _same_folder(a: str | Path, b: str | Path | None) -> bool:
    return b is not None and Path(a).resolve() == Path(b).resolve()


def _provenance_outside_runner() -> tuple[dict, dict]:
    """Provenance of a figure saved where no runner stages the folder (JupyterLab, plain papermill, a
    script): ``run`` "interactive" (a Jupyter server's kernel, whose notebook is known) or "kernel"
    or "script", no fingerprint, the digest of the ``paged`` files loaded in this process, the
    environment and the checkout's git state. Returns ``(provenance, {environment key: environment})``."""
    import os

    from paged.experiments.notebook.manifest import git_state
    from paged.experiments.notebook.provenance import PACKAGE_ROOT, digest, environment, environment_digest

    session = os.environ.get("JPY_SESSION_NAME")
    loaded = sorted({Path(m.__file__).resolve() for name, m in list(sys.modules.items())
                     if (name == "paged" or name.startswith("paged.")) and getattr(m, "__file__", None)})
    code = digest([[p.relative_to(PACKAGE_ROOT.parent).as_posix(), digest(p.read_bytes())] for p in loaded
                   if p.is_file() and p.is_relative_to(PACKAGE_ROOT.parent)])
    env = environment()
    key = environment_digest(env)
    state = git_state(PACKAGE_ROOT.parent)
    provenance = {"run": "interactive" if session else "kernel" if in_kernel() else "script",
                  "notebook": Path(session).stem if session else None, "fingerprint": None, "code": code,
                  "environment": key, "commit": state["commit"], "dirty": state["dirty"]}
    return provenance, {key: env}


def figure_metadata(name: str, paths: dict[str, Path], number=None, claim=None, section=None, **extra) -> dict:
    """The display metadata of a saved figure's PNG output: ``{FIGURE_METADATA_KEY: {name, number,
    claim, section, files (extension → file name), parameters (the notebook's checked
    parameters), **extra}}``; :mod:`paged.experiments.notebook.report` reads it from executed notebooks."""
    from paged.experiments.notebook.parameters import checked_parameters

    return {FIGURE_METADATA_KEY: {"name": name, "number": None if number is None else str(number), "claim": claim,
                                  "section": section, "files": {ext: path.name for ext, path in paths.items()},
                                  "parameters": checked_parameters(), **extra}}
