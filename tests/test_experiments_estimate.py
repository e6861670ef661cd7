"""``proas experiment run`` says how long the grid will take before it starts a run (issue #27,
item 12), from the step times measured in the results directory, per env and policy, and says
so; with none measured it gives no figure rather than a stale constant (issue #45: "about 10.0 h"
from a documented 3.2 s a step, for a grid that took 17 minutes on 16 cores). As runs finish,
the runner gives the figure for the rest."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import proas.experiments.runner as runner
from proas.cli import main
from proas.experiments.spec import load_study


def _fake_run(run_dir: Path, env: str, steps: int, seconds_per_step: float, *, policy: str = "scorer",
              finished: bool = True) -> None:
    """A run directory as the trainer leaves it: config.yaml, metrics.jsonl with its wall time
    (validation every 10 steps, dearer), and summary.json once finished."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(f"env:\n  name: {env}\npolicy:\n  kind: {policy}\n")
    rows, wall = [{"step": 0, "time/wall": 5.0}], 5.0
    for k in range(1, steps + 1):
        step = seconds_per_step * (2.0 if k % 10 == 0 else 0.9)
        wall += step
        rows.append({"step": k, "time/step": step, "time/wall": wall})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if finished:
        (run_dir / "summary.json").write_text(json.dumps({"steps": steps}))


def test_with_nothing_measured_there_is_no_figure_and_the_line_says_why(tmp_path, capsys, monkeypatch):
    seen = {}

    def fake_run_grid(study, specs, out, **kw):
        seen["printed"] = capsys.readouterr().out  # what was said before the first run
        return runner.GridResult(done=[s.key for s in specs], skipped=[], failed=[])

    monkeypatch.setattr(runner, "run_grid", fake_run_grid)
    assert main(["experiment", "run", "main", "--rows", "grpo", "grpo_proas", "--seeds", "0", "--jobs", "1",
                 "--out", str(tmp_path)]) == 0
    line = seen["printed"].strip().splitlines()[-1]
    assert line == (f"main: 4 runs to go; no time estimate (no measured step times yet for household scorer, "
                    f"shop scorer in {tmp_path}: an estimate follows once a run has logged 10 steps)")


def test_step_times_measured_under_out_are_the_figure(tmp_path, capsys, monkeypatch):
    """Runs of any study under OUT count, per env and policy: the median of their seconds per
    step (wall time over steps, validations and start-up included); a run's steps already logged
    are not counted again."""
    study = load_study("main")
    for seed, per_step in enumerate((0.5, 0.6, 0.8)):  # another study's household runs, finished
        _fake_run(tmp_path / "household" / "other_row" / f"seed{seed}", "household", 150, per_step)
    _fake_run(tmp_path / "household" / "short" / "seed0", "household", 5, 50.0)  # too few steps to count
    _fake_run(tmp_path / "shop" / "lm_row" / "seed0", "shop", 20, 30.0, policy="lm")  # another policy
    specs = study.runs(tmp_path, seeds=[0, 1], rows=["grpo"], envs=["household"])
    _fake_run(specs[0].run_dir(tmp_path), "household", 100, 0.6, finished=False)  # half done: it counts too
    status = {specs[0].key: runner.PARTIAL, specs[1].key: runner.NEW}
    est = runner.estimate(study, specs, tmp_path, status, 1)
    per_step = (5.0 + 100 * 0.6 * 1.01) / 100  # the partial run: its wall time over its 100 steps
    median = sorted([0.5 * 1.01 + 5.0 / 150, 0.6 * 1.01 + 5.0 / 150, 0.8 * 1.01 + 5.0 / 150, per_step])
    median = (median[1] + median[2]) / 2
    assert est.runs == 2 and est.run_seconds == pytest.approx((50 + 150) * median)
    assert f"household scorer: {median:.2g} s a step, the median of 4 runs' step times in {tmp_path} " \
           f"(3 finished)" in est.line()
    # the shop lm run is no figure for a shop scorer run
    shop = study.runs(tmp_path, seeds=[0], rows=["grpo"], envs=["shop"])
    assert runner.estimate(study, shop, tmp_path, {}, 1).wall_seconds is None


@pytest.mark.parametrize("jobs", [1, 2, 64])
def test_runs_at_a_time_are_the_jobs_up_to_the_cores_and_the_runs(tmp_path, jobs):
    study = load_study("main")
    _fake_run(tmp_path / "household" / "x" / "seed0", "household", 150, 1.0)
    specs = study.runs(tmp_path, seeds=[0, 1, 2], rows=["grpo"], envs=["household"])
    est = runner.estimate(study, specs, tmp_path, {}, jobs)
    parallel = min(jobs, os.cpu_count() or 1, 3)
    assert est.parallel == parallel and est.wall_seconds == pytest.approx(est.run_seconds / parallel)
    assert f"at {parallel} at a time" in est.line()


def test_a_finished_run_is_not_counted(tmp_path):
    study = load_study("main")
    _fake_run(tmp_path / "shop" / "x" / "seed0", "shop", 150, 1.0)
    specs = study.runs(tmp_path, seeds=[0, 1], rows=["grpo"], envs=["shop"])
    est = runner.estimate(study, specs, tmp_path, {specs[0].key: runner.DONE}, 1)
    assert est.runs == 1 and est.run_seconds == pytest.approx(150 * (1.01 + 5.0 / 150))


FAKE_TRAINER = """
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
run.mkdir(parents=True, exist_ok=True)
(run / "config.yaml").write_text("env:\\n  name: household\\npolicy:\\n  kind: scorer\\n")
rows = [{"step": k, "time/wall": 2.0 * k} for k in range(11)]
(run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in rows))
(run / "summary.json").write_text(json.dumps({"steps": 10}))
"""


def test_the_runner_gives_the_figure_for_the_rest_as_runs_finish(tmp_path, monkeypatch):
    """A grid that starts with nothing measured: once its first run finishes, the log says how
    long the rest should take, from that run's step time (a stand-in trainer that logs 10 steps
    of 2 s each, so that the test takes no training time)."""
    monkeypatch.setattr(runner, "_command", lambda spec, out, status, steps: [
        sys.executable, "-c", FAKE_TRAINER, str(spec.run_dir(out))])
    study = load_study("main")
    study.steps = 10
    out = tmp_path / "out"
    specs = study.runs(out, seeds=[0, 1], rows=["grpo"], envs=["household"])
    assert runner.estimate(study, specs, out, {}, 1).wall_seconds is None
    lines: list[str] = []
    res = runner.run_grid(study, specs, out, jobs=1, log=lines.append, poll_s=0.02)
    assert not res.failed, lines
    to_go = [ln for ln in lines if ln.startswith("  to go:")]
    assert len(to_go) == 1, lines  # after the first of two runs; nothing is left after the second
    assert to_go[0].startswith("  to go: 1 runs to go, about 20 s of run time, 20 s at 1 at a time (household "
                               "scorer: 2 s a step, the median of 1 runs' step times in "), to_go[0]
    assert to_go[0].endswith("(1 finished))")
