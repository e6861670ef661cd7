"""Atomic writes: all or nothing, with ordinary file modes."""

import os
import stat
from pathlib import Path

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


def _dead_pid():
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _age(path, seconds):
    import time

    t = time.time() - seconds
    os.utime(path, (t, t))


def test_a_killed_writers_stale_temporary_is_removed_by_the_next_write(tmp_path):
    import signal
    import subprocess
    import sys
    import textwrap

    # a writer killed with SIGKILL in the middle of an atomic write leaves its temporary
    code = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1] / 'src')!r})
        from proas.fileio import atomic_open
        with atomic_open({str(tmp_path / 'state.json')!r}) as fh:
            fh.write("half"); fh.flush(); print("writing", flush=True); time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    live = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(live) == 1 and f".{proc.pid}." in live[0].name
    _age(live[0], 3600)
    atomic_write_text(tmp_path / "other.txt", "x")
    assert live[0].exists()  # its writer still runs, however old the file
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    atomic_write_text(tmp_path / "other.txt", "y")
    assert not live[0].exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.txt"]


def test_only_old_temporaries_of_our_naming_with_no_live_writer_are_removed(tmp_path):
    from proas.fileio import STALE_TMP_AGE_S

    dead = _dead_pid()
    files = {
        f".a.json.{dead}.abcd1234.tmp": (3600, False),      # dead writer, old: removed
        f".a.json.{dead}.abcd1235.tmp": (60, True),         # dead writer, but recent: kept
        f".a.json.{os.getpid()}.abcd1236.tmp": (3600, True),  # this live process: kept
        ".b.json.x7_k2m9q.tmp": (STALE_TMP_AGE_S + 60, False),  # no pid (older proas), old: removed
        ".b.json.x7_k2m9r.tmp": (60, True),                 # no pid, recent: kept
        "notes.tmp": (3600, True),                          # not our naming
        ".b.json.swp": (3600, True),
        ".c.json.TOOLONG_RANDOM.tmp": (3600, True),
    }
    for name, (age, _) in files.items():
        (tmp_path / name).write_text("x")
        _age(tmp_path / name, age)
    atomic_write_text(tmp_path / "a.json", "{}")
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {"a.json"} | {n for n, (_, kept) in files.items() if kept}


def test_a_killed_atomic_dirs_staging_folder_is_removed_by_the_next_one(tmp_path):
    """A SIGKILLed ``atomic_dir`` (``lm export``, say) leaves its staging folder; the next
    atomic_dir beside it removes it once it is old and its process is gone, and never a folder of
    a live process, a recent one, or one that only looks like ours."""
    from proas.fileio import atomic_dir

    dead = _dead_pid()
    stale = tmp_path / f".model.{dead}.abcd1234.tmp"
    recent = tmp_path / f".model.{dead}.abcd1235.tmp"
    live = tmp_path / f".model.{os.getpid()}.abcd1236.tmp"
    nopid = tmp_path / ".model.abcd1237.tmp"
    for d in (stale, recent, live, nopid):
        (d / "sub").mkdir(parents=True)
        (d / "sub" / "weights.bin").write_bytes(b"x" * 10)
    for d in (stale, live, nopid):
        _age(d, 3600)
    with atomic_dir(tmp_path / "model2") as stage:
        (stage / "a.txt").write_text("a")
    assert not stale.exists()
    assert recent.exists() and live.exists() and nopid.exists()
    assert (tmp_path / "model2" / "a.txt").read_text() == "a"


def test_a_target_that_is_a_folder_or_below_a_file_is_named_and_leaves_nothing(tmp_path, capsys):
    """*Found:* a target that was a folder failed at the rename, naming the hidden temporary
    (``Is a directory (.e1.123.x.tmp -> e1)``); one below a file said ``File exists``."""
    from proas.cli import main
    from proas.errors import ProasError
    from proas.fileio import atomic_write_all

    folder, blocker = tmp_path / "folder", tmp_path / "blocker"
    folder.mkdir()
    blocker.write_text("x")
    with pytest.raises(IsADirectoryError) as exc:
        atomic_write_text(folder, "new")
    assert exc.value.filename == str(folder)
    for write in (lambda p: atomic_write_text(p, "new"), lambda p: atomic_write_all([(p, b"new")])):
        with pytest.raises((NotADirectoryError, ProasError), match="Not a directory"):
            write(blocker / "out.txt")
    assert blocker.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["blocker", "folder"]
    assert not list(folder.iterdir())
    # on the command line: one line naming the folder (heldout select writes its --out atomically)
    runs = tmp_path / "src" / "runs.csv"
    runs.parent.mkdir()
    runs.write_text("env,row,seed,tuning_metric\n")
    assert main(["heldout", "select", str(runs), "--out", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(folder) in err and ".tmp" not in err, err
    assert not list(folder.iterdir())
