"""Paths that break later (issue #27, item 9).

A run records every path it reads after its start as an absolute path, so ``--resume`` and
``eval`` work from any directory; a warm start's source (``init_from``, the relative form that
``proas sft`` prints) is never read again once its weights are in a checkpoint, so it may move or
go; relative task-set paths under the shipped data work from any directory (docs/tasksets.md).
"""

import json
import shutil
from pathlib import Path

import pytest
import torch
from rich.console import Console

from proas import tasksets
from proas.baselines.sft import SFTOptions, sft_task_ids, train_sft
from proas.cli import main as proas_main
from proas.errors import ProasError
from proas.train import checkpoint as ckpt
from proas.train.config import build_config
from proas.train.loop import Trainer, load_run_config, train
from proas.train.rundir import _PATH_FIELDS, absolute_paths
from proas.train.warm_start import load_policy

torch.set_num_threads(1)

QUIET = Console(quiet=True)
TOY = ["env.name=toy_env:make_env", "env.options.n_places=4", "env.options.max_steps=8", "env.options.n_train=24",
       "env.options.n_valid=8", "env.tasks_per_step=2", "env.group_size=2", "train.progress=false",
       "train.steps=4", "train.val_every=2", "train.save_every=2", "algo.minibatch_size=8", "seed=5"]


