"""Every shipped study config resolves to the same run configs as before the trainer's defaults
became the held-out study's tuned setting (issue #45): each runnable row of each study config
(the shipped ones, and those under results/ and scripts/ that ran a study), on each of its envs,
and each run config kept under results/, against the snapshot of commit e007177
(``tests/shipped_run_configs.json``, written by ``tests/run_config_pins.py`` against that
commit's code). A study that relied on the old defaults pins them, so no shipped result changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from run_config_pins import snapshot

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


@pytest.fixture(scope="module")
def before() -> dict[str, dict]:
    data = json.loads((TESTS / "shipped_run_configs.json").read_text(encoding="utf-8"))
    return {key: {**data["base"], **diff} for key, diff in data["runs"].items()}


@pytest.fixture(scope="module")
def now() -> dict[str, dict]:
    return snapshot(ROOT)


def test_every_row_of_every_shipped_study_resolves_as_before(before, now):
    missing = sorted(set(before) - set(now))
    assert not missing, f"no longer shipped (a config moved or gone?): {missing[:5]}"
    changed = []
    for key, old in before.items():
        got = {k: now[key].get(k, "<no such key>") for k in old}
        diff = {k: (v, got[k]) for k, v in old.items() if got[k] != v}
        if diff:
            changed.append(f"{key}: {diff}")
    assert not changed, f"{len(changed)} run configs changed, e.g.\n" + "\n".join(changed[:5])


def test_the_snapshot_covers_every_kind_of_source(before):
    """The snapshot is not vacuous: shipped studies, study files under results/ and scripts/, and
    saved run configs are all in it, and the default setting it was taken on is the old one."""
    kinds = {key.split(":", 1)[0] for key in before}
    assert kinds == {"shipped", "file", "run"}
    assert any(k.startswith("shipped:main::grpo_proas::household") for k in before)
    assert any(k.startswith("file:heldout_main.yaml::") for k in before)
    assert any(k.startswith("file:diagnosis_gigpo.yaml::") for k in before)
    assert before["shipped:main::grpo_proas::household"]["policy.scorer.optimizer"] == "sgd"
    assert before["shipped:main::grpo_proas::household"]["policy.scorer.lr"] == 1.0
