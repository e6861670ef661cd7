"""Run directories that accept no damage (issue #27, items 7 and 10).

On ``--resume`` the metrics, the config and the checkpoints must agree: records a kill left
after the checkpoint are dropped (a notice, then the run ends exactly as an uninterrupted one);
records missing, repeated or changed before the checkpoint's step, a config.yaml changed after
the crash, a damaged or foreign best/ and a state.pt of another structure are refused with one
line, exit 2, and nothing in the run directory changes. With best/ missing and best.old left by
a kill, eval uses best.old (never the latest checkpoint) and resume restores it.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch
from rich.console import Console

from proas.cli import main as proas_main
from proas.errors import ProasError
from proas.train import checkpoint as ckpt
from proas.train.config import build_config, config_to_yaml
from proas.train.loop import train

torch.set_num_threads(1)

TOY = ["env.name=toy_env:make_env", "env.options.n_places=4", "env.options.max_steps=8", "env.options.n_train=24",
       "env.options.n_valid=8", "env.tasks_per_step=2", "env.group_size=2", "train.progress=false",
       "train.steps=6", "train.val_every=2", "train.save_every=2", "algo.kl_coef=0.01", "algo.minibatch_size=8",
       "seed=3"]
QUIET = Console(quiet=True)
CHECKPOINT = 4  # the killed run's latest checkpoint; its metrics reach step 5


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """An uninterrupted run and one stopped after step 5 (checkpoints at 2 and 4), as a kill
    leaves it."""
    root = tmp_path_factory.mktemp("runs")
    train(build_config(TOY), run_dir=root / "full", console=QUIET)
    train(build_config(TOY), run_dir=root / "killed", console=QUIET, stop_after=5)
    return root


@pytest.fixture
def run(runs, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(runs / "killed", out)
    return out


def _metrics(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def _snapshot(run_dir):
    """Every file (bytes and mtime) and directory of a run, the lock file aside (it holds the
    pid of whoever last held the run)."""
    return {str(p.relative_to(run_dir)): (p.read_bytes(), p.stat().st_mtime_ns) if p.is_file() else "dir"
            for p in sorted(run_dir.rglob("*")) if p.name != ".lock"}


def _refused(capsys, args, run_dir, *needles):
    """``proas ARGS`` exits 2 with one line on stderr that holds every needle, and ``run_dir`` is
    unchanged."""
    before = _snapshot(run_dir)
    capsys.readouterr()
    assert proas_main(args) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    for needle in needles:
        assert needle in err[0], err
    assert _snapshot(run_dir) == before
    return err[0]


def _resume_refused(capsys, run_dir, *needles):
    return _refused(capsys, ["train", "--resume", str(run_dir)], run_dir, *needles)


def _check_refuses(run_dir, cfg, *needles):
    """``rundir.check_resume`` (what ``--resume`` runs first) refuses ``run_dir`` with one line
    that holds every needle, and leaves it unchanged."""
    from proas.train.rundir import check_resume

    before = _snapshot(run_dir)
    with pytest.raises(ProasError) as info:
        check_resume(run_dir, cfg)
    msg = str(info.value)
    assert "\n" not in msg and all(n in msg for n in needles), msg
    assert _snapshot(run_dir) == before
    return msg


@pytest.fixture(scope="module")
def cfg():
    return build_config(TOY)


# ---------------------------------------------------------------- metrics.jsonl


def _lines(run_dir):
    return (run_dir / "metrics.jsonl").read_text().splitlines(keepends=True)


def _set(lines, i, **changes):
    rec = json.loads(lines[i])
    rec.update(changes)
    return lines[:i] + [json.dumps(rec) + "\n"] + lines[i + 1:]


# every way to lose, repeat, reorder or change the records of steps 0..CHECKPOINT
BEFORE_CHECKPOINT = {
    **{f"truncated to {k} lines": (lambda k: lambda ls: ls[:k])(k) for k in range(CHECKPOINT + 1)},
    "torn inside the checkpoint's step": lambda ls: ls[:CHECKPOINT] + [ls[CHECKPOINT][:15]],
    **{f"line {i + 1} deleted": (lambda i: lambda ls: ls[:i] + ls[i + 1:])(i) for i in range(CHECKPOINT + 1)},
    **{f"line {i + 1} repeated": (lambda i: lambda ls: ls[: i + 1] + ls[i:])(i) for i in range(CHECKPOINT + 1)},
    "the file twice": lambda ls: ls + ls,
    "a step repeated after the checkpoint": lambda ls: ls + [ls[2]],
    "lines 2 and 3 swapped": lambda ls: [ls[0], ls[2], ls[1]] + ls[3:],
    "a step renumbered": lambda ls: _set(ls, 3, step=9),
    "a validation SR raised": lambda ls: _set(ls, 2, **{"val/sr": 0.75}),
    "emptied": lambda ls: [],
}


def test_damaged_metrics_before_the_checkpoint_are_refused(run, cfg):
    path = run / "metrics.jsonl"
    lines = _lines(run)
    for damage, change in BEFORE_CHECKPOINT.items():
        path.write_text("".join(change(lines)))
        msg = _check_refuses(run, cfg, str(path))
        assert "restore it or start a new run" in msg, (damage, msg)


def test_damaged_metrics_stop_the_command_in_one_line(run, capsys):
    path = run / "metrics.jsonl"
    path.write_text("".join(BEFORE_CHECKPOINT["line 3 repeated"](_lines(run))))
    _resume_refused(capsys, run, str(path), "step 2 is logged twice (lines 3 and 4)")


def test_a_deleted_metrics_file_is_refused(run, capsys):
    (run / "metrics.jsonl").unlink()
    _resume_refused(capsys, run, "metrics.jsonl is missing", "step_000004")


# a record that is not a JSON object with an integer step >= 0, wherever it stands
NOT_A_RECORD = ["[]", "5", '"step"', "null", "{}", '{"step": "3"}', '{"step": 3.0}', '{"step": true}',
                '{"step": -1}', '{"step": null}', '{"step": [3]}', "[" * 50000 + "]" * 50000]


def test_a_metrics_line_that_is_not_a_record_is_refused_wherever_it_stands(run, cfg):
    original = _lines(run)
    for line in (0, 2, 5):  # the first, one before the checkpoint, the last (after the checkpoint)
        for bad in NOT_A_RECORD:
            lines = list(original)
            lines[line] = bad + "\n"
            (run / "metrics.jsonl").write_text("".join(lines))
            _check_refuses(run, cfg, "metrics.jsonl", f"line {line + 1}")


def test_a_metrics_line_that_is_not_a_record_is_one_line(run, capsys):
    lines = _lines(run)
    lines[2] = '{"step": "3"}\n'
    (run / "metrics.jsonl").write_text("".join(lines))
    _resume_refused(capsys, run, "line 3")


def test_a_metrics_file_that_is_not_utf8_is_one_line(run, capsys):
    path = run / "metrics.jsonl"
    path.write_bytes(path.read_bytes() + b'{"step": 6, "x": "\xff\xfe"}\n')
    _resume_refused(capsys, run, "not UTF-8")


# records a kill leaves after the checkpoint resumed from: dropped, and the run ends exactly as
# the uninterrupted one
AFTER_CHECKPOINT = {
    "as a kill leaves them": lambda run: None,
    "a torn last line": lambda run: (run / "metrics.jsonl").write_text(
        "".join(_lines(run)) + '{"step":6,"train/sr":0.'),
    "the newest checkpoint damaged, so an older one is resumed": lambda run: (
        run / "checkpoints" / "step_000004" / "state.pt").write_bytes(b"damaged"),
    "best/ missing and best.old left by a kill": lambda run: (run / "best").rename(run / "best.old"),
}


@pytest.mark.parametrize("case", sorted(AFTER_CHECKPOINT))
def test_records_after_the_checkpoint_are_dropped_and_the_resume_is_exact(runs, run, capsys, case):
    AFTER_CHECKPOINT[case](run)
    best_before = (run / "best.old" if case.startswith("best/") else run / "best") / "state.pt"
    best_bytes = best_before.read_bytes()
    capsys.readouterr()
    assert proas_main(["train", "--resume", str(run)]) == 0
    out = capsys.readouterr().out
    resumed = 2 if "damaged" in case else CHECKPOINT
    notices = [line for line in out.splitlines() if "dropped the records of" in line]
    dropped = "step 5" if resumed == CHECKPOINT else "steps 3-5"
    assert len(notices) == 1 and dropped in notices[0] and f"after checkpoint step {resumed}" in notices[0], out
    assert _metrics(run) == _metrics(runs / "full")
    assert [r["step"] for r in _metrics(run)] == list(range(7))
    if case.startswith("best/"):
        assert "restored from best.old" in out
        assert not (run / "best.old").exists()
    # the best (step 0 here) did not change, and best/ is still that checkpoint
    assert (run / "best" / "state.pt").read_bytes() == best_bytes


# ---------------------------------------------------------------- config.yaml


EDITS = ["seed=4", "algo.estimator=gigpo", "algo.shaping=none", "env.group_size=3", "policy.scorer.lr=0.5",
         "env.options.n_train=30", "env.options.crash_task=x", "train.val_every=3",
         "policy.scorer.init_from=/somewhere/else", "env.fixed_val_set.enabled=false"]


def test_a_config_edited_after_the_crash_is_refused(run):
    from proas.train.loop import load_run_config

    for override in EDITS:  # config.yaml as the edit left it, read as --resume reads it
        (run / "config.yaml").write_text(config_to_yaml(build_config(TOY + [override])))
        _check_refuses(run, load_run_config(run), "config.yaml", "differs from the config recorded in checkpoint "
                       "step_000004", override.split("=")[0])


def test_a_config_edited_after_the_crash_stops_the_command_in_one_line(run, capsys):
    (run / "config.yaml").write_text(config_to_yaml(build_config(TOY + ["algo.estimator=gigpo"])))
    _resume_refused(capsys, run, "config.yaml", "algo.estimator: 'grpo' in the checkpoint, 'gigpo' in config.yaml")


def test_a_new_step_budget_in_config_yaml_is_not_an_edit_of_the_run(run):
    from proas.train.loop import load_run_config
    from proas.train.rundir import check_resume

    (run / "config.yaml").write_text(config_to_yaml(build_config(TOY + ["train.steps=9"])))
    point = check_resume(run, load_run_config(run))
    assert point.step == CHECKPOINT and point.dropped == [5]


CONFIG_TEXTS = {
    "env var": "seed: ${oc.env:HOME}\n",
    "env var in a string field": "train:\n  run_name: ${oc.env:HOME}\n",
    "key in a string": "env:\n  name: toy_env:${train.run_name}\n",
    "in a list": "env:\n  options:\n    crash_task: [a, '${seed}']\n",
    "a python tag": "seed: !!python/name:os.system\n",
}


def test_a_config_yaml_with_an_interpolation_or_a_tag_is_refused(run):
    from proas.train.loop import load_run_config

    for case, text in CONFIG_TEXTS.items():
        (run / "config.yaml").write_text(text)
        with pytest.raises(ProasError, match="config.yaml: ") as info:
            load_run_config(run)
        assert "\n" not in str(info.value) and ("interpolation" in str(info.value)) == ("$" in text), case


def test_a_config_yaml_with_an_interpolation_stops_the_command_in_one_line(run, capsys):
    (run / "config.yaml").write_text(CONFIG_TEXTS["env var in a string field"])
    _resume_refused(capsys, run, "config.yaml", "train.run_name holds an interpolation")
    _refused(capsys, ["train", "--resume", str(run), "train.steps=8"], run, "config.yaml")


def test_a_config_yaml_that_is_not_utf8_is_one_line(run, capsys):
    path = run / "config.yaml"
    path.write_bytes(path.read_bytes().replace(b"household", b"househ\xf6ld").replace(b"toy_env", b"t\xf6y_env"))
    _resume_refused(capsys, run, "config.yaml", "not UTF-8")


def test_an_interpolation_in_a_checkpoints_recorded_config_is_one_line(run, capsys):
    best = run / "best"
    state = ckpt.load_state(best)
    state["config"] = state["config"].replace("run_name: null", "run_name: ${oc.env:HOME}")
    ckpt.save_checkpoint(best, state)
    _refused(capsys, ["eval", str(run)], run, "run_name holds an interpolation")


# ---------------------------------------------------------------- best/


def _resave(directory, **changes):
    state = ckpt.load_state(directory)
    state.pop("format_version", None)
    for key, value in changes.items():
        if value is ...:
            state.pop(key, None)
        else:
            state[key] = value
    ckpt.save_checkpoint(directory, state)


@pytest.mark.parametrize("damage", ["state.pt damaged", "state.pt gone, best.old beside it"])
def test_a_damaged_best_is_refused_on_resume(run, capsys, damage):
    if damage.startswith("state.pt gone"):
        shutil.copytree(run / "best", run / "best.old")
        (run / "best" / "state.pt").unlink()  # a best/ of another origin: never renamed over
    else:
        (run / "best" / "state.pt").write_bytes(b"damaged")
    _resume_refused(capsys, run, "best: fails verification", "move it away")


def test_a_damaged_best_old_is_refused_on_resume_and_by_eval(run, capsys):
    (run / "best").rename(run / "best.old")
    (run / "best.old" / "state.pt").write_bytes(b"damaged")
    _resume_refused(capsys, run, "best is missing", "best.old", "fails verification")
    _refused(capsys, ["eval", str(run)], run, "best is missing", "best.old", "fails verification")


@pytest.mark.parametrize("change", ["another config", "another best SR", "a later best lost"])
def test_a_best_that_is_not_this_runs_is_refused(run, capsys, change):
    if change == "another config":
        _resave(run / "best", config=config_to_yaml(build_config(TOY + ["seed=9"])))
        needles = ["differs from the config recorded in best/", "seed"]
    elif change == "another best SR":
        _resave(run / "best", best_sr=0.5)
        needles = ["best: holds step 0 at validation SR 50%"]
    else:  # the checkpoint records a better best than best/ holds, at a step before it
        lines = _lines(run)
        (run / "metrics.jsonl").write_text("".join(_set(lines, 2, **{"val/sr": 0.25})))
        _resave(run / "checkpoints" / "step_000004", best_sr=0.25)
        needles = ["best: holds step 0", "records a best of 25%"]
    _resume_refused(capsys, run, *needles)


class _Kill(Exception):
    pass


def test_eval_never_takes_the_latest_checkpoint_for_a_best_a_kill_left_half_replaced(tmp_path, monkeypatch, capsys):
    """A kill at each file operation of replacing best/: eval finds the old best (as best/ or,
    with a warning, best.old) or the new one, never the latest checkpoint."""
    import os

    def make(run_dir):
        for step in (2, 4):
            ckpt.save_resumable(run_dir, step, {"step": step, "w": torch.ones(2) * step})
        ckpt.replace_checkpoint(run_dir / "best", {"step": 1, "w": torch.ones(2)}, {"step": 1})

    kill_at, seen = 0, set()
    while True:
        run_dir = tmp_path / f"run{kill_at}"
        make(run_dir)
        calls = [0]
        real = {"rename": Path.rename, "rmtree": shutil.rmtree, "replace": os.replace}

        def counted(name):
            def op(*args, **kwargs):
                calls[0] += 1
                if calls[0] > kill_at:
                    raise _Kill
                return real[name](*args, **kwargs)
            return op

        monkeypatch.setattr(Path, "rename", counted("rename"))
        monkeypatch.setattr(shutil, "rmtree", counted("rmtree"))
        monkeypatch.setattr(os, "replace", counted("replace"))
        try:
            ckpt.replace_checkpoint(run_dir / "best", {"step": 3, "w": torch.ones(2) * 3}, {"step": 3})
            finished = True
        except _Kill:
            finished = False
        monkeypatch.undo()
        capsys.readouterr()
        found = ckpt.find_checkpoint(run_dir)
        step = ckpt.load_state(found)["step"]
        assert step in (1, 3), (kill_at, found)
        if found.name == "best.old":
            assert "using best.old" in capsys.readouterr().err
        seen.add(found.name)
        if finished:
            break
        kill_at += 1
    assert seen == {"best", "best.old"} and kill_at > 2


def test_eval_of_a_run_whose_best_a_kill_left_as_best_old_evaluates_best_old(run, capsys):
    (run / "best").rename(run / "best.old")
    assert proas_main(["eval", str(run), "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["checkpoint"] == str(run / "best.old")
    assert "best is missing" in out.err and "using best.old" in out.err


# ---------------------------------------------------------------- state.pt


def _policy_wrong_shape(state):
    return {k: torch.zeros(3) for k in state["policy"]}


# every entry the trainer restores, replaced by something of another structure
WRONG_STATE = {
    "policy missing": {"policy": ...},
    "policy a tensor": {"policy": torch.zeros(3)},
    "policy of strings": {"policy": {"w": "x"}},
    "optimizer missing": {"optimizer": ...},
    "optimizer a list": {"optimizer": [torch.zeros(1)]},
    "critic a string": {"critic": "x"},
    "critic_optimizer a list": {"critic_optimizer": [1]},
    "rng_numpy empty": {"rng_numpy": {}},
    "rng_torch floats": {"rng_torch": torch.zeros(5)},
    "rng_torch missing": {"rng_torch": ...},
    "rng_python short": {"rng_python": (3,)},
    "rng_python a list": {"rng_python": [3, [1, 2], None]},
    "step a string": {"step": "4"},
    "step negative": {"step": -4},
    "step a bool": {"step": True},
    "best_sr missing": {"best_sr": ...},
    "best_sr a string": {"best_sr": "high"},
    "config missing": {"config": ...},
    "config a number": {"config": 5},
    "reference of strings": {"reference": {"w": "x"}},
}


def test_a_state_of_the_wrong_structure_is_refused_before_any_of_it_is_applied(run, cfg):
    directory = run / "checkpoints" / "step_000004"
    saved = {p.name: p.read_bytes() for p in directory.iterdir()}
    for case, changes in WRONG_STATE.items():
        _resave(directory, **changes)
        _check_refuses(run, cfg, "step_000004/state.pt", "not a trainer checkpoint")
        for name, data in saved.items():
            (directory / name).write_bytes(data)


def test_a_state_of_the_wrong_structure_is_one_line(run, capsys):
    _resave(run / "checkpoints" / "step_000004", **WRONG_STATE["rng_python short"])
    _resume_refused(capsys, run, "step_000004/state.pt", "not a trainer checkpoint")


def test_weights_that_do_not_fit_the_policy_are_one_line(run, capsys):
    directory = run / "checkpoints" / "step_000004"
    _resave(directory, policy=_policy_wrong_shape(ckpt.load_state(directory)))
    _resume_refused(capsys, run, "step_000004/state.pt", "does not fit")
    _refused(capsys, ["eval", str(directory)], run, "policy weights do not fit")


@pytest.mark.parametrize("case", ["policy missing", "policy a tensor", "policy of strings", "step a string",
                                  "config missing", "config a number"])
def test_eval_of_a_state_of_the_wrong_structure_is_one_line(run, case):
    from proas.train.warm_start import load_policy

    _resave(run / "best", **WRONG_STATE[case])
    with pytest.raises(ProasError, match="best/state.pt") as info:
        load_policy(run)
    assert "\n" not in str(info.value)


def test_eval_of_a_state_of_the_wrong_structure_stops_the_command_in_one_line(run, capsys):
    _resave(run / "best", **WRONG_STATE["policy of strings"])
    _refused(capsys, ["eval", str(run)], run, "best/state.pt")


def test_a_state_pt_that_is_not_a_mapping_is_one_line(run, capsys):
    directory = run / "checkpoints" / "step_000004"
    torch.save([torch.zeros(2)], directory / "state.pt")
    sums = json.loads((directory / "checksums.json").read_text())
    sums["sha256"]["state.pt"] = ckpt.sha256_file(directory / "state.pt")
    (directory / "checksums.json").write_text(json.dumps(sums))
    _resume_refused(capsys, run, "step_000004/state.pt", "not a proas checkpoint")


def test_read_metrics_needs_records_but_keeps_skipping_a_torn_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step":0}\n{"step":1}\n{"step":2,"a":')
    assert ckpt.read_metrics(path) == [{"step": 0}, {"step": 1}]
    path.write_text('{"step":0}\n["step", 1]\n')
    with pytest.raises(ProasError, match="line 2 is not a metrics record"):
        ckpt.read_metrics(path)
