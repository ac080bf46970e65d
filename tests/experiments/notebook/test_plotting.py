"""save_figure writes PNG, PDF and CSV, byte-identical on a rerun; notebook parameter checks."""

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from paged.experiments.notebook.plotting import save_figure, use_style


def _figure():
    use_style()
    fig, ax = plt.subplots()
    ax.plot([0.5, 1.5, 2.5], [3.5, 1.5, 2.5])
    return fig


def test_save_figure_is_byte_identical_on_rerun(tmp_path):
    data = pd.DataFrame({"x": [1, 2, 3], "y": [3.0, 1.0, 2.0]})
    first = save_figure(_figure(), data, "demo", tmp_path / "a")
    second = save_figure(_figure(), data, "demo", tmp_path / "b")
    assert set(first) == {"png", "pdf", "csv"}
    for ext in first:
        assert first[ext].read_bytes() == second[ext].read_bytes(), ext
    assert first["csv"].read_text().splitlines()[0] == "x,y"


@pytest.mark.parametrize("name", ["", "a/b", "..\\x"])
def test_save_figure_rejects_paths_as_names(tmp_path, name):
    with pytest.raises(ValueError):
        save_figure(_figure(), pd.DataFrame(), name, tmp_path)


# -- titles, computed values, display in a kernel ----------------------------------------------------
def test_figure_title_forms():
    from paged.experiments.notebook.plotting import figure_title

    assert figure_title("KV cache memory by use", 2) == "Fig. 2 · KV cache memory by use"
    assert figure_title("the scheduler", section="§4.5") == "§4.5 · the scheduler"
    assert figure_title("  only a claim ") == "only a claim"
    with pytest.raises(ValueError, match="one non-empty line"):
        figure_title("two\nlines", 2)


def test_save_figure_titles_the_figure_and_keeps_bytes_stable(tmp_path):
    data = pd.DataFrame({"x": [1]})
    paths = [save_figure(_figure(), data, "demo", tmp_path / d, number="18a", claim="paged vs contiguous kernel")
             for d in "ab"]
    assert paths[0]["png"].read_bytes() == paths[1]["png"].read_bytes()
    fig = _figure()
    save_figure(fig, data, "demo", tmp_path / "c", number="18a", claim="paged vs contiguous kernel")
    assert fig._suptitle.get_text() == "Fig. 18a · paged vs contiguous kernel"


def test_mark_computed_hatches_and_adds_one_legend_entry():
    from paged.experiments.notebook.plotting import COMPUTED_LABEL, mark_computed

    use_style()
    fig, ax = plt.subplots()
    bars = ax.bar(["measured", "computed"], [1, 2], label="tokens/s")
    (line,) = ax.plot([0, 1], [1, 2], marker="o")
    mark_computed(ax, [bars[1], line])
    mark_computed(ax, [bars[1]])  # twice: still one legend entry
    assert bars[1].get_hatch() and not bars[0].get_hatch()
    assert line.get_linestyle() == "--"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels.count(COMPUTED_LABEL) == 1 and "tokens/s" in labels
    with pytest.raises(TypeError, match="patches or lines"):
        mark_computed(ax, [ax.text(0, 0, "x")])


def test_outside_a_kernel_nothing_is_shown_and_the_backend_is_headless():
    import matplotlib

    from paged.experiments.notebook.plotting import in_kernel

    assert not in_kernel()
    assert matplotlib.get_backend().lower() == "agg"


def test_shown_figure_is_the_saved_png_with_its_provenance(tmp_path, monkeypatch):
    import IPython.display

    from paged.experiments.notebook.plotting import FIGURE_METADATA_KEY

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, **kw: shown.append((obj, kw)))
    fig = _figure()
    paths = save_figure(fig, pd.DataFrame({"x": [1]}), "demo", tmp_path, number=2, claim="a claim", show=True)
    (image, kw), = shown
    assert image.data == paths["png"].read_bytes()
    info = kw["metadata"][FIGURE_METADATA_KEY]
    assert info["number"] == "2" and info["claim"] == "a claim" and info["files"]["png"] == "demo.png"
    assert not plt.fignum_exists(fig.number)  # closed: the inline backend would show it a second time


def test_saved_pdfs_embed_truetype_fonts_not_type3(tmp_path):
    """Many publishers' checks reject Type 3 fonts; the PDF embeds TrueType (pdf.fonttype 42) even
    when the caller's style asked for Type 3."""
    data = pd.DataFrame({"x": [1, 2, 3], "y": [3.0, 1.0, 2.0]})
    fig = _figure()
    fig.axes[0].set_title("tokens · blocks ÷ 2")
    with plt.rc_context({"pdf.fonttype": 3}):
        pdf = save_figure(fig, data, "fonts", tmp_path, claim="a claim", number=2)["pdf"].read_bytes()
    assert b"/Subtype /TrueType" in pdf or b"/CIDFontType2" in pdf
    assert b"/Type3" not in pdf
