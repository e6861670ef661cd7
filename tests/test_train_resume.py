"""A run killed with SIGKILL and resumed ends with exactly the metrics of an uninterrupted run."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ARGS = [
    "env.name=toy_env:make_env", "env.options.n_train=24", "env.options.n_valid=8", "env.tasks_per_step=4",
    "env.group_size=4", "train.steps=8", "train.val_every=4", "train.save_every=2", "algo.kl_coef=0.01",
    "algo.minibatch_size=16", "seed=3",
]


def _proas(*args, wait=True):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "proas.cli", *args]
    if not wait:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def _metrics(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


@pytest.mark.slow
def test_sigkill_then_resume_matches_an_uninterrupted_run(tmp_path):
    full = tmp_path / "full"
    out = _proas("train", *ARGS, "--run-dir", str(full))
    assert out.returncode == 0, out.stderr

    killed = tmp_path / "killed"
    proc = _proas("train", *ARGS, "--run-dir", str(killed), wait=False)
    metrics = killed / "metrics.jsonl"
    deadline = time.time() + 240
    # kill once step 5 is logged: mid-run, after the step-4 checkpoint, before the step-6 one
    while time.time() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 6:
            break
        if proc.poll() is not None:
            pytest.fail(f"run ended before it could be killed: {proc.stderr.read()}")
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(metrics.read_text().splitlines()) < 9, "the kill came too late to test anything"
    assert not (killed / "summary.json").exists()

    out = _proas("train", "--resume", str(killed))
    assert out.returncode == 0, out.stderr
    a, b = _metrics(full), _metrics(killed)
    assert [r["step"] for r in b] == list(range(9))
    assert a == b
    assert json.loads((killed / "summary.json").read_text())["steps"] == 8


def test_resume_refuses_a_changed_config(tmp_path):
    run = tmp_path / "run"
    out = _proas("train", *ARGS, "train.steps=2", "--run-dir", str(run))
    assert out.returncode == 0, out.stderr
    out = _proas("train", "--resume", str(run), "algo.estimator=gigpo")
    assert out.returncode == 2 and "only train.steps" in out.stderr
    # extending the step budget is allowed and continues from step 2
    out = _proas("train", "--resume", str(run), "train.steps=3")
    assert out.returncode == 0, out.stderr
    assert [r["step"] for r in _metrics(run)] == [0, 1, 2, 3]


def test_a_second_run_into_the_same_directory_is_refused(tmp_path):
    run = tmp_path / "run"
    assert _proas("train", *ARGS, "train.steps=1", "--run-dir", str(run)).returncode == 0
    out = _proas("train", *ARGS, "train.steps=1", "--run-dir", str(run))
    assert out.returncode == 2 and "--resume" in out.stderr


def test_resume_of_a_missing_run_is_a_clear_error(tmp_path):
    out = _proas("train", "--resume", str(tmp_path / "nope"))
    assert out.returncode == 2 and "not a run directory" in out.stderr


def test_resume_of_a_run_made_from_another_checkout_reads_this_ones_schedule(tmp_path):
    from proas.tasksets import default_root

    schedule = default_root() / "fixed_train_set" / "seed0" / "shop"
    run = tmp_path / "run"
    small = ["env=shop", "env.tasks_per_step=2", "env.group_size=2", "env.fixed_val_set.size=4",
             "train.val_every=1", "train.progress=false", "policy=scorer"]
    out = _proas("train", *small, f"env.fixed_train_set.path={schedule}", "train.steps=1", "--run-dir", str(run))
    assert out.returncode == 0, out.stderr
    cfg = run / "config.yaml"
    elsewhere = "/nonexistent/machine/src/proas/data/fixed_train_set/seed0/shop"
    cfg.write_text(cfg.read_text().replace(str(schedule), elsewhere))
    out = _proas("train", "--resume", str(run), "train.steps=2")
    assert out.returncode == 0, out.stderr
    assert [r["step"] for r in _metrics(run)] == [0, 1, 2]
    assert f"path: {schedule}\n" in cfg.read_text()  # the config now says what was read
