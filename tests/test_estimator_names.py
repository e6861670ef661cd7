"""One estimator, two names (issue #27, item 12): the trainer calls GAE over a critic ``ppo``,
the credit core ``gae``; each place takes both, and both names mean the same estimator."""

from __future__ import annotations

import json

import numpy as np
import pytest

from proas.cli import build_parser
from proas.cli import main as proas_main
from proas.credit import ReferenceGraph, compute_credit
from proas.credit.registry import ESTIMATOR_ALIASES as CREDIT_ALIASES
from proas.credit.registry import ESTIMATORS, estimator_choices, estimator_name
from proas.train import config as train_config
from proas.types import Step, Trajectory

#: every name any place takes: the credit core's, its aliases, the trainer's and its aliases
NAMES = sorted({*estimator_choices(), *train_config.ESTIMATORS, *train_config.ESTIMATOR_ALIASES})


def _credit_name(name: str) -> str:
    return estimator_name(name)


@pytest.mark.parametrize("name", NAMES)
def test_the_trainer_takes_every_name_and_records_its_own(name):
    cfg = train_config.build_config([f"algo.estimator={name}"])
    assert cfg.algo.estimator in train_config.ESTIMATORS  # recorded under the trainer's one name
    assert train_config.CREDIT_ESTIMATOR[cfg.algo.estimator] == _credit_name(name)


@pytest.mark.parametrize("name", NAMES)
def test_proas_credit_takes_every_name(name):
    for command in (["credit", "--trajectories", "a", "--out", "b"], ["credit-demo"]):
        args = build_parser().parse_args([*command, "--estimator", name])
        assert _credit_name(args.estimator) in ESTIMATORS


def test_both_names_give_the_same_credit(tmp_path):
    trajs = []
    for i, reward in enumerate((10.0, 0.0, 10.0)):
        steps = [Step(f"s{t}", f"a{t}", f"s{t + 1}", False, value=0.1 * t) for t in range(3 + i)]
        trajs.append(Trajectory("g", f"t{i}", reward, steps))
    pairs = [*train_config.ESTIMATOR_ALIASES.items(), *CREDIT_ALIASES.items()]
    assert pairs
    for one, other in pairs:
        res = [compute_credit(trajs, ReferenceGraph(), estimator=n, shaping="none").advantage for n in (one, other)]
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
