"""Tables in notebooks and the report: every cell whole, no NaN, no bare row-number column.

pandas' own HTML display cuts long text at 50 characters with "...", shows a missing value as
``NaN`` or ``None``, right-aligns every cell and leads with the row numbers of a default index.
:func:`table_html` writes a DataFrame instead as a table whose cells are whole (wrapped), left
aligned, with "—" where a value is missing, and without the row numbers (a meaningful index, such
as a pivot table's, becomes its leading columns). :func:`use_table_format` makes it the HTML display
of every DataFrame in a Jupyter kernel (``use_style`` calls it), so executed notebooks and the
report built from them (:mod:`paged.experiments.notebook.report`) show these tables.
"""

from __future__ import annotations

import pandas as pd

__all__ = ["table_html", "use_table_format", "MISSING", "TABLE_CLASS", "TABLE_CSS"]

#: What a missing value shows as.
MISSING = "—"
#: The HTML class of the tables :func:`table_html` writes.
TABLE_CLASS = "paged-table"
#: Their style: text wrapped between words and left-aligned, headers at the top of their cell. The
#: class is named twice so the rules outrank JupyterLab's own right-aligning rule for output tables
#: (``:not(.jp-RenderedMarkdown).jp-RenderedHTMLCommon td``), in Lab and in the report.
_T = f"table.{TABLE_CLASS}.{TABLE_CLASS}"
TABLE_CSS = (f"{_T} {{border-collapse: collapse; margin: 0.5em 0;}} "
             f"{_T} th, {_T} td {{text-align: left; vertical-align: top; white-space: normal; overflow-wrap: normal; "
             "word-break: normal; padding: 0.2em 0.6em; max-width: 40em;} "
             f"{_T} td {{overflow-wrap: break-word;}} "  # a word wider than its column may break; a header never
             f"{_T} thead th {{border-bottom: 1px solid #999;}}")


def _flat(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` without a default (unnamed ``RangeIndex``) index; a meaningful one becomes leading columns."""
    default = isinstance(frame.index, pd.RangeIndex) and frame.index.name is None
    return frame.reset_index(drop=default)


def table_html(frame: pd.DataFrame, *, max_rows: int | None = 200) -> str:
    """``frame`` as one HTML ``<table class="paged-table">`` (module docstring) with its style.

    Args:
        frame: any DataFrame (not changed).
        max_rows: show at most this many rows (the first ones) and say so;
            None shows all.
    """
    shown = _flat(frame)
    hidden = 0
    if max_rows is not None and len(shown) > max_rows:
        shown, hidden = shown.head(max_rows), len(shown) - max_rows
    shown = shown.copy()
    for column in range(shown.shape[1]):  # text columns: None or NaN -> MISSING (numbers get na_rep)
        values = shown.iloc[:, column]
        if values.dtype == object:
            shown.iloc[:, column] = values.where(values.notna(), MISSING)
    with pd.option_context("display.max_colwidth", None, "display.max_columns", None):
        table = shown.to_html(index=False, na_rep=MISSING, border=0, classes=TABLE_CLASS, justify="left")
    note = f"<p>The first {len(shown):,} of {len(frame):,} rows.</p>" if hidden else ""
    return f"<style>{TABLE_CSS}</style>\n{table}{note}"


def use_table_format() -> bool:
    """Make :func:`table_html` the HTML display of every DataFrame in the running IPython kernel.

    Returns:
        False (and changes nothing) outside IPython.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    shell.display_formatter.formatters["text/html"].for_type(pd.DataFrame, table_html)
    return True
