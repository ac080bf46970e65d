"""The tour's drawings stay legible at every value their sliders allow: no label overlaps another
or leaves the figure, and the figure stays about a notebook cell wide (so it is not shrunk)."""

import itertools

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from paged.experiments.nb00_tour import tour
from paged.experiments.nb00_tour import tour_figures as draw

#: Widest figure (inches) that a JupyterLab cell shows at its size (about 1,100 px at 110 dpi).
MAX_WIDTH_IN = 10.5


def _problems(fig) -> list[str]:
    FigureCanvasAgg(fig)
    renderer = fig.canvas.get_renderer()
    texts = [t for ax in fig.axes for t in ax.texts if t.get_text().strip()]
    boxes = [t.get_window_extent(renderer) for t in texts]
    found = [f"{texts[i].get_text()!r} overlaps {texts[j].get_text()!r}"
             for i, j in itertools.combinations(range(len(texts)), 2) if boxes[i].overlaps(boxes[j])]
    found += [f"{t.get_text()!r} leaves the figure" for t, b in zip(texts, boxes)
              if b.x0 < 0 or b.y0 < 0 or b.x1 > fig.bbox.x1 or b.y1 > fig.bbox.y1]
    return found


@pytest.mark.parametrize("block_size", range(1, 17))  # the pages view's block-size slider: 1 to 16
def test_pages_labels_stay_apart_at_every_block_size(block_size):
    for num_tokens in (1, 11, 44):  # the tokens slider's ends and the tour's default
        fig = draw.draw_pages(tour.pages(num_tokens, block_size))
        assert _problems(fig) == [], (block_size, num_tokens)
        assert fig.get_size_inches()[0] <= MAX_WIDTH_IN


@pytest.mark.parametrize("block_size", range(1, 5))  # the block-table view's slider: 1 to 4 words
def test_block_table_labels_stay_apart(block_size):
    view = tour.block_tables(tour.SENTENCES, block_size, 0)
    for request in range(len(tour.SENTENCES)):
        assert _problems(draw.draw_block_tables(view, request)) == [], (block_size, request)
