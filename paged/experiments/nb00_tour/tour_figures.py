"""Drawings of the tour's views (:mod:`paged.experiments.nb00_tour.tour`): one matplotlib Figure per view.

Figures are built as ``matplotlib.figure.Figure`` objects, not through pyplot, so an explorer can
redraw one on every slider move without pyplot keeping it open or the inline backend showing it
again. Every number written on a figure comes from the view's data.
"""

from __future__ import annotations

import numpy as np
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from paged.experiments.nb00_tour.tour import SLOT_FREE, Step

__all__ = ["draw_reservation", "draw_pages", "draw_block_tables", "draw_sharing", "draw_batch", "draw_replay",
           "draw_message", "STATE_COLORS"]

_PALETTE = sns.color_palette("colorblind", 10)
#: Slot and request-state colours shared by the views.
STATE_COLORS = {"prompt": _PALETTE[0], "output": _PALETTE[2], "reserved, never used": _PALETTE[3],
                "buddy rounding": "0.6", "free": "white", "waiting": "0.85", "running": _PALETTE[2],
                "swapped": _PALETTE[1], "finished": "white", "not arrived": "white"}


def _cell(ax, x, y, color, text="", *, width=1.0, height=1.0, hatch=None, alpha=1.0, fontsize=8):
    ax.add_patch(Rectangle((x, y), width, height, facecolor=color, edgecolor="0.3", hatch=hatch, alpha=alpha, lw=0.8))
    if text:
        ax.text(x + width / 2, y + height / 2, text, ha="center", va="center", fontsize=fontsize)


def _blank(ax, xlim, ylim):
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("equal")
    ax.axis("off")


def _legend(ax, labels, **kwargs):
    handles = [Rectangle((0, 0), 1, 1, facecolor=STATE_COLORS[label], edgecolor="0.3") for label in labels]
    ax.legend(handles, labels, ncol=len(labels), frameon=False, fontsize=8, **kwargs)


def draw_message(text: str) -> Figure:
    """A small figure that only says ``text`` (an explorer's answer to impossible settings)."""
    fig = Figure(figsize=(6, 1.2))
    ax = fig.add_subplot()
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True)
    return fig


def draw_reservation(view: dict) -> Figure:
    """One contiguous reservation (:func:`~paged.experiments.nb00_tour.tour.reservation`): a cell per slot."""
    slots = view["slots"]
    fig = Figure(figsize=(min(MAX_WIDTH_IN, max(6, 0.4 * len(slots))), 1.9))
    ax = fig.add_subplot()
    for i, label in enumerate(slots):
        _cell(ax, i, 0, STATE_COLORS[label])
    _blank(ax, (-0.2, len(slots) + 0.2), (-1.6, 1.4))
    ax.text(0, 1.15, f"Orca ({view['policy'].capitalize()}): {view['used']} tokens in a {view['allocated']}-slot "
                     f"reservation: {view['wasted']} slots ({view['wasted_share']:.0%}) hold nothing", fontsize=9)
    _legend(ax, list(dict.fromkeys(slots)), loc="lower left", bbox_to_anchor=(0, -0.05))
    return fig


#: The pages view wraps its blocks onto rows this many slots wide (about 10 inches at 0.45 in a slot),
#: so its labels keep their size at any block size instead of the figure growing past the cell.
_PAGES_ROW_SLOTS = 18
_SLOT_IN = 0.45
#: The widest a tour figure is drawn (inches): a JupyterLab cell shows it at its size, not shrunk.
MAX_WIDTH_IN = 8.6