def _metrics(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def _same_weights(a, b):
    return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


def _strip_reference(directory):
    state = ckpt.load_state(directory)
    state.pop("format_version")
    state.pop("reference")
    ckpt.save_checkpoint(directory, state, None)


@pytest.mark.parametrize("kind", ["scorer", "lm"])
def test_a_relative_init_from_is_never_read_again_once_its_weights_are_in_a_checkpoint(tmp_path, monkeypatch,
                                                                                      capsys, kind):
    """A warm start from ``init_from=sft`` (relative, as ``proas sft`` prints it) with a KL term,
    killed, then resumed and evaluated from another directory after the SFT folder moved: the
    run ends exactly as an uninterrupted one (its KL reference, the source's weights, comes from
    the checkpoint; an lm's structure from the source's recorded config)."""
    monkeypatch.chdir(tmp_path)
    base = TOY + (["policy=lm", "policy.lm.max_new_tokens=6", "train.steps=2", "train.save_every=1",
                   "train.val_every=1", "env.fixed_val_set.size=2"] if kind == "lm" else [])
    sft_cfg = base + (["policy.lm.model_config=tiny"] if kind == "lm" else []) + ["env.fixed_val_set.enabled=false"]
    train_sft(build_config(sft_cfg), Path("sft"), SFTOptions(epochs=1, max_tasks=2, lr=3e-3, batch_size=8))
    sft_weights = load_policy(Path("sft"))[0].state_dict()  # an lm's are a Hugging Face directory beside state.pt
    over = base + [f"policy.{kind}.init_from=sft", "algo.kl_coef=0.01"]
    if kind == "scorer":  # the lm's exact replay is the scorer's mechanism; its structure is what differs
        train(build_config(over), run_dir=Path("full"), console=QUIET)
    train(build_config(over), run_dir=Path("rl"), console=QUIET, stop_after=1)
    run = tmp_path / "rl"
    assert f"init_from: {tmp_path / 'sft'}\n" in (run / "config.yaml").read_text()
    latest = ckpt.latest_checkpoint(run)
    assert _same_weights(ckpt.load_state(latest)["reference"], sft_weights)

    old = tmp_path / "old"
    if kind == "scorer":
        # a checkpoint from before the reference was kept reads it from the source, while there is one
        shutil.copytree(run, old)
        _strip_reference(ckpt.latest_checkpoint(old))
        assert _same_weights(Trainer(load_run_config(old), old, resume=True).ref.state_dict(), sft_weights)

    Path("sft").rename("sft_moved")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    if kind == "scorer":
        with pytest.raises(ProasError, match=f"policy.{kind}.init_from="):
            Trainer(load_run_config(old), old, resume=True)  # that old checkpoint needs its source: one line
    capsys.readouterr()
    assert proas_main(["train", "--resume", str(run)]) == 0, capsys.readouterr().err
    if kind == "scorer":
        assert _metrics(run) == _metrics(tmp_path / "full")
    else:
        assert [r["step"] for r in _metrics(run)] == [0, 1, 2]
    capsys.readouterr()
    assert proas_main(["eval", str(run), "--json"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["checkpoint"] == str(run / "best")


def test_relative_task_set_paths_under_the_shipped_data_work_from_any_directory(tmp_path, monkeypatch):
    """docs/tasksets.md: a relative path is taken as given if it exists, else under the shipped
    data; the trainer, SFT and tasksets' config readers all do so, and a run records the
    absolute path."""
    monkeypatch.chdir(tmp_path)
    rel_sched, rel_val = "fixed_train_set/seed0/shop", "fixed_val_set/shop.jsonl"
    c = build_config(["env=shop", "policy=scorer", "algo.graph.source=rollouts", "env.fixed_val_set.size=4",
                      f"env.fixed_train_set.path={rel_sched}", f"env.fixed_val_set.path={rel_val}"])
    t = Trainer(c, tmp_path / "run")
    assert t.schedule.path == tasksets.default_root() / rel_sched and len(t.val_ids) == 4
    assert sft_task_ids(c, t.envs[0]) == list(dict.fromkeys(x for step in t.schedule.steps for x in step))
    env_cfg = {"fixed_train_set": {"path": rel_sched}, "fixed_val_set": {"enabled": True, "path": rel_val}}
    assert tasksets.schedule_from_config(env_cfg).path == t.schedule.path
    assert tasksets.val_set_from_config(env_cfg, "shop").path == tasksets.default_root() / rel_val
    recorded = absolute_paths(c)
    assert recorded.env.fixed_train_set.path == str(tasksets.default_root() / rel_sched)
    assert recorded.env.fixed_val_set.path == str(tasksets.default_root() / rel_val)


@pytest.mark.parametrize("field", [f"{section}.{name}" for section, name in _PATH_FIELDS])
def test_every_path_a_run_reads_later_is_recorded_absolute(tmp_path, monkeypatch, field):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "here").mkdir()

    def recorded(value):
        cfg = absolute_paths(build_config([f"{field}={value}"]))
        section, name = field.rsplit(".", 1)
        obj = cfg
        for part in section.split("."):
            obj = getattr(obj, part)
        return getattr(obj, name)

    assert recorded("here") == str(tmp_path / "here")  # found from here: absolute
    assert recorded("./here/../here") == str(tmp_path / "here")
    assert recorded("not/here") == "not/here"  # found nowhere (a model name, a typo): as given, for its loader


def test_a_relative_graph_path_survives_a_resume_from_another_directory(tmp_path, monkeypatch):
    """A run killed before its first checkpoint starts over on resume, and reads its graph file again."""
    from proas.credit import ReferenceGraph

    monkeypatch.chdir(tmp_path)
    graph = ReferenceGraph()
    graph.add_path(["a", "b"], ["go"])
    graph.save(tmp_path / "g.json")
    train(build_config(TOY + ["algo.graph.source=load", "algo.graph.path=g.json", "train.steps=1"]),
          run_dir=tmp_path / "run", console=QUIET, stop_after=0)
    shutil.rmtree(tmp_path / "run" / "checkpoints")  # as a kill before the step-0 checkpoint leaves it
    (tmp_path / "run" / "metrics.jsonl").unlink()
    monkeypatch.chdir(tmp_path / "run")
    assert load_run_config(tmp_path / "run").algo.graph.path == str(tmp_path / "g.json")
    t = Trainer(load_run_config(tmp_path / "run"), tmp_path / "run", resume=True)
    assert t.graph.num_nodes == graph.num_nodes
