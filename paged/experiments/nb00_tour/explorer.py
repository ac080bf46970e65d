"""The tour's interactive explorers: ipywidgets controls over a view of :mod:`paged.experiments.nb00_tour.tour`.

Each explorer draws its view at the notebook's parameters, saves that figure (PNG, PDF, CSV of the
numbers, :func:`~paged.experiments.notebook.plotting.save_figure`) and shows it under its controls; moving a
control recomputes the view with the library and redraws the same output in place (an IPython
display update), so

* in JupyterLab the figure follows the sliders;
* an executed copy (papermill, ``make reproduce``) holds the figure of the default state as an
  ordinary PNG output, readable without a running kernel.

Every explorer returns its :class:`Explorer` (the controls, the latest PNG and data), which tests
drive by setting a control's ``value``. Each redrawn figure's display carries
``{EXPLORER_METADATA_KEY: {"name", "values", "text", "message"}}``: the control values it was drawn
at, the words written on it, and whether it is a message instead of the view, so a browser test
can check that the figure on the page and the controls' readouts agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import pandas as pd

from paged.core.checks import as_int
from paged.experiments.nb00_tour import tour
from paged.experiments.nb00_tour import tour_figures as draw
from paged.experiments.notebook.plotting import figure_metadata, figure_png, save_figure, show_figure, title_figure

__all__ = ["Explorer", "explore", "reservation", "pages", "block_tables", "sharing", "batch", "scheduler",
           "EXPLORER_METADATA_KEY"]

#: Key of a redrawn figure's display metadata (module docstring).
EXPLORER_METADATA_KEY = "paged_explorer"


@dataclass
class Explorer:
    """A live view: ``controls`` (name → ipywidget), the latest ``png`` and ``data``, and how many
    times it was redrawn (``redraws``)."""

    controls: dict
    png: bytes = field(default=b"", repr=False)
    data: pd.DataFrame | None = field(default=None, repr=False)
    redraws: int = 0
    handle: object = field(default=None, repr=False)


def explore(render, controls: dict, *, name: str, output_dir, claim: str, number=None, section=None) -> Explorer:
    """Show ``controls`` and the figure ``render(**values)`` draws; redraw on every change.

    Args:
        render: ``render(**{name: control value}) -> (Figure, DataFrame)``; a ValueError it raises
            (impossible settings) is shown as a message in place of the figure.
        controls: name → ipywidgets control, in display order.
        name, output_dir, claim, number, section: as :func:`~paged.experiments.notebook.plotting.save_figure`,
            for the figure of the default state.

    Returns:
        The :class:`Explorer`.

    Raises:
        ValueError: if the default state itself cannot be drawn.
    """
    import ipywidgets as widgets
    from IPython.display import display

    values = {key: control.value for key, control in controls.items()}
    fig, data = render(**values)
    paths = save_figure(fig, data, name, output_dir, number=number, claim=claim, section=section, show=False)
    state = Explorer(controls, paths.png_bytes, data)
    display(widgets.HBox(list(controls.values()), layout=widgets.Layout(flex_flow="row wrap")))
    state.handle = show_figure(state.png, metadata=figure_metadata(name, paths, number, claim, section, explorer=True))

    def redraw(_change=None):
        values = {key: control.value for key, control in controls.items()}
        try:
            fig, state.data = render(**values)
            title_figure(fig, claim, number, section=section)
            message = False
        except ValueError as err:
            fig, message = draw.draw_message(str(err)), True
        state.png = figure_png(fig)
        state.redraws += 1
        show_figure(state.png, handle=state.handle, metadata={EXPLORER_METADATA_KEY: {
            "name": name, "values": values, "text": _figure_text(fig), "message": message}})

    for control in controls.values():
        control.observe(redraw, names="value")
    return state


#: The largest value an explorer takes (tokens, slots): its figures draw every slot.
MAX_VALUE = 4096


def _choice(name: str, value, options) -> str:
    """``value`` if it is one of ``options``, else a ValueError naming the explorer's parameter."""
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{name} must be one of {tuple(options)}, got {value!r}")
    return value


def _check(name: str, value, low: int, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]``, else a ValueError naming the explorer's parameter (an
    impossible value is refused, never clamped, and never reaches ipywidgets' TraitError)."""
    try:
        number = as_int(value, name)
    except TypeError as err:
        raise ValueError(str(err)) from None
    high = MAX_VALUE if high is None else high
    if number < low or number > high:
        bound = f"in [{low}, {high}]"
        raise ValueError(f"{name} must be an integer {bound}, got {value!r}")
    return number


def _figure_text(fig) -> list[str]:
    """The words written on ``fig``: its suptitle, its texts, and every axes' titles and texts."""
    artists = [fig._suptitle, *fig.texts]
    for ax in fig.axes:
        artists += [ax.title, ax._left_title, ax._right_title, *ax.texts]
    return [a.get_text() for a in artists if a is not None and a.get_text()]


#: Width of a slider's track (the part the mouse drags) and of its readout, in CSS pixels.
_TRACK_PX, _READOUT_PX = 180, 100


