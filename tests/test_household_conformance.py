"""The fast simulator against the real ALFWorld engine, step by step, on generated games.

For every task type: the oracle walkthrough and a seeded random action sequence (admissible
commands, plausible inadmissible ones, malformed text) are replayed in both backends, which
must give identical observations, admissible-command lists, rewards, done flags and ``won``.
"""

from __future__ import annotations

import importlib.util
import random

import pytest

from proas.envs.household import TASK_TYPES, make_household_env

pytestmark = [
    pytest.mark.alfworld,
    pytest.mark.skipif(importlib.util.find_spec("alfworld") is None, reason="alfworld is not installed"),
]

MALFORMED = ["", "fly away", "GO TO the moon", "take", "go to  cabinet 1", "   look  ", "open", "put it down!"]
# one training game per type, and unseen-room games of three types
GAMES = [f"train-{short}-0011" for short in TASK_TYPES] + [f"valid_unseen-{s}-0003" for s in ("look", "heat", "pick2")]


@pytest.fixture(scope="module")
def envs(tmp_path_factory):
    cache = tmp_path_factory.mktemp("household-games")
    return make_household_env("fast"), make_household_env("alfworld", cache_dir=cache)


def _same(fast_out, real_out, where):
    (o1, r1, d1, t1, i1), (o2, r2, d2, t2, i2) = fast_out, real_out
    assert o1 == o2, f"{where}: observations differ\nfast: {o1!r}\nreal: {o2!r}"
    assert i1["admissible"] == i2["admissible"], (
        f"{where}: admissible differ: fast-only {sorted(set(i1['admissible']) - set(i2['admissible']))}, "
        f"real-only {sorted(set(i2['admissible']) - set(i1['admissible']))}"
    )
    assert (r1, d1, t1, i1["won"], i1["error"]) == (r2, d2, t2, i2["won"], i2["error"]), where


@pytest.mark.parametrize("task_id", GAMES)
def test_oracle_and_random_play_match_the_real_engine(envs, task_id):
    fast, real = envs
    o1, i1 = fast.reset(task_id)
    o2, i2 = real.reset(task_id)
    assert o1 == o2 and i1["admissible"] == i2["admissible"]
    for a in fast.oracle(task_id):
        _same(fast.step(a), real.step(a), f"{task_id} oracle {a!r}")
    assert fast.won and real.won

    rng = random.Random(task_id)
    fast.reset(task_id)
    real.reset(task_id)
    info = i1
    kinds = set()
    for t in range(40):
        u = rng.random()
        if u < 0.72:
            action = rng.choice(info["admissible"])
        elif u < 0.88:
            action = rng.choice(info["invalid_candidates"] or ["go to nowhere 1"])
        else:
            action = rng.choice(MALFORMED)
        out = fast.step(action)
        _same(out, real.step(action), f"{task_id} random step {t} {action!r}")
        info = out[4]
        kinds.add(info["error_kind"])
        if out[2] or out[3]:  # terminated or truncated
            break
    # the sequence really exercised both valid and rejected actions
    assert None in kinds and kinds & {"malformed", "inadmissible"}


def test_real_backend_passes_the_protocol_checker(envs):
    from proas.envs import check_env

    _, real = envs
    check_env(real, "valid_seen-clean-0001")
    assert real.won and real.backend == "alfworld"


# a scripted tour of the engine's corners: slicing, examine texts for sliced/hot/clean
# combinations, open receptacles, refused moves, closing, help
SCENARIO = (
    "train-clean-0002",
    [
        "go to diningtable 1",
        "take knife 1 from diningtable 1",
        "slice tomato 1 with knife 1",
        "go to microwave 1",
        "slice bread 1 with knife 1",
        "open microwave 1",
        "go to countertop 1",
        "move knife 1 to countertop 1",
        "go to microwave 1",
        "take bread 1 from microwave 1",
        "examine bread 1",
        "heat bread 1 with microwave 1",
        "examine bread 1",
        "go to sinkbasin 1",
        "move bread 1 to sinkbasin 1",
        "take bread 1 from sinkbasin 1",
        "look",
        "go to diningtable 1",
        "move bread 1 to diningtable 1",
        "take tomato 1 from diningtable 1",
        "examine tomato 1",
        "go to sinkbasin 1",
        "clean tomato 1 with sinkbasin 1",
        "examine tomato 1",
        "go to fridge 1",
        "go to microwave 1",
        "heat tomato 1 with microwave 1",
        "examine tomato 1",
        "close microwave 1",
        "move tomato 1 to microwave 1",
        "inventory",
        "help",
    ],
)


def _lamp_scenario(env):
    plan = env.oracle("train-look-0001")
    host = plan[-2]  # "go to <lamp host>"
    return ("train-look-0001", [host, plan[-1], plan[-1], "look", "inventory"] + plan)


@pytest.mark.parametrize("which", ["slice-heat-clean", "lamp"])
def test_scripted_scenarios_match_the_real_engine(envs, which):
    fast, real = envs
    task_id, script = SCENARIO if which == "slice-heat-clean" else _lamp_scenario(fast)
    o1, _ = fast.reset(task_id)
    o2, _ = real.reset(task_id)
    assert o1 == o2
    texts = []
    for action in script:
        out = fast.step(action)
        _same(out, real.step(action), f"{task_id} {action!r}")
        texts.append(out[0])
        if out[2] or out[3]:  # terminated or truncated
            break
    if which == "slice-heat-clean":
        assert "This is a hot and clean sliced tomato 1." in texts
    else:
        assert texts[1].startswith("You turn on the ") and texts[2] == texts[1]
        assert fast.won


def test_real_backend_leaves_sys_argv_alone(envs, monkeypatch):
    # fast-downward's translator rewrites sys.argv on every load/reset; the env restores it
    import sys

    _, real = envs
    monkeypatch.setattr(sys, "argv", ["trainer.py", "env.backend=alfworld"])
    real.reset("train-look-0011")
    real.step("look")
    assert sys.argv == ["trainer.py", "env.backend=alfworld"]
