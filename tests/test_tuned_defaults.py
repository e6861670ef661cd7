"""The scorer's optimiser and rate, when unset, are the held-out study's choice for the default
arm (GRPO+ProAS from random weights) on the run's env (issue #45): household AdamW 0.001, shop
SGD 1, as ``results/heldout/tuning/selection.md`` says. A set key wins; ``--show-config`` says
what an unset one means; a run records the values it resolved, so a later retune does not change
a run on ``--resume``, and a run recorded before the change (explicit SGD 1) keeps it."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import torch

import proas.train.config as config
from proas.cli import main as proas_main
from proas.train.config import build_config, config_from_yaml, pin_tuned_defaults, same_setting, unset_resolved
from proas.train.loop import Trainer, load_run_config, train

ROOT = Path(__file__).resolve().parents[1]
SELECTION = ROOT / "results" / "heldout" / "tuning" / "selection.md"
TOY = ["env.name=toy_env:make_env", "env.options.n_places=4", "env.options.max_steps=8", "env.options.n_train=16",
       "env.options.n_valid=4", "env.tasks_per_step=2", "env.group_size=2", "train.progress=false",
       "train.val_every=0", "train.save_every=1", "train.rollout_log_every=0", "train.steps=2"]


def _selection() -> dict[str, tuple[str, dict[str, float]]]:
    """Per env, the GRPO+ProAS arm's choice and each optimiser's best rate, read from the
    selection ``proas heldout select`` wrote."""
    text = SELECTION.read_text(encoding="utf-8")
    out = {}
    for env, chosen, table in re.findall(r"^## (\w+) grpo_proas: (\S+).*?\n\n(.*?)(?:\n\n|\Z)", text, re.M | re.S):
        means: dict[str, tuple[float, float]] = {}
        for opt, lr, mean in re.findall(r"^\| (sgd|adamw)([\d.]+) \|.*\| ([\d.]+)(?: \*\*←\*\*)? \|$", table, re.M):
            if opt not in means or float(mean) > means[opt][1]:
                means[opt] = (float(lr), float(mean))
        opt = re.match(r"[a-z]+", chosen).group(0)
        out[env] = (opt, {o: lr for o, (lr, _) in means.items()})
        assert float(chosen[len(opt):]) == means[opt][0]
    return out


def test_the_tuned_defaults_are_the_selection_of_the_default_arm():
    picked = _selection()
    assert set(picked) == {"household", "shop"}
    assert picked == config.SCORER_TUNED
    assert picked["household"][0] == "adamw" and picked["household"][1]["adamw"] == 0.001
    assert picked["shop"][0] == "sgd" and picked["shop"][1]["sgd"] == 1.0


@pytest.mark.parametrize(("over", "want"), [
    ([], ("adamw", 0.001)),
    (["env=shop"], ("sgd", 1.0)),
    (["env=household", "policy.scorer.optimizer=sgd"], ("sgd", 1.0)),
    (["env=shop", "policy.scorer.optimizer=adamw"], ("adamw", 0.003)),
    (["policy.scorer.optimizer=adam"], ("adam", 0.001)),
    (["policy.scorer.lr=0.3"], ("adamw", 0.3)),
    (["env=shop", "policy.scorer.optimizer=adamw", "policy.scorer.lr=0.01"], ("adamw", 0.01)),
    (["env.name=toy_env:make_env"], ("sgd", 1.0)),  # an env never tuned: the old default
    (["policy=lm", "policy.lm.model_config=tiny"], ("sgd", 1.0)),  # trains no scorer
])
def test_unset_keys_resolve_per_env_and_a_set_key_wins(over, want):
    cfg = build_config(over)
    pinned = pin_tuned_defaults(cfg).policy.scorer
    assert (pinned.optimizer, pinned.lr) == want
    shown = unset_resolved(cfg)
    for key, value in zip(("policy.scorer.optimizer", "policy.scorer.lr"), want):
        set_here = any(x.startswith(key + "=") for x in over)
        assert (key in shown) is not set_here
        if not set_here:
            assert shown[key] == value


def test_show_config_says_what_the_unset_optimiser_and_rate_mean(capsys):
    for over, opt, lr in (([], "adamw", "0.001"), (["env=shop"], "sgd", "1.0")):
        assert proas_main(["train", "--show-config", *over]) == 0
        out = capsys.readouterr().out
        assert re.search(r"^    optimizer: null$", out, re.M) and re.search(r"^    lr: null$", out, re.M)
        assert f"#   policy.scorer.optimizer: {opt}\n" in out and f"#   policy.scorer.lr: {lr}\n" in out


def test_a_value_set_to_the_default_is_the_same_setting_and_another_is_not():
    assert same_setting(build_config([]), build_config(["policy.scorer.optimizer=adamw", "policy.scorer.lr=0.001"]))
    assert not same_setting(build_config([]), build_config(["policy.scorer.optimizer=sgd", "policy.scorer.lr=1.0"]))
    assert same_setting(build_config(["env=shop"]), build_config(["env=shop", "policy.scorer.optimizer=sgd"]))


def test_a_run_records_what_it_resolved_and_resumes_with_it_after_a_retune(tmp_path, monkeypatch):
    monkeypatch.setitem(config.SCORER_TUNED, "toy_env:make_env", ("adamw", {"sgd": 1.0, "adamw": 0.002}))
    run = tmp_path / "run"
    train(build_config(TOY), run_dir=run, stop_after=1)
    text = (run / "config.yaml").read_text()
    assert re.search(r"^    optimizer: adamw$", text, re.M) and re.search(r"^    lr: 0.002$", text, re.M)
    # the env is tuned again: the run resumes as it started, and the runner's check agrees
    monkeypatch.setitem(config.SCORER_TUNED, "toy_env:make_env", ("sgd", {"sgd": 0.5, "adamw": 0.01}))
    assert not same_setting(load_run_config(run), build_config(TOY))
    train(None, resume=run)
    trainer = Trainer(load_run_config(run), run, resume=True)
    assert isinstance(trainer.optimizer, torch.optim.AdamW) and trainer.lr == 0.002


def test_a_run_recorded_before_the_tuned_defaults_keeps_sgd_at_1(tmp_path):
    """Before issue #45 every config.yaml wrote the scorer's optimiser and rate out (they were
    never null); such a household run resumes on SGD 1, not on the new default."""
    old = (ROOT / "results" / "lm" / "sft_sweep" / "scorer" / "hh" / "config.yaml").read_text()
    cfg = config_from_yaml(old)
    assert cfg.env.name == "household" and cfg.policy.kind == "scorer"
    assert (cfg.policy.scorer.optimizer, cfg.policy.scorer.lr) == ("sgd", 1.0)
    assert pin_tuned_defaults(cfg).policy.scorer.optimizer == "sgd"
    unset = copy.deepcopy(cfg)
    unset.policy.scorer.optimizer = unset.policy.scorer.lr = None
    assert not same_setting(cfg, unset)  # had it been left null, it would now mean AdamW 0.001
