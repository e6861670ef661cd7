"""What ``proas direct --save`` and ``proas sft`` save loads from anywhere, without its source
(issue #27, item 9): as a run's checkpoints, they record absolute paths, and an lm warm-started
from a proas run records the source's structure (``init_source``), so that once the weights are in
the checkpoint the source may move or go."""

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from proas.baselines.sft import SFTOptions, train_sft
from proas.cli import main as proas_main
from proas.train import checkpoint as ckpt
from proas.train.config import build_config
from proas.train.rundir import _PATH_FIELDS
from proas.train.warm_start import INIT_SOURCE, load_policy

torch.set_num_threads(1)

TOY = ["env.name=toy_env:make_env", "env.options.n_places=4", "env.options.max_steps=8", "env.options.n_train=24",
       "env.options.n_valid=8", "train.progress=false", "seed=5"]
LM = ["policy=lm", "policy.lm.max_new_tokens=6", "env.fixed_val_set.enabled=false"]


def _recorded_paths(config_text: str) -> dict[str, object]:
    cfg = yaml.safe_load(config_text)
    out = {}
    for section, name in _PATH_FIELDS:
        obj = cfg
        for part in section.split("."):
            obj = obj[part]
        out[f"{section}.{name}"] = obj[name]
    return out


def _assert_absolute(run_dir: Path):
    for text in ((run_dir / "config.yaml").read_text(),
                 ckpt.load_plain_state(ckpt.find_checkpoint(run_dir))["config"]):
        for key, value in _recorded_paths(text).items():
            assert value is None or os.path.isabs(value), f"{run_dir}: {key}={value!r} is relative"


def _eval(capsys, run_dir: Path, *extra) -> dict:
    capsys.readouterr()
    assert proas_main(["eval", str(run_dir), "--json", *extra]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("kind", ["scorer", "lm"])
def test_what_direct_and_sft_save_loads_from_another_directory_without_its_source(tmp_path, monkeypatch, capsys,
                                                                                   kind):
    """A source ``src`` (SFT), then, each named by the relative path that ``proas sft`` prints:
    ``proas direct --save`` and ``proas sft`` warm-started from it. Both record absolute paths
    (and, for the lm, the source's structure); after ``src`` moved away, both evaluate from
    another directory to the figures they had."""
    monkeypatch.chdir(tmp_path)
    base = TOY + (LM if kind == "lm" else [])
    start = base + (["policy.lm.model_config=tiny"] if kind == "lm" else [])
    train_sft(build_config(start), Path("src"), SFTOptions(epochs=1, max_tasks=2, lr=3e-3, batch_size=8))
    warm = base + [f"policy.{kind}.init_from=src"] + (["env.fixed_val_set.enabled=true", "env.fixed_val_set.size=2"]
                                                     if kind == "lm" else [])
    capsys.readouterr()
    assert proas_main(["direct", *warm, "--tasks", "2", "--seed", "3", "--save", "direct", "--json"]) == 0, \
        capsys.readouterr().err
    direct = json.loads(capsys.readouterr().out)
    train_sft(build_config(warm), Path("sft"), SFTOptions(epochs=1, max_tasks=2, lr=3e-3, batch_size=8))
    before = {name: _eval(capsys, tmp_path / name, "--seed", "3", "--tasks", "2") for name in ("direct", "sft")}
    assert {k: before["direct"][k] for k in ("sr", "ts", "steps")} == {k: direct[k] for k in ("sr", "ts", "steps")}
    weights = {name: load_policy(tmp_path / name)[0].state_dict() for name in ("direct", "sft")}

    for name in ("direct", "sft"):
        run = tmp_path / name
        _assert_absolute(run)
        assert f"init_from: {tmp_path / 'src'}\n" in (run / "config.yaml").read_text()
        state = ckpt.load_plain_state(run / "best")
        if kind == "lm":  # the source's structure, as the trainer's checkpoints record it
            assert yaml.safe_load(state[INIT_SOURCE]["config"])["policy"]["lm"]["model_config"] == "tiny"
        else:  # a scorer's structure is its own config's
            assert INIT_SOURCE not in state

    shutil.move(tmp_path / "src", tmp_path / "moved")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for name in ("direct", "sft"):
        assert _eval(capsys, tmp_path / name, "--seed", "3", "--tasks", "2") == before[name]
        loaded = load_policy(tmp_path / name)[0].state_dict()
        assert all(torch.equal(loaded[k], weights[name][k]) for k in weights[name])
