"""A run's summary (issue #27, item 12): a --resume of a finished run leaves it as it was, and
after a kill it counts the wall time of every part of the run, not only the resumed one."""

from __future__ import annotations

import io
import json
import time

import pytest
import torch
from rich.console import Console

from proas.train.config import build_config
from proas.train.loop import train

torch.set_num_threads(1)

TOY = ["env.name=toy_env:make_env", "env.options.n_places=4", "env.options.max_steps=8", "env.options.n_train=32",
       "env.options.n_valid=16", "env.tasks_per_step=4", "env.group_size=4", "train.progress=false"]


def cfg(*over):
    return build_config([*TOY, *over])


def _quiet():
    return Console(file=io.StringIO(), width=200)


def _rows(run):
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("kill_after", [None, 3])
def test_resuming_a_finished_run_changes_nothing(tmp_path, kill_after):
    """Finished in one go or after a kill, a later --resume changes no file of the run and
    writes neither the summary nor the curve again."""
    run = tmp_path / "run"
    c = cfg("train.steps=4", "train.val_every=2", "train.save_every=2")
    if kill_after:
        train(c, run_dir=run, stop_after=kill_after, console=_quiet())
        train(None, resume=run, console=_quiet())
    else:
        train(c, run_dir=run, console=_quiet())
    files = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in run.rglob("*")
             if p.is_file() and p.name != ".lock" and "tb" not in p.parts}
    summary = json.loads((run / "summary.json").read_text())
    time.sleep(0.05)
    out = io.StringIO()
    again = train(None, resume=run, console=Console(file=out, width=200))
    assert again == summary
    assert "finished already: 4 of 4 steps" in out.getvalue()
    for path, (data, mtime) in files.items():
        assert path.read_bytes() == data, path
        if path.name in ("summary.json", "curve.png"):
            assert path.stat().st_mtime_ns == mtime, path  # not even written again


def test_a_finished_run_without_its_summary_gets_one_on_resume(tmp_path):
    run = tmp_path / "run"
    train(cfg("train.steps=2", "train.val_every=0"), run_dir=run, console=_quiet())
    (run / "summary.json").unlink()  # killed between the last step and the summary
    summary = train(None, resume=run, console=_quiet())
    assert json.loads((run / "summary.json").read_text()) == summary and summary["steps"] == 2


def test_the_summary_counts_the_wall_time_of_every_part(tmp_path, monkeypatch):
    """Killed after step 3 (checkpoint at step 2) and resumed: the summary's wall time is the
    first part's up to the checkpoint plus the resumed part's, and every record carries the
    run's wall time so far, rising from record to record across the resume."""
    import proas.train.loop as loop_mod

    run = tmp_path / "run"
    real = loop_mod.Trainer.train_step

    def slow(self):  # the first part's steps take long: the resumed part alone is far shorter
        time.sleep(0.4)
        return real(self)

    monkeypatch.setattr(loop_mod.Trainer, "train_step", slow)
    train(cfg("train.steps=5", "train.val_every=0", "train.save_every=2"), run_dir=run, stop_after=3,
          console=_quiet())
    monkeypatch.setattr(loop_mod.Trainer, "train_step", real)
    first = {r["step"]: r["time/wall"] for r in _rows(run)}
    assert first[2] > 0.8
    summary = train(None, resume=run, console=_quiet())
    rows = _rows(run)
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4, 5]
    walls = [r["time/wall"] for r in rows]
    assert walls == sorted(walls) and walls[2] == first[2]
    resumed = sum(r["time/step"] for r in rows[3:])
    assert summary["wall_s"] >= first[2] + resumed
    assert walls[-1] <= summary["wall_s"] <= walls[-1] + 30  # the summary follows the last record


def test_the_wall_time_of_a_run_written_before_the_key_existed():
    """Records without ``time/wall``: the untrained validation and every step's time."""
    from proas.train.outputs import wall_so_far

    history = [{"step": 0, "time/val": 2.0}, {"step": 1, "time/step": 3.0}, {"step": 2, "time/step": 4.0,
                                                                             "time/val": 1.0}]
    assert wall_so_far(history) == 9.0
    assert wall_so_far([*history, {"step": 3, "time/step": 1.0, "time/wall": 20.0}]) == 20.0
    assert wall_so_far([]) == 0.0


@pytest.mark.parametrize("collect", [True, False])
def test_gc_paused_frees_a_steps_cycles_before_freezing_unless_told_not_to(collect):
    """``gc_paused(freeze=True)`` frees the cycles the step left before it freezes what is alive;
    with ``collect=False`` (the trainer's start) a cycle stays until ``gc.unfreeze``."""
    import gc
    import weakref

    from proas.train.outputs import gc_paused

    class Node:
        pass

    with gc_paused(freeze=True, collect=collect):
        node = Node()
        node.me = node
        ref = weakref.ref(node)
        del node
    try:
        assert (ref() is None) is collect
    finally:
        gc.unfreeze()
    gc.collect()
    assert ref() is None
