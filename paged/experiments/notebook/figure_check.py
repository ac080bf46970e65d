"""What makes a figure unfit for a paper, found from matplotlib's own layout: :func:`figure_problems`.

:func:`~paged.experiments.notebook.plotting.save_figure` runs the check on every figure it saves and
warns (:class:`FigureProblemWarning`) for each problem, so an executed notebook shows it as stderr,
which the notebook tests and ``make quick`` refuse. The figure is drawn once and measured in
display pixels:

* **text over text**: any two visible texts (the suptitle, axes titles, axis labels, tick labels,
  annotations, legend entries) whose drawn boxes overlap by more than :data:`TEXT_OVERLAP_PX` in
  both directions (a label running into the title, crowded tick labels);
* **log ticks in exponent form**: a tick label on a log axis written as a power (``2×10⁰``,
  ``9.9×10⁻¹``, ``2⁴``) for a value between 0.001 and 100,000, where a plain number reads better;
* **fractional ticks on a count axis**: an axis whose plotted values are three or more distinct
  whole numbers (requests, blocks, beam widths) with a tick label that is not (``2.5``);
* **legend over data**: a legend box that covers a plotted point, a line's path, or a bar;
* **legend entries for nothing**: a legend line (a proxy handle) whose colour and style, or
  marker, no drawn line has.

Cost: one draw of the figure plus O(texts² + plotted points) arithmetic; tens to hundreds of
milliseconds for the project's figures.
"""

from __future__ import annotations

import math
import re

import numpy as np
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.text import Text

__all__ = ["figure_problems", "FigureProblemWarning", "TEXT_OVERLAP_PX", "PLAIN_RANGE"]

#: Two texts overlap when their boxes intersect by more than this many pixels both ways (at the
#: figure's dpi): a pixel of antialiasing is not an overlap.
TEXT_OVERLAP_PX = 1.0
#: A tick label in exponent form: mathtext ``2\times10^{0}``, ``10^{1}``, ``2^{4}``, or ``×10``.
_EXPONENT = re.compile(r"\\times|\^|×\s*10")
#: Tick values in this range read better as plain numbers than in exponent form.
PLAIN_RANGE = (1e-3, 1e5)


class FigureProblemWarning(UserWarning):
    """A saved figure has a layout problem (:func:`figure_problems`)."""


def _shown(text: Text) -> bool:
    return text.get_visible() and bool(text.get_text().strip())


def _tick_labels(axis: Axis) -> list[Text]:
    """The tick labels ``axis`` draws: of visible ticks inside its view interval."""
    low, high = sorted(axis.get_view_interval())
    span = (high - low) or 1.0
    labels = []
    for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
        loc = tick.get_loc()
        if loc is None or not (low - 1e-9 * span <= loc <= high + 1e-9 * span):
            continue
        labels += [label for label in (tick.label1, tick.label2) if _shown(label)]
    return labels


def _texts(fig: Figure) -> list[tuple[str, Text, object]]:
    """Every visible text of ``fig`` as ``(what, text, group)``; texts of one group (a legend) are not
    compared with each other."""
    found = [("figure text", t, None) for t in fig.texts if _shown(t)]
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        where = f"axes {i}"
        for child in ax.get_children():  # the three titles (centre, left, right) and annotations
            if isinstance(child, Text) and _shown(child) and child is not ax.xaxis.label and child is not ax.yaxis.label:
                found.append((f"{where} text", child, None))
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            if _shown(axis.label):
                found.append((f"{where} {name} label", axis.label, None))
            found += [(f"{where} {name} tick label", t, None) for t in _tick_labels(axis)]
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            found += [(f"{where} legend", t, legend) for t in [legend.get_title(), *legend.get_texts()] if _shown(t)]
    for legend in fig.legends:
        found += [("figure legend", t, legend) for t in [legend.get_title(), *legend.get_texts()] if _shown(t)]
    return found


def _overlap(a, b) -> bool:
    dx = min(a.x1, b.x1) - max(a.x0, b.x0)
    dy = min(a.y1, b.y1) - max(a.y0, b.y0)
    return dx > TEXT_OVERLAP_PX and dy > TEXT_OVERLAP_PX


def _outline(text: Text, renderer) -> np.ndarray:
    """The four corners (pixels) of ``text``'s drawn box. A rotated text's axis-aligned extent is
    larger than its box (rotated tick labels would all seem to overlap), so its box is its unrotated
    size turned about the extent's centre, which is the box's centre too."""
    box = text.get_window_extent(renderer)
    angle = math.radians(text.get_rotation())
    if abs(math.sin(2 * angle)) < 1e-9:  # 0, 90, 180, 270 degrees: the extent is the box
        return np.array([[box.x0, box.y0], [box.x1, box.y0], [box.x1, box.y1], [box.x0, box.y1]])
    flat = Text(text=text.get_text(), fontproperties=text.get_fontproperties(), linespacing=text.get_linespacing())
    flat.set_figure(text.get_figure(root=True))
    w, h = flat.get_window_extent(renderer).size
    c, s = math.cos(angle), math.sin(angle)
    half = np.array([[-w, -h], [w, -h], [w, h], [-w, h]]) / 2
    return np.array([box.x0 + box.x1, box.y0 + box.y1]) / 2 + half @ np.array([[c, s], [-s, c]])


