"""Files are never half-written (paged.atomic): an interrupted write leaves the old complete file."""

import json
import os

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from paged import atomic
from paged.experiments.notebook import manifest, plotting


class Interrupted(KeyboardInterrupt):
    pass


def test_write_replaces_whole_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "a.csv"
    atomic.write_text(path, "old\n")
    atomic.write_text(path, "new\n")
    assert path.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv"]


def test_a_write_keeps_the_replaced_files_mode_and_a_new_file_gets_the_umasks(tmp_path):
    old_umask = os.umask(0o022)
    try:
        new = atomic.write_text(tmp_path / "new.csv", "x\n")
        assert new.stat().st_mode & 0o777 == 0o644  # not mkstemp's 0600: figures stay readable by others
        kept = tmp_path / "kept.csv"
        kept.write_text("old\n")
        kept.chmod(0o664)
        atomic.write_text(kept, "new\n")
        assert kept.stat().st_mode & 0o777 == 0o664
    finally:
        os.umask(old_umask)


def test_failed_block_keeps_the_old_file(tmp_path):
    path = tmp_path / "a.png"
    atomic.write_bytes(path, b"old")
    with pytest.raises(Interrupted):
        with atomic.atomic_path(path) as tmp:
            tmp.write_bytes(b"half of a new")
            raise Interrupted
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png"]


def _figure():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 2])
    return fig


def test_interrupted_rename_of_a_figure_leaves_the_old_files(tmp_path, monkeypatch):
    data = pd.DataFrame({"x": [0, 1], "y": [1, 2]})
    paths = plotting.save_figure(_figure(), data, "fig", tmp_path, show=False)
    before = {ext: p.read_bytes() for ext, p in paths.items()}
    calls = []

    def interrupted_replace(src, dst):  # interrupted between the temporary file and the rename
        calls.append(dst)
        raise Interrupted

    monkeypatch.setattr(atomic.os, "replace", interrupted_replace)
    with pytest.raises(Interrupted):
        plotting.save_figure(_figure(), data.assign(y=[5, 6]), "fig", tmp_path, show=False)
    assert calls, "save_figure did not go through paged.atomic"
    assert {ext: p.read_bytes() for ext, p in paths.items()} == before
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["fig.csv", "fig.pdf",
                                                                                          "fig.png"]
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_saving_a_figure_keeps_the_manifest_true(tmp_path):
    data = pd.DataFrame({"x": [0, 1], "y": [1, 2]})
    paths = plotting.save_figure(_figure(), data, "fig", tmp_path, show=False)
    entry = {"name": "fig", "files": {ext: manifest._file_entry(p) for ext, p in paths.items()}}
    (tmp_path / "MANIFEST.json").write_text(json.dumps({"figures": [entry]}))
    plotting.save_figure(_figure(), data.assign(y=[5, 6]), "fig", tmp_path, show=False)
    files = json.loads((tmp_path / "MANIFEST.json").read_text())["figures"][0]["files"]
    assert files["csv"] == manifest._file_entry(tmp_path / "fig.csv")  # the hashes the files have now
    assert files["csv"]["sha256"] != entry["files"]["csv"]["sha256"]
    assert not manifest.update_manifest_entry(tmp_path, "not listed", paths)


def test_interrupted_manifest_write_keeps_the_old_manifest(tmp_path, monkeypatch):
    (tmp_path / "MANIFEST.json").write_text("{}\n")
    monkeypatch.setattr(atomic.os, "replace", lambda src, dst: (_ for _ in ()).throw(Interrupted()))
    with pytest.raises(Interrupted):
        manifest.write_manifest([], tmp_path)
    assert (tmp_path / "MANIFEST.json").read_text() == "{}\n"
    assert os.listdir(tmp_path) == ["MANIFEST.json"] or all(
        n in ("MANIFEST.json", ".MANIFEST.json.lock") for n in os.listdir(tmp_path))