def _label_px(description: str) -> int:
    """Pixels for a control's description at JupyterLab's widget font (13 px, about 7 px a character)."""
    return 7 * len(description) + 12


def _slider(description: str, value: int, low: int, high: int):
    """An integer slider whose track keeps :data:`_TRACK_PX` pixels whatever its description's
    length (ipywidgets gives a slider 300 px in all, so a long description left no track)."""
    import ipywidgets as widgets

    label = _label_px(description)
    return widgets.IntSlider(value=value, min=low, max=max(high, value), description=description,
                             style={"description_width": f"{label}px"}, continuous_update=False,
                             layout=widgets.Layout(width=f"{label + _TRACK_PX + _READOUT_PX}px"))


def _dropdown(description: str, value: str, options):
    import ipywidgets as widgets

    label = _label_px(description)
    return widgets.Dropdown(value=value, options=list(options), description=description,
                            style={"description_width": f"{label}px"},
                            layout=widgets.Layout(width=f"{label + 8 * max(map(len, options)) + 40}px"))


def reservation(*, prompt_len: int = 3, output_len: int = 4, max_seq_len: int = 16, policy: str = "max",
                output_dir="figures") -> Explorer:
    """Reserved vs used slots of one contiguous reservation (§3, Fig. 3).

    Raises:
        ValueError: naming the parameter, for lengths below 1 or a request longer than ``max_seq_len``.
    """
    max_seq_len = _check("max_seq_len", max_seq_len, 2)
    policy = _choice("policy", policy, ("max", "pow2", "oracle"))
    prompt_len = _check("prompt_len", prompt_len, 1, max_seq_len - 1)
    output_len = _check("output_len", output_len, 1, max_seq_len - prompt_len)
    def render(prompt_len, output_len, policy):
        view = tour.reservation(prompt_len, output_len, policy, max_seq_len)
        return draw.draw_reservation(view), pd.DataFrame({"slot": range(len(view["slots"])), "use": view["slots"]})

    controls = {"prompt_len": _slider("prompt tokens", prompt_len, 1, max_seq_len - 1),
                "output_len": _slider("answer tokens actually generated", output_len, 1, max_seq_len - 1),
                "policy": _dropdown("Orca policy", policy, ("max", "pow2", "oracle"))}
    return explore(render, controls, name="tour_reservation", output_dir=output_dir, number=3,
                   claim="A contiguous reservation is sized before the answer's length is known; what it never uses is wasted")


def pages(*, num_tokens: int = 11, block_size: int = 4, output_dir="figures") -> Explorer:
    """Blocks added as a request's tokens grow (§4.2, Fig. 6).

    Raises:
        ValueError: naming the parameter, for ``num_tokens`` below 1 or a block size outside 1–16.
    """
    num_tokens = _check("num_tokens", num_tokens, 1)
    block_size = _check("block_size", block_size, 1, 16)
    def render(num_tokens, block_size):
        view = tour.pages(num_tokens, block_size)
        return draw.draw_pages(view), view

    controls = {"num_tokens": _slider("tokens generated", num_tokens, 1, 4 * num_tokens),
                "block_size": _slider("block size (tokens)", block_size, 1, 16)}
    return explore(render, controls, name="tour_pages", output_dir=output_dir, number=6,
                   claim="Blocks are allocated as tokens arrive: only the last block of a request has empty slots")


def block_tables(*, block_size: int = 2, seed: int = 0, output_dir="figures") -> Explorer:
    """A request's block table mapping its logical blocks to scattered physical ones (§4.3, Fig. 7).

    Raises:
        ValueError: naming the parameter, for a block size outside 1–4 words or a negative seed.
    """
    block_size = _check("block_size", block_size, 1, 4)
    seed = _check("seed", seed, 0)
    def render(request, block_size):
        view = tour.block_tables(tour.SENTENCES, block_size, seed)
        return draw.draw_block_tables(view, request), view

    controls = {"request": _slider("request", 0, 0, len(tour.SENTENCES) - 1),
                "block_size": _slider("block size (words)", block_size, 1, 4)}
    return explore(render, controls, name="tour_block_table", output_dir=output_dir, number=7,
                   claim="A block table keeps a request's blocks in order wherever they lie in GPU memory")


def sharing(*, prefix_len: int = 12, a_len: int = 3, b_len: int = 5, block_size: int = 4, output_dir="figures") -> Explorer:
    """Two requests sharing their prefix blocks, with copy-on-write (§4.4, Fig. 8).

    Raises:
        ValueError: naming the parameter, for a prefix below 1 token, own lengths outside
            ``[0, 4 × block_size]`` or a block size below 1.
    """
    block_size = _check("block_size", block_size, 1)
    prefix_len = _check("prefix_len", prefix_len, 1)
    a_len = _check("a_len", a_len, 0, 4 * block_size)
    b_len = _check("b_len", b_len, 0, 4 * block_size)
    def render(prefix_len, a_len, b_len):
        view = tour.sharing(prefix_len, a_len, b_len, block_size)
        rows = [{"request": name, "logical": i, "physical": b, "ref_count": view["ref_counts"][b]}
                for name, blocks in view["tables"].items() for i, b in enumerate(blocks)]
        return draw.draw_sharing(view), pd.DataFrame(rows)

    controls = {"prefix_len": _slider("shared prefix tokens", prefix_len, 1, 4 * prefix_len),
                "a_len": _slider("A's own tokens", a_len, 0, 4 * block_size),
                "b_len": _slider("B's own tokens", b_len, 0, 4 * block_size)}
    return explore(render, controls, name="tour_sharing", output_dir=output_dir, number=8,
                   claim="Requests with one prefix share its blocks; a shared block is copied only when written")


