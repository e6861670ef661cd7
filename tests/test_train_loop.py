"""The RL loop end to end on the toy env: it learns, every estimator runs, graph options work."""

import json
import math
import re

import pytest
import torch

from proas.cli import main as proas_main
from proas.credit import ReferenceGraph
from proas.errors import ProasError
from proas.train.config import ESTIMATORS, SHAPINGS, build_config
from proas.train.loop import Trainer, train, val_seed, validate

torch.set_num_threads(1)

TOY = ["env.name=toy_env:make_env", "env.options.n_places=4", "env.options.max_steps=8", "env.options.n_train=32",
       "env.options.n_valid=16"]


def cfg(*over):
    return build_config(TOY + ["env.tasks_per_step=4", "env.group_size=4", "train.progress=false", *over])


def test_training_raises_the_success_rate_above_the_untrained_policy(tmp_path):
    c = cfg("env.tasks_per_step=8", "train.steps=36", "train.val_every=12", "policy.scorer.lr=2.0")
    summary = train(c, run_dir=tmp_path / "run")
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    untrained = rows[0]["val/sr"]
    assert summary["first_val_sr"] == untrained
    assert summary["best_val_sr"] >= untrained + 0.2, rows[-1]  # seeds 0-4: +0.25 to +0.88
    train_sr = [r["train/sr"] for r in rows[1:]]
    assert sum(train_sr[-6:]) / 6 > sum(train_sr[:6]) / 6 + 0.1  # seeds 0-4: +0.14 to +0.45
    assert (tmp_path / "run" / "curve.png").stat().st_size > 1000
    assert (tmp_path / "run" / "best" / "state.pt").exists()


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_every_estimator_runs_a_step(tmp_path, estimator):
    # two places: random play wins often, so every estimator sees non-zero rewards
    t = Trainer(cfg(f"algo.estimator={estimator}", "algo.kl_coef=0.01", "env.options.n_places=2"), tmp_path)
    rec = t.train_step()
    assert rec["step"] == 1 and rec["loss/updates"] >= 1 and rec["train/sr"] > 0
    assert 0.0 <= rec["train/unreasonable"] <= 1.0 and 0.0 <= rec["train/na"] <= 1.0
    if estimator == "gae":
        assert rec["loss/critic"] > 0.0
    if estimator == "dapo":
        assert rec["train/gen_batches"] >= 1


@pytest.mark.parametrize("shaping", [s for s in SHAPINGS if s != "proas"])  # proas: the default, run above
def test_every_shaping_runs_a_step(tmp_path, shaping):
    assert Trainer(cfg(f"algo.shaping={shaping}"), tmp_path).train_step()["step"] == 1


def test_dapo_dynamic_sampling_is_bounded(tmp_path):
    # a policy that never wins: every group is all-equal, so DAPO re-samples until the bound
    t = Trainer(cfg("algo.estimator=dapo", "algo.max_gen_batches=3", "env.max_steps=1"), tmp_path)
    rec = t.train_step()
    assert rec["train/gen_batches"] == 3.0
    assert rec["train/trajectories"] == 16.0  # the last batch is kept unfiltered


def test_static_graph_does_not_evolve_and_evolving_graph_does(tmp_path):
    static = Trainer(cfg("algo.graph.evolve=false", "policy.scorer.lr=0.05"), tmp_path / "a")
    before = static.graph.to_json()
    for _ in range(3):
        static.train_step()
    assert static.graph.to_json() == before

    evolving = Trainer(cfg("algo.graph.source=rollouts"), tmp_path / "b")
    assert evolving.graph.num_nodes == 0
    for _ in range(4):
        rec = evolving.train_step()
    assert evolving.graph.num_nodes > 0 and rec["graph/nodes"] == evolving.graph.num_nodes


