"""A disk that fills up, or a run directory that is read-only: one line and exit 2, and nothing
up to the last complete checkpoint is lost (issue #27, item 10).

The full disk is simulated where every write of proas ends: ``os.fsync`` (atomic writes and the
metrics records are all fsynced) fails with ``ENOSPC`` from a chosen call on, as a disk that
stays full. The failure is placed at each kind of write of a training run: a checkpoint's last
file (``checksums.json``, the mark of a complete one; every other file of it is written), the
``latest.json`` pointer after it, and a metrics record. The read-only directory is real: a
read-only bind mount (as root, where file modes do not stop writes) or the write bits removed.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from proas import cli
from proas.train import checkpoint as ckpt

RUN = ["env.name=toy_env:make_env", "env.options.n_train=24", "env.options.n_valid=8", "env.tasks_per_step=4",
       "env.group_size=4", "train.steps=3", "train.val_every=2", "train.save_every=1", "algo.minibatch_size=16",
       "seed=3", "train.progress=false", "train.rollout_log_every=2"]


def _metrics(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """An uninterrupted run, and the file each of its fsyncs was for, in order."""
    run = tmp_path_factory.mktemp("clean") / "run"
    seen: list[str] = []
    real = os.fsync

    def record(fd):
        seen.append(_fd_path(fd))
        return real(fd)

    mp = pytest.MonkeyPatch()
    mp.setattr(os, "fsync", record)
    try:
        assert cli.main(["train", *RUN, "--run-dir", str(run)]) == 0
    finally:
        mp.undo()
    return run, seen


def _complete(run_dir: Path) -> list[int]:
    """Steps whose checkpoint is complete and verifies."""
    return [int(d.name.split("_")[1]) for d in sorted((run_dir / "checkpoints").glob("step_*"))
            if ckpt.verify_checkpoint(d) is None]


#: where the disk fills: the index of the first fsync that fails, from the clean run's fsyncs
WHERE = {
    "checksums.json of checkpoint 2": lambda seen: next(
        i for i, p in enumerate(seen) if "step_000002" in p and "checksums" in p),
    "latest.json after checkpoint 2": lambda seen: next(
        i for i, p in enumerate(seen) if "/.latest.json." in p and any("step_000002" in q for q in seen[:i])),
    "the metrics record of step 3": lambda seen: [i for i, p in enumerate(seen) if p.endswith("metrics.jsonl")][3],
}


@pytest.mark.slow
@pytest.mark.parametrize("where", list(WHERE))
def test_a_full_disk_is_one_line_and_the_last_complete_checkpoint_survives(tmp_path, capsys, monkeypatch, clean,
                                                                          where):
    clean_run, seen = clean
    fail_from = WHERE[where](seen)
    run = tmp_path / "run"
    calls = {"n": 0}
    real = os.fsync
    snapshot: dict = {}

    def full_disk(fd):
        calls["n"] += 1
        if calls["n"] > fail_from:
            if not snapshot:  # what was complete when the disk filled
                snapshot["complete"] = _complete(run)
                snapshot["metrics"] = _metrics(run)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(os, "fsync", full_disk)
    rc = cli.main(["train", *RUN, "--run-dir", str(run)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "No space left on device" in err, err
    monkeypatch.setattr(os, "fsync", real)

    last = max(snapshot["complete"])
    assert last >= 1
    assert last in _complete(run)  # still there, and it verifies
    assert ckpt.latest_checkpoint(run) is not None
    kept = [r for r in _metrics(run) if r["step"] <= last]
    assert kept == [r for r in snapshot["metrics"] if r["step"] <= last]  # no record lost
    assert [r["step"] for r in kept] == list(range(last + 1))

    # room again: the run resumes and ends with the metrics of the uninterrupted run
    assert cli.main(["train", "--resume", str(run)]) == 0
    assert _metrics(run) == _metrics(clean_run)


# ------------------------------------------------------------------ read-only run directory


def _make_read_only(path: Path):
    """Make ``path`` read-only for this process; return the undo, or skip if it cannot be."""
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [path, *path.rglob("*")]}
        for p in modes:
            p.chmod(modes[p] & ~0o222)

        def undo():
            for p, mode in modes.items():
                p.chmod(mode)
        return undo
    mount = shutil.which("mount")
    ok = mount and subprocess.run([mount, "--bind", str(path), str(path)], capture_output=True).returncode == 0
    if ok and subprocess.run([mount, "-o", "remount,ro,bind", str(path)], capture_output=True).returncode == 0:
        return lambda: subprocess.run(["umount", str(path)], check=True)
    if ok:
        subprocess.run(["umount", str(path)], check=True)
    pytest.skip("cannot make a read-only directory here (root, and no bind mount)")


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_read_only_run_directory_is_one_line_and_nothing_is_written(tmp_path, capsys, clean):
    clean_run, _ = clean
    ro = tmp_path / "ro"
    shutil.copytree(clean_run, ro / "run")
    before = _tree(ro)
    undo = _make_read_only(ro)
    try:
        commands = [
            ["train", "--resume", str(ro / "run"), "train.steps=4"],  # more steps into a read-only run
            ["train", *RUN, "--run-dir", str(ro / "new")],  # a new run under a read-only folder
            ["inspect", str(ro / "run"), "--html", str(ro / "page.html")],
        ]
        for argv in commands:
            rc = cli.main(argv)
            err = capsys.readouterr().err
            assert rc == 2 and err.count("\n") == 1 and err.startswith("proas: error: "), (argv, err)
            assert "read-only" in err.lower() or "permission" in err.lower(), err
    finally:
        undo()
    assert _tree(ro) == before
