"""One figure style for every notebook, and saving a figure with the data behind it.

:func:`save_figure` writes ``NAME.png``, ``NAME.pdf`` and ``NAME.csv`` with fixed metadata, so
a rerun with the same inputs rewrites them byte for byte.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg", force=False)  # headless by default; notebooks keep their inline backend

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

__all__ = ["use_style", "save_figure", "SYSTEM_COLORS"]

#: One colour per serving system, the same in every figure.
SYSTEM_COLORS = {
    "paged": "#1b7837",
    "orca-oracle": "#2166ac",
    "orca-pow2": "#67a9cf",
    "orca-max": "#b2182b",
    "fastertransformer": "#8c510a",
}


def use_style() -> None:
    """The project's seaborn style (white grid, paper context, colour-blind palette)."""
    sns.set_theme(context="paper", style="whitegrid", palette="colorblind", font_scale=1.1)
    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "savefig.bbox": "tight",
                         "svg.hashsalt": "paged", "pdf.compression": 6})


def save_figure(fig, data: pd.DataFrame, name: str, output_dir: str | Path = "figures") -> dict[str, Path]:
    """Save ``fig`` as PNG and PDF and ``data`` as CSV under ``output_dir``.

    Metadata that would change between runs (creation dates, software versions in PNG text)
    is fixed or dropped, so identical inputs give identical bytes.

    Args:
        fig: a matplotlib Figure.
        data: the numbers the figure plots (one row per plotted point or bar).
        name: file stem, e.g. ``"fig02_memory_waste"``.
        output_dir: folder, created if missing.

    Returns:
        ``{"png": path, "pdf": path, "csv": path}``.

    Raises:
        ValueError: if ``name`` is empty or contains a path separator.
    """
    if not name or "/" in name or "\\" in name:
        raise ValueError(f"figure name must be a plain file stem, got {name!r}")
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {ext: out / f"{name}.{ext}" for ext in ("png", "pdf", "csv")}
    fig.savefig(paths["png"], metadata={"Software": None})
    fig.savefig(paths["pdf"], metadata={"CreationDate": None, "ModDate": None, "Producer": None,
                                        "Creator": None})
    data.to_csv(paths["csv"], index=False, float_format="%.6g", lineterminator="\n")
    return paths
