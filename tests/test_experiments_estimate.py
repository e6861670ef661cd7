"""``proas experiment run`` says how long the grid will take before it starts a run (issue #27,
item 12: `experiment run main` started 54 runs with no estimate), from the steps measured in the
results directory where there are any, else from the documented figure per env."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import proas.experiments.runner as runner
from proas.cli import main
from proas.experiments.spec import load_study

TESTS = Path(__file__).resolve().parent


def _lines(capsys):
    return capsys.readouterr().out.strip().splitlines()


def test_the_estimate_comes_before_any_run_starts(tmp_path, capsys, monkeypatch):
    seen = {}

    def fake_run_grid(study, specs, out, **kw):
        seen["printed"] = capsys.readouterr().out  # what was said before the first run
        return runner.GridResult(done=[s.key for s in specs], skipped=[], failed=[])

    monkeypatch.setattr(runner, "run_grid", fake_run_grid)
    assert main(["experiment", "run", "main", "--rows", "grpo", "grpo_proas", "--seeds", "0", "--jobs", "1",
                 "--out", str(tmp_path)]) == 0
    line = seen["printed"].strip().splitlines()[-1]
    per_step = runner.SECONDS_PER_STEP
    total = runner._duration(150 * 2 * (per_step[("household", "scorer")] + per_step[("shop", "scorer")]))
    assert line.startswith(f"main: 4 runs to go, about {total} of run time, {total} at 1 at a time")
    assert "household scorer: about 3.2 s a step, the documented figure" in line
    assert "shop scorer: about 0.8 s a step, the documented figure" in line


@pytest.mark.parametrize("jobs", [1, 2, 64])
def test_runs_at_a_time_are_the_jobs_up_to_the_cores(tmp_path, jobs):
    study = load_study("main")
    specs = study.runs(tmp_path, seeds=[0, 1], rows=["grpo"], envs=["household"])
    est = runner.estimate(study, specs, tmp_path, {s.key: runner.NEW for s in specs}, jobs)
    assert est.runs == 2 and est.run_seconds == pytest.approx(2 * 150 * 3.2)
    assert est.wall_seconds == pytest.approx(est.run_seconds / min(jobs, os.cpu_count() or 1, 2))


def test_steps_logged_in_the_results_directory_are_the_figure_and_count_as_done(tmp_path, capsys):
    study = load_study("main")
    specs = study.runs(tmp_path, seeds=[0, 1], rows=["grpo"], envs=["shop"])
    # seed 0 logged 100 of its 150 steps at 2.0 s each (and a slow validation step)
    run = specs[0].run_dir(tmp_path)
    run.mkdir(parents=True)
    rows = [{"step": 0}] + [{"step": k, "time/step": 2.0 if k % 10 else 9.0} for k in range(1, 101)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    status = {s.key: runner.PARTIAL if s is specs[0] else runner.NEW for s in specs}
    est = runner.estimate(study, specs, tmp_path, status, 1)
    assert est.run_seconds == pytest.approx((50 + 150) * 2.0)
    assert "shop scorer: 2.0 s a step, the median of 100 steps logged in" in est.line(1)
    # a finished run is not counted at all
    status[specs[1].key] = runner.DONE
    assert runner.estimate(study, specs, tmp_path, status, 1).runs == 1


def test_an_env_without_a_figure_says_so_rather_than_guess(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS))
    study_file = tmp_path / "toy.yaml"
    study_file.write_text("study: toy\ntitle: Toy\nkind: main\nenvs: ['toy_env:make_env']\nseeds: [0]\nsteps: 4\n"
                          "common: [env.fixed_train_set.path=null]\n"
                          "rows:\n  - {id: grpo, label: GRPO, overrides: [algo.estimator=grpo]}\n")
    assert main(["experiment", "run", str(study_file), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    line = _lines(capsys)[-1]
    assert line == f"toy: 1 runs to go; no time estimate (toy_env:make_env scorer: no figure (no step of it " \
                   f"logged in {tmp_path / 'out'} yet))"
