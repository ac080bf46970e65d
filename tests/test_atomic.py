"""Files are never half-written (paged.atomic): an interrupted write leaves the old complete file."""

import os

import pytest

from paged import atomic


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