def _polygons_overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """Separating-axis test of two convex quadrilaterals: overlap deeper than :data:`TEXT_OVERLAP_PX`."""
    for poly in (a, b):
        for k in range(4):
            edge = poly[(k + 1) % 4] - poly[k]
            normal = np.array([-edge[1], edge[0]]) / (np.hypot(*edge) or 1.0)
            pa, pb = a @ normal, b @ normal
            if min(pa.max(), pb.max()) - max(pa.min(), pb.min()) <= TEXT_OVERLAP_PX:
                return False
    return True


def _text_overlaps(fig: Figure, renderer) -> list[str]:
    texts = [(what, t, group, _outline(t, renderer)) for what, t, group in _texts(fig)]
    problems = []
    for i, (what_a, a, group_a, box_a) in enumerate(texts):
        for what_b, b, group_b, box_b in texts[i + 1:]:
            if group_a is not None and group_a is group_b:
                continue
            if _polygons_overlap(box_a, box_b):
                problems.append(f"text over text: {what_a} {_quote(a)} and {what_b} {_quote(b)}")
    return problems


def _quote(text: Text) -> str:
    words = " ".join(text.get_text().split())
    return repr(words if len(words) <= 40 else words[:37] + "...")


def _log_ticks(fig: Figure) -> list[str]:
    problems = []
    for i, ax in enumerate(fig.axes):
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            if axis.get_scale() != "log" or not ax.get_visible():
                continue
            bad = [t.get_text() for t in _tick_labels(axis) if _EXPONENT.search(t.get_text())
                   and PLAIN_RANGE[0] <= abs(t.get_position()[0 if name == "x" else 1]) <= PLAIN_RANGE[1]]
            if bad:
                problems.append(f"axes {i} {name}: log-axis ticks in exponent form ({bad[0]!r}); label them as plain "
                                "numbers (plotting.plain_log_ticks)")
    return problems


def _number(text: str) -> float | None:
    cleaned = text.replace("\u2212", "-").replace("$", "").replace("\\mathdefault{", "").replace("}", "").strip()
    cleaned = cleaned.replace(",", "").rstrip("%")
    try:
        return float(cleaned)
    except ValueError:
        return None


def _plotted(ax, name: str) -> np.ndarray:
    """The data values ``ax`` plots along axis ``name`` ("x" or "y"): line vertices, bar ends, scatter points."""
    values = []
    for line in ax.get_lines():
        if line.get_visible() and line.get_transform() == ax.transData:
            values.append(np.asarray(line.get_xdata() if name == "x" else line.get_ydata(), dtype=float))
    for patch in ax.patches:
        if isinstance(patch, Rectangle) and patch.get_visible() and patch.get_transform() == ax.transData:
            x, y, w, h = patch.get_x(), patch.get_y(), patch.get_width(), patch.get_height()
            values.append(np.array([x, x + w] if name == "x" else [y, y + h], dtype=float))
    for collection in ax.collections:
        offsets = np.asarray(collection.get_offsets(), dtype=float)
        if collection.get_visible() and offsets.ndim == 2 and len(offsets) and \
                collection.get_offset_transform() == ax.transData:
            values.append(offsets[:, 0 if name == "x" else 1])
    flat = np.concatenate(values) if values else np.array([])
    return flat[np.isfinite(flat)]


def _count_ticks(fig: Figure) -> list[str]:
    problems = []
    for i, ax in enumerate(fig.axes):
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            if axis.get_scale() != "linear" or not ax.get_visible():
                continue
            values = _plotted(ax, name)
            # three or more distinct whole numbers: a count (two, such as 0 and 1, may be the ends of a fraction)
            if len(np.unique(values)) < 3 or not np.all(values == np.round(values)) or np.abs(values).max() > 1e6:
                continue
            labels = [t.get_text() for t in axis.get_majorticklabels()
                      if _shown(t) and (n := _number(t.get_text())) is not None and not math.isclose(n, round(n))]
            shown = [t.get_text() for t in _tick_labels(axis)]
            labels = [label for label in labels if label in shown]
            if labels:
                problems.append(f"axes {i} {name}: every plotted value is a whole number but a tick reads {labels[0]!r}; "
                                "use integer ticks (MaxNLocator(integer=True))")
    return problems


