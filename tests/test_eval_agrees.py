"""``proas eval`` of a checkpoint gives the figure training reported for that step (issue #27,
item 12: eval of the best checkpoint said 50.0% where training said 51.6%, only because it
sampled with another seed); another seed is said to differ by sampling."""

from __future__ import annotations

import io
import json

import pytest
import torch
from rich.console import Console

from proas.cli import main as proas_main
from proas.train.config import build_config
from proas.train.loop import train

torch.set_num_threads(1)

TOY = ["env.name=toy_env:make_env", "env.options.n_places=4", "env.options.max_steps=8", "env.options.n_train=32",
       "env.options.n_valid=16", "env.tasks_per_step=4", "env.group_size=4", "train.progress=false"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run = tmp_path_factory.mktemp("eval") / "run"
    train(build_config([*TOY, "seed=5", "train.steps=6", "train.val_every=2", "train.save_every=2"]), run_dir=run,
          console=Console(file=io.StringIO()))
    return run


def _logged(run):
    return {r["step"]: r["val/sr"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
            if r.get("val/sr") is not None}


def _eval(capsys, *argv):
    capsys.readouterr()
    assert proas_main(["eval", *argv]) == 0
    return capsys.readouterr().out


def test_every_validated_checkpoint_evaluates_to_its_logged_figure(run, capsys):
    logged = _logged(run)
    targets = [run, *sorted((run / "checkpoints").glob("step_*"))]
    assert len(targets) >= 3
    for target in targets:
        fig = json.loads(_eval(capsys, str(target), "--json"))
        if fig["step"] in logged:
            assert fig["sr"] == logged[fig["step"]], target
    best = json.loads(_eval(capsys, str(run), "--json"))
    assert best["sr"] == max(logged.values())


def test_the_output_says_which_seed_and_what_training_reported(run, capsys):
    best = json.loads((run / "best" / "meta.json").read_text())
    out = _eval(capsys, str(run))
    note = out.strip().splitlines()[-1]
    assert note.startswith("sampling seed ") and f"step {best['step']}" in note
    assert f"training reported {100 * best['val/sr']:.1f}%" in note
    other = _eval(capsys, str(run), "--seed", "12345").strip().splitlines()[-1]
    assert other.startswith("sampling seed 12345 (the run validated step") and "differ by sampling" in other
