"""A figure's PNG, PDF, CSV and manifest entry change together (figure_set, manifest, save_figure)."""

import json
import os
import signal

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from paged.experiments.notebook import figure_set, manifest, plotting
from paged.experiments.notebook.provenance import RUN_ENV


class Interrupted(KeyboardInterrupt):
    pass


def _figure(y=(1, 2)):
    plotting.use_style()
    fig, ax = plt.subplots()
    ax.plot([0, 1], list(y))
    return fig


def _save(folder, y=(1, 2), name="fig"):
    fig = _figure(y)
    try:
        return plotting.save_figure(fig, pd.DataFrame({"x": [0, 1], "y": list(y)}), name, folder, show=False)
    finally:
        plt.close(fig)


def _visible(folder):
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def test_save_figure_writes_three_files_and_a_true_entry(tmp_path):
    paths = _save(tmp_path)
    assert _visible(tmp_path) == ["MANIFEST.json", "fig.csv", "fig.pdf", "fig.png"]
    assert paths.png_bytes == paths["png"].read_bytes()
    data = manifest.read_manifest(tmp_path)
    (entry,) = data["figures"]
    assert entry["name"] == "fig" and entry["run"] == "script" and entry["fingerprint"] is None
    assert entry["environment"] in data["environments"]
    assert data["environments"][entry["environment"]]["font"]["family"] == plotting.FONT_FAMILY
    assert manifest.manifest_problems(tmp_path) == []
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(figure_set.STAGING_PREFIX)]


def test_the_manifest_names_files_it_does_not_describe(tmp_path):
    _save(tmp_path)
    (tmp_path / "fig.png").write_bytes(b"edited by hand")
    (tmp_path / "stray.csv").write_text("x\n")
    problems = manifest.manifest_problems(tmp_path)
    assert any(p.startswith("fig.png: its bytes") for p in problems)
    assert "stray.csv: a figure file MANIFEST.json does not list" in problems


@pytest.mark.parametrize("stop_at", range(10))  # every rename of a save: staging, journal, commit
def test_an_interrupted_commit_leaves_the_old_set_or_finishes_as_the_new(tmp_path, monkeypatch, stop_at):
    """Interrupt the k-th rename of a save: before the journal, the old set stays; after it, the commit
    is finished (by the save's clean-up or the next reader). The files and the manifest agree."""
    _save(tmp_path, (1, 2))
    old = {p.name: p.read_bytes() for p in tmp_path.iterdir() if not p.name.startswith(".")}
    real, calls = os.replace, []

    def replace(src, dst):
        calls.append(dst)
        if len(calls) > stop_at:
            raise Interrupted
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(Interrupted):
        _save(tmp_path, (5, 6))
    monkeypatch.setattr(os, "replace", real)
    data = manifest.read_manifest(tmp_path)  # finishes a journaled commit
    assert manifest.manifest_problems(tmp_path, data) == []
    now = {p.name: p.read_bytes() for p in tmp_path.iterdir() if not p.name.startswith(".")}
    changed = {name for name in old if old[name] != now[name]}
    assert changed == (set(old) if stop_at >= 6 else set())  # from the journal on (6th rename): the new set
    assert not (tmp_path / figure_set.JOURNAL_NAME).exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(figure_set.STAGING_PREFIX)]


def test_a_failed_drawing_leaves_the_old_set_and_no_staging(tmp_path, monkeypatch):
    _save(tmp_path, (1, 2))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if not p.name.startswith(".")}
    fig = _figure((5, 6))
    monkeypatch.setattr(fig, "savefig", lambda *a, **k: (_ for _ in ()).throw(Interrupted()))
    with pytest.raises(Interrupted):
        plotting.save_figure(fig, pd.DataFrame({"x": [1]}), "fig", tmp_path, show=False)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if not p.name.startswith(".")} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging folder, no lock file


def test_a_runner_stages_the_folder_until_it_commits(tmp_path, monkeypatch):
    target = tmp_path / "figures"
    _save(target, (1, 2), name="a")
    staging = figure_set.new_staging(target, "nb")
    monkeypatch.setenv(RUN_ENV, json.dumps({"staging": str(staging), "target": str(target)}))
    _save(target, (3, 4), name="a")
    _save(target, (5, 6), name="b")
    assert _visible(target) == ["MANIFEST.json", "a.csv", "a.pdf", "a.png"]  # nothing moved in yet
    assert sorted(e["name"] for e in figure_set.staged_entries(staging)) == ["a", "b"]
    record = {"fingerprint": "f" * 64, "environment": None}
    made = figure_set.commit(staging, target, notebook="nb", record=record, provenance={"run": "test", "fingerprint": "f" * 64})
    assert sorted(made) == ["a", "b"] and not staging.exists()
    data = manifest.read_manifest(target)
    assert [(f["name"], f["run"], f["notebook"]) for f in data["figures"]] == [("a", "test", "nb"), ("b", "test", "nb")]
    assert data["notebooks"]["nb"]["figures"] == ["a", "b"]
    assert manifest.manifest_problems(target) == []
    # a later run of the notebook that no longer makes "b": its entry goes, its files become unlisted
    staging = figure_set.new_staging(target, "nb")
    monkeypatch.setenv(RUN_ENV, json.dumps({"staging": str(staging), "target": str(target)}))
    _save(target, (7, 8), name="a")
    figure_set.commit(staging, target, notebook="nb", record=record, provenance={"run": "test"})
    data = manifest.read_manifest(target)
    assert [f["name"] for f in data["figures"]] == ["a"] and data["unlisted"] == ["b.csv", "b.pdf", "b.png"]


def test_ctrl_c_waits_for_the_renames(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with figure_set.sigint_held():
            os.kill(os.getpid(), signal.SIGINT)
            (tmp_path / "done").write_text("the block ran to its end")
    assert (tmp_path / "done").exists()


def test_the_manifest_lock_keeps_out_a_second_holder_and_leaves_no_file(tmp_path):
    import fcntl

    def try_lock():
        fd = os.open(tmp_path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another open file: another writer's lock
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    with manifest.locked(tmp_path):
        assert not try_lock()
    assert try_lock()
    _save(tmp_path)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
