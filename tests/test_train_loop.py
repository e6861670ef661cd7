"""The RL loop end to end on the toy env: it learns, every estimator runs, graph options work."""

import json
import re

import pytest
import torch

from proas.cli import main as proas_main
from proas.credit import ReferenceGraph
from proas.errors import ProasError
from proas.train.config import build_config
from proas.train.loop import Trainer
from proas.train.run import train

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


@pytest.mark.parametrize("estimator", ["grpo", "dapo", "gigpo", "rloo", "reinforce_pp", "migpo", "ppo"])
def test_every_estimator_runs_a_step(tmp_path, estimator):
    # two places: random play wins often, so every estimator sees non-zero rewards
    t = Trainer(cfg(f"algo.estimator={estimator}", "algo.kl_coef=0.01", "env.options.n_places=2"), tmp_path)
    rec = t.train_step()
    assert rec["step"] == 1 and rec["loss/updates"] >= 1 and rec["train/sr"] > 0
    assert 0.0 <= rec["train/unreasonable"] <= 1.0 and 0.0 <= rec["train/na"] <= 1.0
    if estimator == "ppo":
        assert rec["loss/critic"] > 0.0
    if estimator == "dapo":
        assert rec["train/gen_batches"] >= 1


@pytest.mark.parametrize("shaping", ["none", "no_mui", "no_apr", "mask_pm", "suffix", "random", "progress_reward"])
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


@pytest.mark.parametrize("bad", ["env.name=nosuch", "env.name=no_such_module:make",
                                 "env.fixed_train_set.path=/no/such/schedule"])
def test_a_run_that_cannot_start_leaves_no_run_directory(tmp_path, capsys, bad):
    run = tmp_path / "runs" / "r"
    argv = ["train", "--run-dir", str(run), *TOY, "train.progress=false", "train.steps=1"]
    assert proas_main([*argv, bad]) == 2
    err = capsys.readouterr().err
    assert err.startswith("proas: error: ") and err.count("\n") == 1
    assert not run.exists()
    # the directory is free for the next, good attempt
    assert proas_main([*argv, "train.val_every=0"]) == 0
    assert (run / "summary.json").exists()


def test_eval_prints_the_per_type_table(tmp_path, capsys):
    train(cfg("train.steps=2", "train.val_every=2", "env.fixed_val_set.size=4"), run_dir=tmp_path / "run")
    capsys.readouterr()
    # more tasks than the run validated on: the first 8 of the same validation set
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
    from proas.inspect.rollout_log import read_rollouts

    train(cfg("train.steps=5", "train.val_every=0", "train.rollout_log_every=2"), run_dir=tmp_path / "run")
    logged = sorted(p.name for p in (tmp_path / "run" / "rollouts").iterdir())
    assert logged == ["step_000002.jsonl.gz", "step_000004.jsonl.gz", "step_000005.jsonl.gz"]
    log = read_rollouts(tmp_path / "run", step=4)
    assert log.step == 4 and len(log.trajectories) == 4 * 4  # tasks_per_step x group_size
    train(cfg("train.steps=2", "train.val_every=0", "train.rollout_log_every=0"), run_dir=tmp_path / "quiet")
    assert not (tmp_path / "quiet" / "rollouts").exists()
