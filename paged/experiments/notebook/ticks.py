"""Tick labels a paper prints: plain numbers on log axes, whole numbers on count axes.

:mod:`paged.experiments.notebook.plotting` re-exports them. They live apart, without a module-level
matplotlib import, so a module that draws only when asked (the Fig. 2 driver behind ``python -m
paged fragmentation``) imports them without loading matplotlib at its own import.
"""

from __future__ import annotations

__all__ = ["plain_number", "plain_log_ticks", "integer_ticks"]


def plain_number(value: float) -> str:
    """A tick value as people write it: ``0.05``, ``2``, ``64``, ``1,024`` (never ``2×10⁰``)."""
    return f"{value:,.6g}".replace("-", "\u2212")


def plain_log_ticks(axis) -> None:
    """Label a log-scale ``axis`` (``ax.xaxis``, ``ax.yaxis``) with plain numbers: the ticks
    matplotlib's log formatter would label (powers of the base, and on a short range some of the
    ticks between them), written ``0.5``, ``2``, ``1,024`` instead of ``5×10⁻¹``, ``2^{1}`` or
    ``2×10⁰``. Call it after setting the scale."""
    from matplotlib.ticker import LogFormatter

    class PlainLogFormatter(LogFormatter):
        def __call__(self, x, pos=None):
            return plain_number(x) if super().__call__(x, pos) else ""

    base = axis.get_transform().base
    axis.set_major_formatter(PlainLogFormatter(base=base))
    axis.set_minor_formatter(PlainLogFormatter(base=base))


def integer_ticks(axis) -> None:
    """Ticks at whole numbers only on ``axis`` (a count: requests, blocks, beam widths, rounds)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # one value alone still gets a whole tick
