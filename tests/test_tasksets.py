"""Fixed task sets: schedules and validation sets round-trip, and tampering is caught."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from proas import cli, envs, tasksets
from proas.errors import ProasError

TRAIN = [f"t{i:03d}" for i in range(40)]
VAL = ["v0", "v1", "v2", "v3"]


def _make(root, **kw):
    args = dict(env="toy", train_ids=TRAIN, seed=0, steps=6, per_step=8, root=root, val_ids=VAL, source="unit test")
    args.update(kw)
    return tasksets.make_schedule(**args)


def test_round_trip_gives_back_the_drawn_schedule(tmp_path):
    out = _make(tmp_path)
    assert out == tmp_path / "fixed_train_set" / "seed0" / "toy"
    sched = tasksets.load_schedule(out)
    assert sched.steps == tasksets.draw_schedule(TRAIN, 6, 8, 0)
    assert sched.env == "toy" and sched.seed == 0 and sched.per_step == 8
    lines = (out / "schedule.jsonl").read_text().splitlines()
    assert json.loads(lines[2])["step"] == 2 and len(json.loads(lines[2])["tasks"]) == 8
    man = json.loads((out / "manifest.json").read_text())
    assert man["disjoint_from_val"] == {"checked": True, "overlap": 0}
    assert man["val_set"]["path"] == "fixed_val_set/toy.jsonl"
    assert man["val_set"]["sha256"] == tasksets.load_val_set("toy", tmp_path).sha256
    assert man["source"] == "unit test" and man["generator_version"] == tasksets.GENERATOR_VERSION
    val = tasksets.load_val_set("toy", tmp_path)
    assert val.task_ids == VAL


def test_ppo_schedule_goes_under_its_own_directory(tmp_path):
    out = _make(tmp_path, per_step=32, ppo=True)
    assert out == tmp_path / "fix_train_set_ppo" / "seed0" / "toy"
    assert tasksets.load_schedule(out / "schedule.jsonl").per_step == 32


def test_draw_is_deterministic_and_seed_dependent():
    a = tasksets.draw_schedule(TRAIN, 10, 16, 1)
    assert a == tasksets.draw_schedule(TRAIN, 10, 16, 1)
    assert a != tasksets.draw_schedule(TRAIN, 10, 16, 2)


def test_draw_covers_the_pool_evenly_and_batches_hold_no_repeats():
    # 20 tasks, 10 steps of 16: 160 slots = exactly 8 epochs, so each task 8 times
    batches = tasksets.draw_schedule([str(i) for i in range(20)], 10, 16, 0)
    assert all(len(set(b)) == 16 for b in batches)
    assert set(Counter(t for b in batches for t in b).values()) == {8}


def test_a_pool_of_one_batch_gives_every_step_the_same_tasks(tmp_path):
    # what scripts/repeat_schedule.py relies on: a control that sees the same tasks each step
    tasks = TRAIN[:8]
    sched = tasksets.load_schedule(_make(tmp_path, train_ids=tasks, steps=5, per_step=8))
    assert all(sorted(step) == sorted(tasks) for step in sched.steps)
    assert len({tuple(step) for step in sched.steps}) > 1  # each epoch is shuffled anew


def test_validation_tasks_are_left_out_of_the_schedule(tmp_path):
    out = _make(tmp_path, train_ids=TRAIN + VAL)
    sched = tasksets.load_schedule(out)
    assert not {t for b in sched.steps for t in b} & set(VAL)


def test_tampered_schedule_byte_is_a_clear_error(tmp_path):
    out = _make(tmp_path)
    path = out / "schedule.jsonl"
    data = bytearray(path.read_bytes())
    i = data.index(b"t0")
    data[i + 1] = ord("9")
    path.write_bytes(bytes(data))
    with pytest.raises(ProasError, match="sha256 mismatch"):
        tasksets.load_schedule(out)


def test_tampered_val_set_is_a_clear_error(tmp_path):
    out = _make(tmp_path)
    vpath = tmp_path / "fixed_val_set" / "toy.jsonl"
    vpath.write_text(vpath.read_text().replace("v3", "v9"))
    with pytest.raises(ProasError, match="sha256 mismatch"):
        tasksets.load_schedule(out)


def test_val_set_remade_differently_breaks_the_schedule(tmp_path):
    out = _make(tmp_path)
    tasksets.make_val_set("toy", ["v0", "v1"], tmp_path)
    with pytest.raises(ProasError, match="changed since the schedule was made"):
        tasksets.load_schedule(out)


def test_overlap_with_validation_is_a_clear_error(tmp_path):
    out = _make(tmp_path)
    sched = tasksets.load_schedule(out)
    # a hand-edited schedule whose manifest hash was updated too: only the overlap check can see it
    path = out / "schedule.jsonl"
    path.write_text(path.read_text().replace(f'"{sched.steps[3][5]}"', '"v2"'))
    man = json.loads((out / "manifest.json").read_text())
    man["files"]["schedule.jsonl"] = tasksets.sha256_file(path)
    (out / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(ProasError, match="task 'v2' is in both the schedule and the validation set"):
        tasksets.load_schedule(out)


def test_missing_and_corrupt_files_are_clear_errors(tmp_path):
    out = _make(tmp_path)
    (out / "manifest.json").write_text("{not json")
    with pytest.raises(ProasError, match="manifest is not valid JSON"):
        tasksets.load_schedule(out)
    with pytest.raises(ProasError, match="no such schedule directory"):
        tasksets.load_schedule(tmp_path / "nowhere")
    out2 = _make(tmp_path, seed=1)
    (out2 / "schedule.jsonl").unlink()
    with pytest.raises(ProasError, match="file is missing"):
        tasksets.load_schedule(out2)


def test_duplicate_validation_tasks_are_refused(tmp_path):
    with pytest.raises(ProasError, match="appears twice"):
        tasksets.make_val_set("toy", ["a", "b", "a"], tmp_path)


class _ToyEnv:
    taskset_source = "toy ids"

    def task_ids(self, split):
        return {"train": TRAIN, "valid": VAL}[split]


def test_cli_make_and_verify(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(envs, "make", lambda name: _ToyEnv())
    rc = cli.main(["schedule", "make", "--env", "toy", "--seed", "2", "--steps", "5", "--out", str(tmp_path)])
    assert rc == 0
    out = tmp_path / "fixed_train_set" / "seed2" / "toy"
    assert tasksets.load_schedule(out).steps == tasksets.draw_schedule(TRAIN, 5, 16, 2)
    assert cli.main(["schedule", "verify", str(out)]) == 0
    assert "ok: schedule" in capsys.readouterr().out
    (out / "schedule.jsonl").write_text((out / "schedule.jsonl").read_text() + "\n{}")
    assert cli.main(["schedule", "verify", str(out)]) == 2
    assert "sha256 mismatch" in capsys.readouterr().err


def test_cli_unknown_env_is_one_line_error(capsys):
    assert cli.main(["schedule", "make", "--env", "nope", "--seed", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("proas: error: unknown env 'nope'") and "\n" not in err


def test_a_missing_shipped_validation_set_is_an_error_not_the_valid_split(monkeypatch, tmp_path):
    """A household or shop run whose shipped validation file is gone (a damaged install) stops in
    one line instead of validating on other tasks without a word."""
    from proas.errors import ProasError
    from proas.train.config import build_config
    from proas.train.loop import Trainer

    monkeypatch.setattr(tasksets, "val_set_path", lambda env, root=None: tmp_path / f"{env}.jsonl")
    for env in tasksets.SHIPPED_VAL_ENVS:
        with pytest.raises(ProasError, match=f"validation set shipped for env '{env}' is missing"):
            Trainer._val_ids_for(build_config([f"env={env}"]), None, env)


@pytest.mark.parametrize("where", ["absolute", "dotdot"])
def test_a_manifest_naming_a_validation_set_outside_the_data_root_is_refused(tmp_path, capsys, where):
    """A crafted manifest must not make proas read a file outside the data root: its ``val_set``
    path is relative to the root, without ``..``; an absolute one, or one that climbs out, is
    refused in one line even where it names a genuine validation set (here: an identical one)."""
    out = _make(tmp_path / "root")
    elsewhere = tmp_path / "elsewhere"
    tasksets.make_val_set("toy", VAL, elsewhere, source="unit test")
    outside = elsewhere / "fixed_val_set" / "toy.jsonl"
    man = json.loads((out / "manifest.json").read_text())
    man["val_set"]["path"] = str(outside) if where == "absolute" else "../elsewhere/fixed_val_set/toy.jsonl"
    (out / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(ProasError, match="leads outside the data root") as info:
        tasksets.load_schedule(out)
    assert "\n" not in str(info.value) and man["val_set"]["path"] in str(info.value)
    assert cli.main(["schedule", "verify", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "leads outside the data root" in err
    # a schedule whose validation set is given by the caller does not go by the manifest's path,
    # but the manifest is still refused: it is not one proas writes
    with pytest.raises(ProasError, match="leads outside the data root"):
        tasksets.load_schedule(out, val_path=outside)


def test_every_shipped_manifest_names_its_validation_set_inside_the_data_root():
    root = tasksets.default_root()
    manifests = sorted(root.glob("*/seed*/*/manifest.json"))
    assert len(manifests) >= 20
    for path in manifests:  # each passes the check above, and names a validation set that is there
        rel = tasksets._read_manifest(path)["val_set"]["path"]
        assert (root / rel).is_file() and rel.startswith("fixed_val_set/"), path


def _fifo(path):
    import os

    path.unlink(missing_ok=True)
    os.mkfifo(path)


@pytest.mark.parametrize("which", ["val jsonl", "val manifest", "schedule manifest", "schedule.jsonl", "schedule dir"])
def test_verify_names_a_fifo_in_a_files_place(tmp_path, capsys, which):
    """A FIFO where a task-set file (or the schedule directory) should be is named as such in one
    line, never waited on: it was 'manifest is missing', 'file is missing' or 'no such schedule
    directory' (for a FIFO validation .jsonl), which sent the user looking for a file that is
    there."""
    out = _make(tmp_path)
    val = tmp_path / "fixed_val_set" / "toy.jsonl"
    target, arg = {
        "val jsonl": (val, val),
        "val manifest": (tmp_path / "fixed_val_set" / "toy.manifest.json", val),
        "schedule manifest": (out / "manifest.json", out),
        "schedule.jsonl": (out / "schedule.jsonl", out),
        "schedule dir": (tmp_path / "sched", tmp_path / "sched"),
    }[which]
    _fifo(target)
    assert cli.main(["schedule", "verify", str(arg)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{target}:" in err and "is a FIFO" in err, err
    assert "missing" not in err and "no such" not in err, err


def test_verify_of_a_missing_validation_jsonl_names_the_validation_set(tmp_path, capsys):
    assert cli.main(["schedule", "verify", str(tmp_path / "gone.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gone.jsonl: validation set is missing" in err, err
