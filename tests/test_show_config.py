"""``proas train --show-config`` explains every key it prints as null (issue #27, item 12: it
explained 4 of them), for every policy, env and estimator."""

from __future__ import annotations

import re

import pytest
import yaml

from proas.cli import main as proas_main
from proas.train.config import ESTIMATORS

SETTINGS = [[], ["env=shop"], ["policy=lm", "policy.lm.model_config=tiny"],
            ["algo.graph.source=load", "algo.graph.path=g.json"], ["train.run_name=r", "env.max_steps=9"],
            *[[f"algo.estimator={e}"] for e in ESTIMATORS]]


def _nulls(tree, prefix=""):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _nulls(value, f"{prefix}{key}.")
        elif value is None:
            yield prefix + key


@pytest.mark.parametrize("over", SETTINGS, ids=lambda o: " ".join(o) or "defaults")
def test_every_null_key_shown_is_explained(over, capsys):
    assert proas_main(["train", "--show-config", *over]) == 0
    out = capsys.readouterr().out
    config, _, notes = out.partition("# unset keys")
    nulls = list(_nulls(yaml.safe_load(config)))
    explained = dict(re.findall(r"^#   (\S+): (.+)$", notes, flags=re.M))
    assert nulls and list(explained) == nulls
    assert all(text.strip() not in ("", "unset", "None") for text in explained.values()), explained
