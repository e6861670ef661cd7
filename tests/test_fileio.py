"""Atomic writes: all or nothing, with ordinary file modes."""

import os
import stat

import pytest

from proas.fileio import atomic_open, atomic_write_text


def test_new_file_gets_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644


def test_existing_file_keeps_its_mode(tmp_path):
    p = tmp_path / "b.txt"
    p.write_text("old")
    p.chmod(0o640)
    atomic_write_text(p, "new")
    assert p.read_text() == "new" and stat.S_IMODE(p.stat().st_mode) == 0o640


def test_failure_leaves_the_old_content_and_no_temp_file(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text("old")
    with pytest.raises(RuntimeError), atomic_open(p) as fh:
        fh.write("half")
        raise RuntimeError("boom")
    assert p.read_text() == "old"
    assert [q.name for q in tmp_path.iterdir()] == ["c.txt"]
