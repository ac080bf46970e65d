"""The tour's drawings stay legible at every value their sliders allow: no label overlaps another
and the figure, as saved and shown (bbox "tight"), stays a notebook cell wide (so it is not shrunk)."""

import itertools

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from paged.experiments.nb00_tour import tour
from paged.experiments.nb00_tour import tour_figures as draw

MAX_WIDTH_IN = draw.MAX_WIDTH_IN  # a JupyterLab cell (about 950 px) shows it at its size (110 dpi)


def _problems(fig) -> list[str]:
    FigureCanvasAgg(fig)
    renderer = fig.canvas.get_renderer()
    texts = [t for ax in fig.axes for t in ax.texts if t.get_text().strip()]
    boxes = [t.get_window_extent(renderer) for t in texts]
    found = [f"{texts[i].get_text()!r} overlaps {texts[j].get_text()!r}"
             for i, j in itertools.combinations(range(len(texts)), 2) if boxes[i].overlaps(boxes[j])]
    width = fig.get_tightbbox(renderer).width  # inches: figures are saved and shown with bbox "tight"
    if width > MAX_WIDTH_IN + 0.05:
        found.append(f"{width:.2f} in wide, more than a cell shows at its size ({MAX_WIDTH_IN} in)")
    return found


@pytest.mark.parametrize("block_size", range(1, 17))  # the pages view's block-size slider: 1 to 16
def test_pages_labels_stay_apart_at_every_block_size(block_size):
    for num_tokens in (1, 11, 44):  # the tokens slider's ends and the tour's default
        fig = draw.draw_pages(tour.pages(num_tokens, block_size))
        assert _problems(fig) == [], (block_size, num_tokens)


@pytest.mark.parametrize("block_size", range(1, 5))  # the block-table view's slider: 1 to 4 words
def test_block_table_labels_stay_apart(block_size):
    view = tour.block_tables(tour.SENTENCES, block_size, 0)
    for request in range(len(tour.SENTENCES)):
        fig = draw.draw_block_tables(view, request)
        assert _problems(fig) == [], (block_size, request)


@pytest.mark.parametrize("prefix_len, a_len, b_len", [(1, 0, 0), (12, 3, 5), (48, 16, 16)])
def test_sharing_stays_a_cell_wide_with_its_labels_apart(prefix_len, a_len, b_len):
    fig = draw.draw_sharing(tour.sharing(prefix_len, a_len, b_len, 4))
    assert _problems(fig) == []


def test_reservation_and_the_scheduler_replay_stay_a_cell_wide():
    for policy in ("max", "pow2", "oracle"):
        fig = draw.draw_reservation(tour.reservation(3, 12, policy, 16))
        assert _problems(fig) == []
    trace = tour.tiny_trace(8)
    steps = tour.replay(trace, "paged", num_slots=32, block_size=4, max_seq_len=32)
    for step in (0, len(steps) // 2, len(steps) - 1):
        fig = draw.draw_replay(steps, len(trace), step, system="paged", block_size=4)
        assert _problems(fig) == []
