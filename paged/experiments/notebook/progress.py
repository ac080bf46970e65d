"""Progress bars of long steps: ``tqdm.auto``, one bar at a time, ending at its last frame in a saved notebook.

* **Saved notebooks.** Inside a Jupyter kernel ``tqdm.auto`` draws an ipywidgets bar. An executed
  notebook (papermill, nbclient) keeps each output as it was first displayed, so every viewer
  without the widget's live state (a text view of the ``.ipynb``, GitHub, nbconvert, the report)
  would show the bar's first frame, ``0%| | 0/28``. :func:`progress` displays the bar under a
  display id and displays it again when it closes, so the saved output is its last frame
  (``100%|██████████| 28/28 [00:12<00:00, ...]``, or where it stopped).
* **One bar per long step.** A step that starts while another step's bar is open in the same
  process (the sustained-rate searches inside a figure's loop) runs without a bar of its own, and
  a step of one item shows none (its bar could only jump from 0 to 100 %).
* **No bars in workers.** :func:`quiet` turns bars off (a job in a worker process: its bar would
  reach the notebook as stray stderr lines, or a cluster worker's log).

Outside a kernel (a terminal, a script) the bars are tqdm's text bars on stderr.
"""

from __future__ import annotations

from contextlib import contextmanager

__all__ = ["progress", "quiet"]

_open = 0  # bars open in this process
_quiet = 0  # quiet() blocks entered in this process


@contextmanager
def quiet():
    """No progress bar inside the block (in this process)."""
    global _quiet
    _quiet += 1
    try:
        yield
    finally:
        _quiet -= 1


def _bar_class():
    """``tqdm.auto``'s class; in a kernel, its notebook bar that saves its last frame."""
    from tqdm.auto import tqdm

    try:
        from tqdm.notebook import tqdm as notebook_tqdm
    except ImportError:  # pragma: no cover - tqdm always has it
        return tqdm
    if not issubclass(tqdm, notebook_tqdm):
        return tqdm

    class SavedBar(tqdm):
        """A notebook bar displayed under a display id and displayed again when it closes."""

        def __init__(self, *args, **kwargs):
            from IPython.display import display

            super().__init__(*args, display=False, **kwargs)
            self._handle = None
            if not self.disable:
                self._handle = display(self.container, display_id=True)
                self.displayed = True

        def close(self):
            super().close()
            if getattr(self, "_handle", None) is not None:
                handle, self._handle = self._handle, None
                bundle = self.container._repr_mimebundle_()  # the widget's view and its text
                bundle["text/plain"] = self.container.__repr__(pretty=True)  # █, as the live bar draws
                handle.update(bundle, raw=True)  # the saved output: the last frame

    return SavedBar


@contextmanager
def progress(total: int, desc: str, *, unit: str = "it"):
    """A ``tqdm.auto`` bar over ``total`` items for the block, closed at its end (see the module doc).

    Args:
        total: items the step has (jobs, runs); 0 or 1: no bar (it could only jump to the end).
        desc: the bar's label, e.g. ``"Fig. 14 sweep"``.
        unit: the items' unit.

    Yields:
        The bar (``update(n)`` as items finish); a disabled one where no bar is shown: under
        :func:`quiet`, inside another step's bar, or for ``total <= 1``.
    """
    global _open
    bar = _bar_class()(total=total, desc=desc, unit=unit, disable=bool(_quiet or _open or total <= 1))
    _open += 1
    try:
        yield bar
    finally:
        _open -= 1
        bar.close()
