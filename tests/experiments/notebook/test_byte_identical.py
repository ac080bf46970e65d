"""Figure files are byte-identical across fresh processes and machines' font setups (PNG, PDF, CSV).

Each render runs in a new Python process with its own empty matplotlib cache (as a new machine's
first run), a different hash seed, and, in one of them, a font named "Arial" installed: seaborn's
default list puts Arial first, so a figure that did not pin its font would embed whatever Arial a
machine has. The files must come out the same, and the PDF must embed the pinned DejaVu Sans.
"""

import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

_RENDER = r"""
import sys
from pathlib import Path
import matplotlib
matplotlib.use("Agg")
from matplotlib import font_manager
decoy = sys.argv[2]
if decoy:
    font_manager.fontManager.addfont(decoy)
import matplotlib.pyplot as plt, pandas as pd
from paged.experiments.notebook.plotting import save_figure, use_style
use_style()
fig, (a, b) = plt.subplots(1, 2, figsize=(6, 3))
a.bar(["paged", "orca-max"], [96.3, 20.4], label="token states")
a.set_ylabel("KV memory (%)"); a.legend(loc="lower left")
b.plot([1, 2, 4, 8], [0.1, 0.2, 0.3, 0.9], marker="o"); b.set_xscale("log", base=2)
b.set_title("μ-latency $\\times$ 2"); b.set_xlabel("rate (req/s)")
save_figure(fig, pd.DataFrame({"x": [1, 2, 4, 8], "y": [0.1, 0.2, 0.3, 0.9]}), "fig", sys.argv[1],
            number=2, claim="A figure rendered in a fresh process", show=False)
"""


def _decoy(path: Path) -> Path:
    """DejaVu Serif renamed "Arial": a font a machine may have that is not the pinned one."""
    from fontTools.ttLib import TTFont
    from matplotlib import font_manager

    font = TTFont(font_manager.findfont("DejaVu Serif"))
    for record in font["name"].names:
        if record.nameID in (1, 4, 16):
            record.string = "Arial"
        elif record.nameID == 6:
            record.string = "Arial"
    font.save(path)
    return path


def _render(out: Path, tmp: Path, seed: str, decoy: Path | None) -> dict:
    cache = tmp / f"mplconfig-{out.name}"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp), "MPLCONFIGDIR": str(cache), "PYTHONHASHSEED": seed}
    done = subprocess.run([sys.executable, "-c", _RENDER, str(out), str(decoy or "")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return {ext: (out / f"fig.{ext}").read_bytes() for ext in ("png", "pdf", "csv")}


def _embedded_fonts(pdf: bytes) -> set[str]:
    return {m.decode() for m in re.findall(rb"/BaseFont /[A-Z]{6}\+([\w-]+)", pdf)}


def test_figure_files_are_byte_identical_in_fresh_processes(tmp_path):
    first = _render(tmp_path / "a", tmp_path, "0", None)
    second = _render(tmp_path / "b", tmp_path, "12345", _decoy(tmp_path / "arial.ttf"))
    for ext in first:
        assert first[ext] == second[ext], f"fig.{ext} differs between two fresh processes"
    pdf = first["pdf"]
    assert _embedded_fonts(pdf) == {"DejaVuSans", "DejaVuSans-Bold"}
    assert b"/FontFile2" in pdf and b"/Subtype /Type3" not in pdf  # TrueType (42), never Type 3
    assert b"/CreationDate" not in pdf and b"/Producer" not in pdf
    streams = [zlib.decompressobj().decompress(m) for m in re.findall(rb"stream\r?\n(.*?)endstream", pdf, re.S)]
    assert not any(b"Arial" in s or b"DejaVu Serif" in s for s in streams)