def draw_pages(view) -> Figure:
    """A request's blocks as its tokens grow (:func:`~paged.experiments.nb00_tour.tour.pages`), one
    row of blocks after another; each block keeps room for its two-line label, even of one slot."""
    block_size = int(view["block_size"].iloc[0])
    pitch = max(block_size + 1, 2.4)  # a block's slots and a gap, at least its label's width
    per_row = max(1, int(_PAGES_ROW_SLOTS // pitch))
    rows, row_height = -(-len(view) // per_row), 2.8
    width = min(len(view), per_row) * pitch
    fig = Figure(figsize=(max(6.0, _SLOT_IN * width + 0.4), _SLOT_IN * rows * row_height + 1.0))
    ax = fig.add_subplot()
    for k, row in enumerate(view.itertuples()):
        line, column = divmod(k, per_row)
        x0, y0 = column * pitch, -line * row_height
        for j in range(block_size):
            _cell(ax, x0 + j, y0, STATE_COLORS["output"] if j < row.filled else STATE_COLORS["free"])
        ax.text(x0 + block_size / 2, y0 - 0.2, f"logical {row.logical}\n→ block {row.physical}", ha="center",
                va="top", fontsize=8, linespacing=1.1)
    tokens, empty = int(view["filled"].sum()), int(len(view) * block_size - view["filled"].sum())
    _blank(ax, (-0.2, max(width, 6.0 / _SLOT_IN - 1)), (-(rows - 1) * row_height - 1.9, 1.8))
    ax.text(0, 1.3, f"{_count(tokens, 'token')} in {_count(len(view), 'block')} of {block_size}: "
                     f"{_count(empty, 'empty slot')}" + (", all in the last block" if empty else ""), fontsize=9)
    return fig


def _count(n: int, one: str, many: str | None = None) -> str:
    """``"1 block"``, ``"2 blocks"``: a number with its noun in the right number."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def draw_block_tables(view, request: int = 0) -> Figure:
    """A request's block table (:func:`~paged.experiments.nb00_tour.tour.block_tables`): its logical blocks in
    order on top, the physical blocks of the whole cache below, an arrow per table entry."""
    num_blocks = int(view["num_blocks"].iloc[0])
    mine = view[view["request"] == request]
    width = min(MAX_WIDTH_IN, max(7, 1.05 * num_blocks))
    fig = Figure(figsize=(width, 2.8))
    ax = fig.add_subplot()
    roomy = width / (num_blocks + 2.4) >= 0.6  # inches per block: room for "block N" under each
    by_block = view.set_index("physical")
    offset = (num_blocks - len(mine)) / 2
    for physical in range(num_blocks):
        owner = int(by_block.loc[physical, "request"]) if physical in by_block.index else None
        text = by_block.loc[physical, "words"].replace(" ", "\n") if owner is not None else ""
        color = _PALETTE[owner] if owner is not None else "white"
        _cell(ax, physical, 0, color, text, alpha=1.0 if owner == request else 0.25, fontsize=7 if roomy else 6)
        ax.text(physical + 0.5, -0.3, f"block {physical}" if roomy else f"{physical}", ha="center", fontsize=7)
    for _, row in mine.iterrows():
        x = offset + row["logical"]
        _cell(ax, x, 2, _PALETTE[request], row["words"].replace(" ", "\n"), fontsize=7 if roomy else 6)
        ax.text(x + 0.5, 3.15, f"logical {row['logical']}" if roomy else f"{row['logical']}", ha="center", fontsize=7)
        ax.annotate("", xy=(row["physical"] + 0.5, 1.0), xytext=(x + 0.5, 2.0),
                    arrowprops={"arrowstyle": "->", "color": "0.3", "lw": 0.8})
    ax.text(-0.1, 2.5, "block table" if roomy else "block table\n(logical block\nabove)", ha="right", va="center",
            fontsize=8)
    ax.text(-0.1, 0.5, "GPU memory" if roomy else "GPU memory\n(block number\nbelow)", ha="right", va="center",
            fontsize=8)
    _blank(ax, (-2.2, num_blocks + 0.2), (-0.6, 3.5))
    return fig


def draw_sharing(view: dict) -> Figure:
    """Two requests sharing prefix blocks (:func:`~paged.experiments.nb00_tour.tour.sharing`): each row is a
    block table; shared blocks (reference count 2) in one colour, private ones in another, a block
    made by copy-on-write hatched."""
    copied = {dst for _, dst in view["copies"]}
    longest = max(len(t) for t in view["tables"].values())
    fig = Figure(figsize=(min(MAX_WIDTH_IN, max(6, 1.0 * longest + 2)), 2.4))
    ax = fig.add_subplot()
    for row, (name, blocks) in enumerate(view["tables"].items()):
        y = 1.6 * (1 - row)
        ax.text(-0.2, y + 0.5, f"request {name}", ha="right", va="center", fontsize=8)
        for i, block in enumerate(blocks):
            shared = view["ref_counts"][block] > 1
            _cell(ax, i, y, _PALETTE[0] if shared else _PALETTE[2], f"{block}", hatch="///" if block in copied else None)
    ax.text(0, 2.95, f"{_count(len(view['shared']), 'shared block')}, {_count(len(view['copies']), 'copy', 'copies')} "
                     f"on write, {_count(view['blocks_used'], 'block')} used instead of {view['blocks_without_sharing']} "
                     f"({view['saved']} saved)", fontsize=9)
    handles = [Rectangle((0, 0), 1, 1, facecolor=_PALETTE[0], edgecolor="0.3"),
               Rectangle((0, 0), 1, 1, facecolor=_PALETTE[2], edgecolor="0.3"),
               Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="0.3", hatch="///")]
    ax.legend(handles, ["shared (ref count 2)", "private", "copied on write"], ncol=3, frameon=False, fontsize=8,
              loc="upper left", bbox_to_anchor=(0, 0.02))
    _blank(ax, (-1.8, longest + 0.2), (-0.9, 3.3))
    return fig


def draw_batch(view) -> Figure:
    """A batch's KV slots (:func:`~paged.experiments.nb00_tour.tour.batch`): contiguous reservations (and the
    buddy allocator's rounding on top), paged blocks, and the tokens themselves."""
    tokens, reserved = int(view["tokens"].sum()), int(view["reserved"].sum())
    buddy, paged = int(view["buddy_allocated"].sum()), int(view["paged_slots"].sum())
    fig = Figure(figsize=(7, 2.4))
    ax = fig.add_subplot()
    rows = ["contiguous reservations", "paged blocks", "tokens stored"]
    ax.barh(rows, [reserved, paged, tokens], color=[_PALETTE[3], _PALETTE[2], _PALETTE[0]])
    ax.barh(rows[0], buddy - reserved, left=reserved, color=STATE_COLORS["buddy rounding"], label="buddy rounding")
    for y, value in enumerate([reserved, paged, tokens]):
        ax.text(value, y, f" {value}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("KV slots")
    ax.legend(frameon=False, fontsize=8, loc="lower right")
    ax.set_title(f"{len(view)} requests: paging takes {1 - paged / reserved:.0%} fewer slots than the reservations "
                 f"({1 - paged / buddy:.0%} fewer than the buddy blocks)", fontsize=9)
    fig.tight_layout()
    return fig


_STATES = ("not arrived", "waiting", "running", "swapped", "finished")


def _state_matrix(steps: list[Step], num_requests: int) -> np.ndarray:
    states = np.zeros((num_requests, len(steps)), dtype=int)
    for t, step in enumerate(steps):
        for state, ids in ((1, step.waiting), (2, step.running), (3, step.swapped), (4, step.finished)):
            states[list(ids), t] = state
    return states


def draw_replay(steps: list[Step], num_requests: int, step: int, *, system: str, block_size: int | None) -> Figure:
    """A scheduler replay (:func:`~paged.experiments.nb00_tour.tour.replay`): every request's state at every
    step (preemptions marked ×, the chosen ``step`` outlined), and the KV cache at ``step``: one cell
    per slot coloured by the request holding it, light where reserved but not yet holding a token;
    ``block_size`` draws block boundaries (None for a contiguous system)."""
    from matplotlib.colors import ListedColormap

    current = steps[step]
    fig = Figure(figsize=(MAX_WIDTH_IN, 5.2))
    top, bottom = fig.subplots(2, 1, height_ratios=[1.3, 1])
    states = _state_matrix(steps, num_requests)
    top.imshow(states, aspect="auto", interpolation="nearest", vmin=0, vmax=len(_STATES) - 1,
               cmap=ListedColormap([STATE_COLORS[s] for s in _STATES]))
    for t, s in enumerate(steps):
        for rid in s.preempted:
            top.plot(t, rid, "x", color="black", ms=5)
    top.axvline(step, color="black", lw=1)
    top.yaxis.get_major_locator().set_params(integer=True)
    top.xaxis.get_major_locator().set_params(integer=True)
    top.set_xlabel("step")
    top.set_ylabel("request")
    top.set_title(f"{system}, step {step} ({current.kind}): running {list(current.running)}, waiting "
                  f"{list(current.waiting)}" + (f", preempted {list(current.preempted)}" if current.preempted else "")
                  + (f", swapped {list(current.swapped)}" if current.swapped else ""), fontsize=8)
    _legend(top, list(_STATES[1:4]), loc="upper right", bbox_to_anchor=(1, -0.18))
    width = 16
    for slot, (owner, filled) in enumerate(zip(current.owner, current.filled)):
        x, y = slot % width, -(slot // width)
        color = "white" if owner == SLOT_FREE else sns.color_palette("tab20", 20)[int(owner) % 20]
        _cell(bottom, x, y, color, "" if owner == SLOT_FREE else str(int(owner)), alpha=1.0 if filled else 0.35,
              fontsize=6)
    for first in range(0, len(current.owner), block_size) if block_size else ():  # block outlines (paged)
        bottom.add_patch(Rectangle((first % width, -(first // width)), block_size, 1, fill=False, edgecolor="black", lw=1.6, zorder=3))
    used = int((current.owner != SLOT_FREE).sum())
    bottom.set_title(f"KV cache at step {step}: {int(current.filled.sum())} slots hold tokens, {used} are held "
                     f"(light: held, no token yet), {len(current.owner) - used} free", fontsize=8)
    rows = -(-len(current.owner) // width)
    _blank(bottom, (-0.2, width + 0.2), (-rows + 0.8, 1.2))
    fig.tight_layout()
    return fig