def test_incomplete_graph_is_pruned_and_a_saved_graph_loads(tmp_path):
    full = Trainer(cfg(), tmp_path / "a").graph
    pruned = Trainer(cfg("algo.graph.prune=0.4"), tmp_path / "b").graph
    assert pruned.num_edges < full.num_edges
    path = tmp_path / "g.json"
    full.save(path)
    loaded = Trainer(cfg("algo.graph.source=load", f"algo.graph.path={path}"), tmp_path / "c").graph
    assert loaded.to_json() == ReferenceGraph.load(path).to_json()
    with pytest.raises(ProasError):
        Trainer(cfg("algo.graph.source=load", f"algo.graph.path={tmp_path / 'missing.json'}"), tmp_path / "d")


def test_env_exceptions_are_counted_and_training_goes_on(tmp_path):
    t = Trainer(cfg("env.options.crash_task=train-000", "env.options.n_train=4"), tmp_path)
    rec = t.train_step()
    assert rec["train/env_exceptions"] == 4.0  # the crashing task's whole group
    assert rec["train/trajectories"] == 12.0 and rec["loss/updates"] >= 1


def test_a_run_whose_every_episode_raises_fails_clearly_without_a_summary(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(ProasError, match=r"step 1: the env raised in every one of the 4 episodes "
                                         r"\(first: train-000 reset: RuntimeError: toy env crashed on purpose"):
        train(cfg("env.options.crash_task=train-000", "env.options.n_train=1", "train.steps=2",
                  "algo.graph.source=rollouts"), run_dir=run)  # no oracle graph (it would fail first)
    assert not (run / "summary.json").exists()


def test_a_foreign_env_name_is_a_clear_error(tmp_path):
    with pytest.raises(ProasError, match="cannot be imported"):
        Trainer(cfg("env.name=no_such_module:make"), tmp_path)
    # a misspelt shipped env gets a suggestion; a name like none gets none
    for typo, want in (("shopp", "shop"), ("housheold", "household"), ("Household", "household")):
        with pytest.raises(ProasError, match=f"did you mean '{want}'"):
            Trainer(cfg(f"env.name={typo}"), tmp_path)
    with pytest.raises(ProasError) as exc:
        Trainer(cfg("env.name=garden"), tmp_path)
    assert "did you mean" not in str(exc.value)


@pytest.mark.parametrize("bad", ["env.name=nosuch", "env.name=no_such_module:make",
                                 "env.fixed_train_set.path=/no/such/schedule"])
def test_a_run_that_cannot_start_leaves_no_run_directory(tmp_path, capsys, bad):
    run = tmp_path / "runs" / "r"
    argv = ["train", "--run-dir", str(run), *TOY, "train.progress=false", "train.steps=1"]
    assert proas_main([*argv, bad]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("proas: error: ") and err.count("\n") == 1
    assert not run.exists()
    assert "run directory" not in out  # no directory to name
    # the directory is free for the next, good attempt
    assert proas_main([*argv, "train.val_every=0"]) == 0
    assert (run / "summary.json").exists()


def test_eval_prints_the_per_type_table(tmp_path, capsys):
    train(cfg("train.steps=2", "train.val_every=2", "env.fixed_val_set.size=4"), run_dir=tmp_path / "run")
    capsys.readouterr()
    # more tasks than the run validated on: 8 of the same validation set (one type: the first 8)
    assert proas_main(["eval", str(tmp_path / "run"), "--tasks", "8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step"] >= 0
    assert proas_main(["eval", str(tmp_path / "run"), "--tasks", "8"]) == 0
    out = capsys.readouterr().out
    assert "validation, 8 tasks" in out
    assert re.search(r"all\s*│\s*\d+\s*│\s*8\s*│", out) and "fetch" in out
    assert proas_main(["eval", str(tmp_path / "run" / "checkpoints"), "--json"]) == 2  # not a checkpoint


def test_eval_json_figures(tmp_path, capsys):
    train(cfg("train.steps=1", "train.val_every=1"), run_dir=tmp_path / "run")
    capsys.readouterr()
    assert proas_main(["eval", str(tmp_path / "run" / "best"), "--json", "--tasks", "4", "--temperature", "0"]) == 0
    fig = json.loads(capsys.readouterr().out)
    assert set(fig) >= {"sr", "ts", "steps", "sr/fetch", "step"} and 0.0 <= fig["sr"] <= 1.0


def test_stopped_then_resumed_in_process_matches_an_uninterrupted_run(tmp_path):
    c = cfg("train.steps=5", "train.val_every=2", "train.save_every=2")
    train(c, run_dir=tmp_path / "full")
    train(c, run_dir=tmp_path / "cut", stop_after=3)  # checkpoint at step 2, step 3 written after it
    train(None, resume=tmp_path / "cut")

    def rows(run):
        return [{k: v for k, v in json.loads(x).items() if not k.startswith("time/")}
                for x in (run / "metrics.jsonl").read_text().splitlines()]

    assert rows(tmp_path / "cut") == rows(tmp_path / "full")
    assert [r["step"] for r in rows(tmp_path / "cut")] == [0, 1, 2, 3, 4, 5]


def _flip_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_resume_falls_back_past_a_damaged_checkpoint_and_still_matches(tmp_path, capsys):
    c = cfg("train.steps=6", "train.val_every=3", "train.save_every=2")
    train(c, run_dir=tmp_path / "full")
    cut = tmp_path / "cut"
    train(c, run_dir=cut, stop_after=5)  # checkpoints at steps 2 and 4, step 5 after them
    _flip_byte(cut / "checkpoints" / "step_000004" / "state.pt")
    capsys.readouterr()
    assert proas_main(["train", "--resume", str(cut)]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "step_000004: state.pt does not match its sha256" in err

    def rows(run):
        return [{k: v for k, v in json.loads(x).items() if not k.startswith("time/")}
                for x in (run / "metrics.jsonl").read_text().splitlines()]

    assert rows(cut) == rows(tmp_path / "full")  # replayed from step 2


@pytest.mark.parametrize("damage", ["every checkpoint", "the checkpoints folder", "latest.json"])
def test_resume_refuses_or_recovers_when_checkpoints_are_lost(tmp_path, capsys, damage):
    import shutil

    run = tmp_path / "run"
    train(cfg("train.steps=5", "train.val_every=0", "train.save_every=2"), run_dir=run, stop_after=3)
    root = run / "checkpoints"
    if damage == "latest.json":
        (root / "latest.json").unlink()
        capsys.readouterr()
        assert proas_main(["train", "--resume", str(run)]) == 0
        assert "latest.json is missing" in capsys.readouterr().err
        steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
        assert steps == [0, 1, 2, 3, 4, 5]  # continued from step 2, not restarted from 0
        return
    if damage == "every checkpoint":
        for d in root.glob("step_*"):
            _flip_byte(d / "state.pt")
    else:
        shutil.rmtree(root)
    before = (run / "metrics.jsonl").read_text()
    capsys.readouterr()
    assert proas_main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("proas: error: ") and err.count("\n") == 1
    assert ("no checkpoint verifies" if damage == "every checkpoint" else "no checkpoint is left") in err
    assert (run / "metrics.jsonl").read_text() == before  # nothing discarded


def test_rollouts_are_logged_every_n_steps_and_at_the_last(tmp_path):
    from proas.rollout_log import read_rollouts

    train(cfg("train.steps=5", "train.val_every=0", "train.rollout_log_every=2"), run_dir=tmp_path / "run")
    logged = sorted(p.name for p in (tmp_path / "run" / "rollouts").iterdir())
    assert logged == ["step_000002.jsonl.gz", "step_000004.jsonl.gz", "step_000005.jsonl.gz"]
    log = read_rollouts(tmp_path / "run", step=4)
    assert log.step == 4 and len(log.trajectories) == 4 * 4  # tasks_per_step x group_size
    train(cfg("train.steps=2", "train.val_every=0", "train.rollout_log_every=0"), run_dir=tmp_path / "quiet")
    assert not (tmp_path / "quiet" / "rollouts").exists()


def test_a_start_says_where_and_what_it_loads_and_a_plain_log_shows_step_1(tmp_path):
    import io

    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, width=200)  # not a terminal: no bar, plain lines
    train(cfg("train.steps=3", "train.val_every=0", "env.tasks_per_step=2", "env.group_size=2"),
          run_dir=tmp_path / "run", console=console)
    lines = out.getvalue().splitlines()
    assert lines[0] == "env toy: 32 training tasks, 16 validation tasks"
    assert lines[1] == "reference graph: replaying the oracle on 32 training tasks ..."
    assert re.fullmatch(r"reference graph: \d+ states, \d+ edges from 32 walkthroughs \(\d+s\)", lines[2])
    # named once it exists, before the first step
    assert lines[3] == f"run directory: {tmp_path / 'run'}"
    steps = [x.split()[1] for x in lines if x.startswith("step ")]
    assert steps == ["1/3", "3/3"]  # no validation: the first step and the last


def test_resuming_and_validating_say_so(tmp_path):
    import io

    from rich.console import Console

    c = cfg("train.steps=2", "train.val_every=2", "train.save_every=1")
    train(c, run_dir=tmp_path / "run", stop_after=1, console=Console(file=io.StringIO()))
    out = io.StringIO()
    train(None, resume=tmp_path / "run", console=Console(file=out, width=200))
    text = out.getvalue()
    assert text.startswith(f"resuming run: {tmp_path / 'run'}\n")
    assert f"resuming from {tmp_path / 'run' / 'checkpoints' / 'step_000001'} (step 1)" in text
    first = io.StringIO()
    train(c, run_dir=tmp_path / "fresh", console=Console(file=first, width=200))
    assert "validating the untrained policy on 16 tasks ..." in first.getvalue()
    # the untrained policy's figure is printed, as the run's later lines are
    step0 = json.loads((tmp_path / "fresh" / "metrics.jsonl").read_text().splitlines()[0])
    assert f"step 0/2  val SR {100 * step0['val/sr']:5.1f}%" in first.getvalue()
    assert "best validation SR" in first.getvalue()


def test_a_run_without_validation_says_so_at_the_end(tmp_path):
    import io

    from rich.console import Console

    out = io.StringIO()
    train(cfg("train.steps=1", "train.val_every=0"), run_dir=tmp_path / "run", console=Console(file=out, width=200))
    text = out.getvalue()
    assert "no validation (train.val_every=0)" in text and "n/a" not in text and "step None" not in text
    assert "step 0/" not in text


def test_env_exception_messages_are_shown_literally(tmp_path, monkeypatch):
    import io

    from rich.console import Console

    import toy_env

    orig = toy_env.ToyEnv.reset

    def reset(self, task_id):
        if task_id == "train-000":
            raise RuntimeError("bad [bold]markup[/] \x1b[2J\u202e")
        return orig(self, task_id)

    monkeypatch.setattr(toy_env.ToyEnv, "reset", reset)
    out = io.StringIO()
    t = Trainer(cfg("env.options.n_train=4", "algo.graph.source=rollouts"), tmp_path,
                console=Console(file=out, width=300))
    t.train_step()
    text = out.getvalue()
    assert r"RuntimeError: bad [bold]markup[/] \x1b[2J\u202e" in text and "\x1b" not in text


def _history(peak_train: float, peak_val: float, steps: int = 60):
    rows = [{"step": 0, "val/sr": 0.0}]
    for k in range(1, steps + 1):
        rec = {"step": k, "train/sr": peak_train * k / steps}
        if k % 10 == 0:
            rec["val/sr"] = peak_val * k / steps
        rows.append(rec)
    return rows


def _curve(tmp_path, monkeypatch, history):
    """Write curve.png through the trainer's own function; return the figure it drew."""
    import matplotlib.pyplot as plt

    from proas.train.outputs import plot_curve

    drawn = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: drawn.append(fig))
    plot_curve(history, tmp_path / "curve.png", "t")
    monkeypatch.setattr(plt, "close", close)
    assert (tmp_path / "curve.png").stat().st_size > 1000 and len(drawn) == 1
    return drawn[0]


@pytest.mark.parametrize("peak_train, peak_val, top", [(0.18, 0.19, 25.0), (0.9, 0.6, 100.0), (0.0, 0.0, 10.0)])
def test_learning_curve_y_axis_fits_the_data(tmp_path, monkeypatch, peak_train, peak_val, top):
    import matplotlib.pyplot as plt

    fig = _curve(tmp_path, monkeypatch, _history(peak_train, peak_val))
    lo, hi = fig.axes[0].get_ylim()
    plt.close(fig)
    assert -0.03 * top <= lo < 0.0  # 0% stays visible above the frame
    assert top <= hi <= top * 1.03 and hi >= 100 * max(peak_train, peak_val)


def test_learning_curve_legend_covers_no_point(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    fig = _curve(tmp_path, monkeypatch, _history(0.18, 0.19))
    fig.canvas.draw()
    ax = fig.axes[0]
    legends = fig.legends + ([ax.get_legend()] if ax.get_legend() else [])
    assert len(legends) == 1
    box = legends[0].get_window_extent()
    assert not box.overlaps(ax.get_window_extent())  # outside the axes, so over no curve
    plt.close(fig)


def test_spread_over_types_takes_turns_and_keeps_set_order():
    from proas.train.evaluate import spread_over_types

    ids = [f"pick-{i}" for i in range(5)] + ["look-0", "look-1"] + [f"heat-{i}" for i in range(5)]
    types = [t.split("-")[0] for t in ids]
    assert spread_over_types(ids, types, 6) == ["pick-0", "pick-1", "look-0", "look-1", "heat-0", "heat-1"]
    ten = spread_over_types(ids, types, 10)  # look runs out after 2: the others share the rest
    assert ten == [f"pick-{i}" for i in range(4)] + ["look-0", "look-1"] + [f"heat-{i}" for i in range(4)]
    assert spread_over_types(ids, types, 4) == ["pick-0", "pick-1", "look-0", "heat-0"]
    assert spread_over_types(ids, types, 50) == ids


def test_eval_tasks_cover_every_task_type_of_household(tmp_path, capsys):
    train(build_config(["env.name=household", "train.steps=1", "env.tasks_per_step=2", "env.group_size=2",
                        "train.val_every=0", "algo.graph.oracle_tasks=4", "train.progress=false"]),
          run_dir=tmp_path / "run")
    capsys.readouterr()
    assert proas_main(["eval", str(tmp_path / "run"), "--tasks", "12", "--json"]) == 0
    fig = json.loads(capsys.readouterr().out)
    types = {k for k in fig if k.startswith("sr/")}
    assert len(types) == 6, types  # the shipped set is sorted by type: its first 12 are all "pick"


def test_eval_table_shows_env_task_types_literally(capsys):
    from proas.train.evaluate import print_val_table
    from proas.train.loop import ValResult

    print_val_table(ValResult(sr=0.5, ts=50.0, steps=3.0, by_type={"[bold]t\x1b[2J": (1, 2)}))
    out = capsys.readouterr().out
    assert r"[bold]t\x1b[2J" in out and "\x1b" not in out


def test_the_final_policy_is_validated_again_at_each_extra_temperature(tmp_path, monkeypatch):
    """``train.final_val_temperatures``: after the last step only, the same tasks at each extra
    temperature, with the error rate and the policy's candidate entropy; greedy is deterministic,
    so a second greedy pass reads the same; and the summary names the commit that ran."""
    monkeypatch.setenv("PROAS_COMMIT", "abc123")
    c = cfg("train.steps=4", "train.val_every=2", "train.final_val_temperatures=[1.0,0.0]")
    summary = train(c, run_dir=tmp_path / "run")
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert summary["commit"] == "abc123"
    assert not any(k.startswith("val_t") for r in rows[:-1] for k in r)  # only after the last step
    last = rows[-1]
    for t in ("1", "0"):
        for key in ("sr", "errors", "entropy", "steps"):
            assert f"val_t{t}/{key}" in last
        assert 0.0 <= last[f"val_t{t}/errors"] <= 1.0
    # the toy env offers invalid candidates: sampling at temperature 1 from a barely trained
    # policy hits some, so the error rate is measured, not a constant
    assert last["val_t1/errors"] > 0.0
    # entropy of a distribution over at most a handful of candidates, in nats
    assert 0.0 < last["val/entropy"] <= math.log(12)
    trainer = Trainer(c, tmp_path / "run", resume=True)
    greedy = [validate(trainer.policy, trainer._env_pool(len(trainer.val_ids)), trainer.val_ids, seed=s,
                       temperature=0.0, max_steps=trainer.max_steps, env_name=trainer.env_name,
                       success_reward=1.0).sr for s in (val_seed(0, 4), 12345)]
    assert greedy == [last["val_t0/sr"]] * 2


@pytest.mark.parametrize("command", ["train", "direct", "sft"])
@pytest.mark.parametrize("bad", ["other_env", "unstartable"])
def test_a_validation_set_the_env_cannot_use_is_refused_in_one_line(tmp_path, capsys, command, bad):
    """A validation set of another env, or with a task the env cannot start, would count every
    such task as a failure and read 0% without saying why: every command that validates refuses
    it before anything is written, naming the set and the reason."""
    from proas import tasksets

    ids = ["valid-000", "valid-001", "valid-002"]
    val = tasksets.make_val_set("other" if bad == "other_env" else "toy", ids, path=tmp_path / "val" / "v.jsonl")
    out = tmp_path / "runs"
    args = {"train": ["train"], "direct": ["direct"],
            "sft": ["sft", "--epochs", "1", "--run-dir", str(out / "sft")]}[command]
    over = TOY + ["env.tasks_per_step=2", "env.group_size=2", "train.steps=1", f"train.out_dir={out}",
                  f"env.fixed_val_set.path={val}", "train.progress=false"]
    if bad == "unstartable":
        over.append("env.options.crash_task=valid-001")  # the toy env raises when it starts this task
    assert proas_main(args + over) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line]
    assert len(err) == 1 and str(val) in err[0], err
    assert ("for env 'other'" in err[0]) if bad == "other_env" else ("'valid-001' cannot be started" in err[0])
    assert not out.exists() or not any(out.rglob("metrics.jsonl"))


def test_a_non_finite_loss_stops_the_run_at_that_step_with_its_checkpoint_intact(tmp_path, monkeypatch, capsys):
    """Whatever makes the loss NaN (here the loss function itself), the run stops at the first
    such step with one line naming it, and the last checkpoint (step 2) still resumes."""
    import proas.train.loop as loop_mod

    real = loop_mod.policy_loss
    c = cfg("train.steps=5", "train.val_every=0", "train.save_every=2")
    train(c, run_dir=tmp_path / "run", stop_after=2)

    def poisoned(*args, **kwargs):
        pg, info = real(*args, **kwargs)
        return pg * float("nan"), info

    monkeypatch.setattr(loop_mod, "policy_loss", poisoned)
    with pytest.raises(ProasError, match=r"step 3: the loss or its gradient is not finite"):
        train(None, resume=tmp_path / "run")
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    monkeypatch.setattr(loop_mod, "policy_loss", real)
    summary = train(None, resume=tmp_path / "run")
    assert summary["steps"] == 5


def test_a_run_directory_has_one_writer_at_a_time(tmp_path):
    """While a process holds a run (an OS lock on run_dir/.lock, with its pid), a resume of the
    same run is refused with one line naming the holder, and writes nothing; once the holder is
    gone (the lock dies with its process) the resume goes on."""
    import fcntl
    import os

    from proas.train.outputs import run_lock

    c = cfg("train.steps=3", "train.val_every=0", "train.save_every=1")
    train(c, run_dir=tmp_path / "run", stop_after=1)
    metrics = (tmp_path / "run" / "metrics.jsonl").read_bytes()
    with run_lock(tmp_path / "run"):
        with pytest.raises(ProasError, match=rf"another process \(pid {os.getpid()}\) is writing this run"):
            train(None, resume=tmp_path / "run")
        # a lock taken by another open file of the same file, as another process would take it
        fd = os.open(tmp_path / "run" / ".lock", os.O_RDWR)
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
    assert (tmp_path / "run" / "metrics.jsonl").read_bytes() == metrics
    assert train(None, resume=tmp_path / "run")["steps"] == 3