def _segments(points: np.ndarray, step: float = 3.0) -> np.ndarray:
    """Points every ``step`` pixels along a polyline given in display pixels."""
    out = [points[:1]]
    for a, b in zip(points[:-1], points[1:]):
        n = max(1, int(np.hypot(*(b - a)) / step))
        out.append(a + (b - a) * np.linspace(0, 1, n + 1)[1:, None])
    return np.concatenate(out)


def _legend_over_data(fig: Figure, renderer) -> list[str]:
    problems = []
    for i, ax in enumerate(fig.axes):
        legend = ax.get_legend()
        if legend is None or not legend.get_visible() or not ax.get_visible():
            continue
        box = legend.get_window_extent(renderer).padded(-1.0)
        axes_box = ax.get_window_extent(renderer)
        hit = []
        for line in ax.get_lines():
            if not line.get_visible() or line.get_linestyle() in ("None", "", " ") and line.get_marker() in ("None", "", None):
                continue
            xy = np.asarray(line.get_xydata(), dtype=float)
            xy = xy[np.all(np.isfinite(xy), axis=1)]
            if not len(xy):
                continue
            pts = line.get_transform().transform(xy)
            if line.get_linestyle() not in ("None", "", " "):
                pts = _segments(pts)
            inside = (pts[:, 0] > box.x0) & (pts[:, 0] < box.x1) & (pts[:, 1] > box.y0) & (pts[:, 1] < box.y1)
            if inside.any():
                hit.append(f"line {line.get_label()!r}" if not line.get_label().startswith("_") else "a line")
        for patch in ax.patches:
            if not isinstance(patch, Rectangle) or not patch.get_visible():
                continue
            ext = patch.get_window_extent(renderer)
            if ext.width * ext.height > 0.5 * axes_box.width * axes_box.height:  # a background band
                continue
            if _overlap(ext, box):
                hit.append(f"bar {patch.get_label()!r}" if not patch.get_label().startswith("_") else "a bar")
        for collection in ax.collections:
            offsets = np.asarray(collection.get_offsets(), dtype=float)
            if not collection.get_visible() or offsets.ndim != 2 or not len(offsets):
                continue
            pts = collection.get_offset_transform().transform(offsets)
            inside = (pts[:, 0] > box.x0) & (pts[:, 0] < box.x1) & (pts[:, 1] > box.y0) & (pts[:, 1] < box.y1)
            if inside.any():
                hit.append("scattered points")
        if hit:
            unique = list(dict.fromkeys(hit))
            problems.append(f"axes {i}: the legend covers {', '.join(unique[:3])}"
                            + (f" and {len(unique) - 3} more" if len(unique) > 3 else "")
                            + "; move it (loc=..., or outside the axes)")
    return problems


def _same_color(a, b) -> bool:
    from matplotlib.colors import to_rgba

    try:
        return np.allclose(to_rgba(a), to_rgba(b), atol=1e-3)
    except ValueError:
        return False


def _grey(color) -> bool:
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(color)
    return max(r, g, b) - min(r, g, b) < 1e-3


def _drawn_like(handle: Line2D, lines: list[Line2D]) -> bool:
    """Whether some drawn line looks like the legend ``handle``: its colour and line style where the
    handle has a line (a grey handle explains a style drawn in several colours: the style alone),
    else its marker and face (any colour: one marker style can mark several systems)."""
    has_line = handle.get_linestyle() not in ("None", "", " ")
    for line in lines:
        if has_line:
            if line.get_linestyle() == handle.get_linestyle() and (
                    _grey(handle.get_color()) or _same_color(line.get_color(), handle.get_color())):
                return True
        elif line.get_marker() == handle.get_marker() and _same_color(line.get_markerfacecolor(),
                                                                      handle.get_markerfacecolor()):
            return True
    return False


def _legend_entries_not_drawn(fig: Figure) -> list[str]:
    """Legend entries (lines) that describe no drawn line of the figure: a proxy handle added for an
    element the figure does not show."""
    lines = [line for ax in fig.axes if ax.get_visible() for line in ax.get_lines() if line.get_visible()]
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    problems = []
    for legend in legends:
        for handle, text in zip(legend.legend_handles, legend.get_texts()):
            if isinstance(handle, Line2D) and not _drawn_like(handle, lines):
                problems.append(f"legend entry {_quote(text)} describes no line the figure draws")
    return problems


def figure_problems(fig: Figure) -> list[str]:
    """Every layout problem of ``fig`` (module docstring), one line each; ``[]`` for a clean figure.

    The figure is drawn with its canvas's renderer (a figure made without pyplot gets an Agg canvas,
    as ``savefig`` would give it); what it shows does not change.
    """
    if not hasattr(fig.canvas, "get_renderer"):
        FigureCanvasAgg(fig)  # attaches itself as fig.canvas
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [*_text_overlaps(fig, renderer), *_log_ticks(fig), *_count_ticks(fig), *_legend_over_data(fig, renderer),
            *_legend_entries_not_drawn(fig)]
