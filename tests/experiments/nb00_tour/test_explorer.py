"""The tour's explorers: the default state is saved, a control change redraws from the library."""

import pytest

from paged.experiments.nb00_tour import explorer
from paged.experiments.nb00_tour import tour


@pytest.fixture(autouse=True)
def _quiet_display(monkeypatch):
    """Outside a kernel IPython's display prints reprs; keep what was displayed instead."""
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.append((objs, kw)) or _Handle(shown))
    return shown


class _Handle:
    def __init__(self, shown):
        self.shown = shown

    def update(self, obj, **kw):
        self.shown.append(((obj,), kw))


def test_a_slider_move_redraws_from_the_library(tmp_path, _quiet_display):
    view = explorer.reservation(prompt_len=3, output_len=4, max_seq_len=16, output_dir=tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {  # no lock file either: the manifest's lock is the folder's
        "tour_reservation.png", "tour_reservation.pdf", "tour_reservation.csv", "MANIFEST.json"}
    first = view.png
    assert first == (tmp_path / "tour_reservation.png").read_bytes()  # the default state is the saved figure
    view.controls["output_len"].value = 9
    assert view.redraws == 1 and view.png != first
    assert list(view.data["use"]).count("output") == 9
    view.controls["policy"].value = "pow2"
    assert len(view.data) == 16  # 3 + 2**ceil(log2 9) = 19 > 16: capped at max_seq_len
    assert len(_quiet_display) == 4  # controls, figure, two updates


def test_impossible_settings_show_a_message(tmp_path):
    view = explorer.reservation(prompt_len=3, output_len=4, max_seq_len=16, output_dir=tmp_path)
    view.controls["output_len"].value = 15  # 3 + 15 > 16
    assert view.redraws == 1 and view.png  # a message figure, no exception


def test_scheduler_explorer_replays_the_chosen_system(tmp_path):
    view = explorer.scheduler(tour.tiny_trace(8, 64, rate=2.0), num_slots=64, max_seq_len=64, output_dir=tmp_path)
    paged_steps = len(view.data)
    view.controls["system"].value = "orca-max"
    assert len(view.data) > paged_steps  # one request at a time takes longer
    view.controls["step"].value = 0
    assert view.redraws == 2


@pytest.mark.parametrize("make", [
    lambda out: explorer.pages(output_dir=out), lambda out: explorer.block_tables(output_dir=out),
    lambda out: explorer.sharing(output_dir=out),
    lambda out: explorer.batch(prompt_lens=[2, 5], output_lens=[3, 8], batch_size=2, output_dir=out),
])
def test_every_explorer_saves_its_default_state(tmp_path, make):
    view = make(tmp_path)
    assert len(list(tmp_path.glob("tour_*.png"))) == 1 and view.data is not None
    control = next(iter(view.controls.values()))
    control.value = control.value + 1 if control.value < control.max else control.value - 1
    assert view.redraws == 1


def test_batch_explorer_refuses_a_batch_larger_than_its_lengths(tmp_path):
    with pytest.raises(ValueError, match="batch of 3"):
        explorer.batch(prompt_lens=[2, 5], output_lens=[3, 8], batch_size=3, output_dir=tmp_path)


@pytest.mark.parametrize("view, kwargs, name", [
    ("reservation", {"prompt_len": -1}, "prompt_len"),
    ("reservation", {"output_len": 0}, "output_len"),
    ("reservation", {"prompt_len": 10, "output_len": 10, "max_seq_len": 16}, "output_len"),
    ("pages", {"block_size": 0}, "block_size"),
    ("pages", {"num_tokens": 0}, "num_tokens"),
    ("block_tables", {"block_size": 9}, "block_size"),
    ("sharing", {"prefix_len": 0}, "prefix_len"),
    ("sharing", {"a_len": -3}, "a_len"),
    ("sharing", {"block_size": 2.5}, "block_size"),
    ("pages", {"num_tokens": 10**9}, "num_tokens"),
    ("reservation", {"policy": "bogus"}, "policy"),
])
def test_impossible_values_are_refused_by_name(tmp_path, view, kwargs, name):
    with pytest.raises(ValueError, match=name):
        getattr(explorer, view)(output_dir=tmp_path, **kwargs)


def test_batch_and_scheduler_refuse_impossible_values(tmp_path):
    with pytest.raises(ValueError, match="prompt_lens"):
        explorer.batch(prompt_lens=[3, -1], output_lens=[2, 2], batch_size=2, output_dir=tmp_path)
    with pytest.raises(ValueError, match="block_size"):
        explorer.batch(prompt_lens=[3], output_lens=[2], batch_size=1, block_size=0, output_dir=tmp_path)
    with pytest.raises(ValueError, match="batch_size"):
        explorer.batch(prompt_lens=[3, 4], output_lens=[2, 2], batch_size=2.5, output_dir=tmp_path)
    with pytest.raises(ValueError, match="policy"):
        explorer.batch(prompt_lens=[3, 4], output_lens=[2, 2], batch_size=2, policy="bogus", output_dir=tmp_path)
    with pytest.raises(ValueError, match="num_slots"):
        explorer.scheduler([], num_slots=2, block_size=4, output_dir=tmp_path)


def test_scheduler_step_slider_ends_at_the_replays_last_step(tmp_path, _quiet_display):
    view = explorer.scheduler(tour.tiny_trace(8, 64, rate=2.0), num_slots=64, max_seq_len=64, output_dir=tmp_path)
    step = view.controls["step"]
    assert step.max == len(view.data) - 1
    view.controls["system"].value = "orca-max"  # a longer replay: the slider reaches its end
    assert step.max == len(view.data) - 1
    step.value = step.max
    shown = _quiet_display[-1][1]["metadata"][explorer.EXPLORER_METADATA_KEY]
    assert not shown["message"] and shown["values"]["step"] == step.max
    assert any(f"orca-max, step {step.max} (" in text for text in shown["text"])
    view.controls["system"].value = "paged"  # shorter again: the value moves to the new last step
    assert step.max == step.value == len(view.data) - 1


def test_every_slider_leaves_room_for_its_track():
    long, short = explorer._slider("answer tokens actually generated", 4, 1, 15), explorer._slider("step", 0, 0, 9)
    width = lambda s: int(s.layout.width.removesuffix("px")) - int(s.style.description_width.removesuffix("px"))
    assert width(long) == width(short) >= 250  # the same track and readout, whatever the description