def batch(*, prompt_lens, output_lens, batch_size: int = 5, max_seq_len: int = 20, block_size: int = 4,
          policy: str = "max", output_dir="figures") -> Explorer:
    """A batch's memory under contiguous reservations and under paging (§3; measured at scale in Fig. 2).

    Raises:
        ValueError: if the length lists differ, a length is below 1, ``batch_size`` is not in
            ``[1, len(prompt_lens)]``, or ``max_seq_len`` / ``block_size`` is below 1 (each named).
    """
    max_seq_len = _check("max_seq_len", max_seq_len, 1)
    block_size = _check("block_size", block_size, 1)
    policy = _choice("policy", policy, ("max", "pow2", "oracle"))
    batch_size = _check("batch_size", batch_size, 1)
    for name, lens in (("prompt_lens", prompt_lens), ("output_lens", output_lens)):
        for value in lens:
            _check(f"every value of {name}", value, 1)
    if len(prompt_lens) != len(output_lens) or not 1 <= batch_size <= len(prompt_lens):
        raise ValueError(f"batch view: {len(prompt_lens)} prompt and {len(output_lens)} output lengths for a "
                         f"batch of {batch_size}; give one of each per request, at least batch_size of them")
    def render(batch_size, policy):
        view = tour.batch(prompt_lens[:batch_size], output_lens[:batch_size], policy=policy,
                          max_seq_len=max_seq_len, block_size=block_size)
        return draw.draw_batch(view), view

    controls = {"batch_size": _slider("requests at once", batch_size, 1, len(prompt_lens)),
                "policy": _dropdown("Orca policy", policy, ("max", "pow2", "oracle"))}
    return explore(render, controls, name="tour_batch", output_dir=output_dir, section="§3",
                   claim="A batch's KV memory: paging allocates close to the tokens stored, reservations far more")


def scheduler(trace, *, system: str = "paged", num_slots: int = 64, block_size: int = 4, max_seq_len: int = 64,
              preemption: str = "recompute", output_dir="figures") -> Explorer:
    """A trace replayed step by step by the real scheduler (§4.5): who runs, waits, is preempted.

    Raises:
        ValueError: naming the parameter, for a block size, ``max_seq_len`` or ``num_slots`` below 1,
            or fewer slots than one block.
    """
    block_size = _check("block_size", block_size, 1)
    max_seq_len = _check("max_seq_len", max_seq_len, 1)
    num_slots = _check("num_slots", num_slots, block_size)
    preemption = _choice("preemption", preemption, ("recompute", "swap"))
    @lru_cache(maxsize=16)
    def steps_of(system, preemption):
        return tour.replay(trace, system, num_slots=num_slots, block_size=block_size, max_seq_len=max_seq_len,
                           preemption=preemption)

    def render(step, system, preemption):
        steps = steps_of(system, preemption)
        if not 0 <= step < len(steps):  # the step slider's range follows the replay: never clamped silently
            raise ValueError(f"step {step} is outside the replay's {len(steps)} steps (0 to {len(steps) - 1})")
        fig = draw.draw_replay(steps, len(trace), step, system=system,
                               block_size=block_size if system == "paged" else None)
        rows = [{"step": s.step, "kind": s.kind, "running": len(s.running), "waiting": len(s.waiting),
                 "swapped": len(s.swapped), "preempted": len(s.preempted), "finished": len(s.finished),
                 "slots_holding_tokens": int(s.filled.sum()), "slots_held": int((s.owner != tour.SLOT_FREE).sum())}
                for s in steps]
        return fig, pd.DataFrame(rows)

    default_steps = steps_of(system, preemption)
    first_preemption = next((s.step for s in default_steps if s.preempted), len(default_steps) // 2)
    controls = {"step": _slider("step", first_preemption, 0, len(default_steps) - 1),
                "system": _dropdown("system", system, ("paged", "orca-oracle", "orca-pow2", "orca-max")),
                "preemption": _dropdown("preemption (paged)", preemption, ("recompute", "swap"))}

    def follow_replay(_change):
        """Another system or preemption mode replays for another number of steps: the step slider
        ends at the new replay's last step (ipywidgets moves a value past it to it, which redraws)."""
        steps = steps_of(controls["system"].value, controls["preemption"].value)
        controls["step"].max = len(steps) - 1

    for key in ("system", "preemption"):  # observed before explore's redraw, so it draws the new range
        controls[key].observe(follow_replay, names="value")
    return explore(render, controls, name="tour_scheduler", output_dir=output_dir, section="§4.5",
                   claim="The scheduler replays a trace: requests run, wait and are preempted as blocks fill")
