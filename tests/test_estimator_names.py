"""One name for each estimator (issue #28, item 4): the registry's name is the one name, taken and
recorded by the trainer, ``proas credit`` and ``compute_credit`` alike; ``ppo`` is an alias of
``gae`` (``proas.credit.registry.ESTIMATOR_ALIASES``) that every place takes and none records."""

from __future__ import annotations

import json

import numpy as np
import pytest

from proas.cli import build_parser
from proas.cli import main as proas_main
from proas.credit import ReferenceGraph, compute_credit
from proas.credit.registry import ESTIMATOR_ALIASES, estimator_choices, estimator_name, estimator_names
from proas.train import config as train_config
from proas.types import Step, Trajectory

#: every name any place takes: the one names and their aliases
NAMES = estimator_choices()


def test_the_one_names_are_the_registry_s_and_the_aliases_map_onto_them():
    assert train_config.ESTIMATORS == estimator_names()
    assert ESTIMATOR_ALIASES == {"ppo": "gae"}
    assert set(NAMES) == {*estimator_names(), *ESTIMATOR_ALIASES}
    assert train_config.ESTIMATOR_ALIASES is ESTIMATOR_ALIASES  # one table, not a second mapping


@pytest.mark.parametrize("name", NAMES)
def test_the_trainer_takes_every_name_and_records_the_one_name(name):
    cfg = train_config.build_config([f"algo.estimator={name}"])
    assert cfg.algo.estimator == estimator_name(name) and cfg.algo.estimator in estimator_names()
    # a config.yaml that says ppo (runs recorded before the one name) reads back as gae
    assert train_config.config_from_yaml(train_config.config_to_yaml(cfg).replace(
        f"estimator: {cfg.algo.estimator}", f"estimator: {name}")).algo.estimator == cfg.algo.estimator


@pytest.mark.parametrize("name", NAMES)
def test_proas_credit_takes_every_name(name):
    for command in (["credit", "--trajectories", "a", "--out", "b"], ["credit-demo"]):
        args = build_parser().parse_args([*command, "--estimator", name])
        assert estimator_name(args.estimator) in estimator_names()


def test_both_names_give_the_same_credit(tmp_path):
    trajs = []
    for i, reward in enumerate((10.0, 0.0, 10.0)):
        steps = [Step(f"s{t}", f"a{t}", f"s{t + 1}", False, value=0.1 * t) for t in range(3 + i)]
        trajs.append(Trajectory("g", f"t{i}", reward, steps))
    for alias, name in ESTIMATOR_ALIASES.items():
        res = [compute_credit(trajs, ReferenceGraph(), estimator=n, shaping="none").advantage for n in (alias, name)]
        np.testing.assert_array_equal(res[0], res[1])
    # and on the command line, the written rows are the same
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(t.to_json()) + "\n" for t in trajs))
    outs = []
    for name in ("ppo", "gae"):
        out = tmp_path / f"{name}.jsonl"
        assert proas_main(["credit", "--trajectories", str(src), "--out", str(out), "--estimator", name,
                           "--shaping", "none"]) == 0
        outs.append(out.read_text())
    assert outs[0] == outs[1]
