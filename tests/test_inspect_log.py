"""The rollout log: what ``write_rollouts`` stores and ``read_rollouts`` gives back."""

from __future__ import annotations

import gzip
import json
import math
import os
from types import SimpleNamespace

import numpy as np
import pytest

from inspect_helpers import make_run
from proas.errors import ProasError
from proas.rollout_log import (
    list_rollout_steps,
    read_rollouts,
    rollout_path,
    write_rollouts,
)
from proas.types import Step, Trajectory


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    trajs, credit, graph = make_run(run_dir)
    return SimpleNamespace(dir=run_dir, trajs=trajs, credit=credit, graph=graph)


def test_one_file_per_step_and_the_newest_is_the_default(run):
    assert list_rollout_steps(run.dir) == [1, 2]
    assert read_rollouts(run.dir).step == 2
    assert read_rollouts(run.dir, 1).step == 1
    assert rollout_path(run.dir, 2).name == "step_000002.jsonl.gz"


def test_each_line_is_the_trajectory_json_plus_credit(run):
    with gzip.open(rollout_path(run.dir, 2), "rt") as fh:
        lines = [json.loads(x) for x in fh]
    assert len(lines) == len(run.trajs) == 8
    for obj, traj in zip(lines, run.trajs):
        back = Trajectory.from_json(obj)
        assert back.to_json() == traj.to_json()
        assert obj["task_id"] == traj.extra["task_id"]
        assert obj["step"] == 2


def test_logged_credit_equals_compute_credit(run):
    log = read_rollouts(run.dir)
    flat = [s for t in log.trajectories for s in t.steps]
    c = run.credit
    assert len(flat) == len(c.rea)
    assert [s.rea for s in flat] == c.rea.astype(int).tolist()
    assert [s.pa for s in flat] == c.pa.astype(int).tolist()
    np.testing.assert_allclose([s.fd for s in flat], c.fd)
    np.testing.assert_allclose([s.base_advantage for s in flat], c.base_advantage)
    np.testing.assert_allclose([s.advantage for s in flat], c.advantage)
    assert [s.uniform for s in flat] == c.uniform.astype(bool).tolist()


def test_grpo_advantage_of_two_wins_and_two_losses(run):
    # rewards 10, 10, 0, 0: mean 5, unbiased std sqrt(100/3); A = ±5 / (sqrt(100/3) + 1e-6)
    expected = 5 / (math.sqrt(100 / 3) + 1e-6)
    log = read_rollouts(run.dir)
    by_id = {t.trajectory: t for t in log.trajectories}
    assert by_id["g0/oracle"].traj_advantage == pytest.approx(expected)
    assert by_id["g0/random0"].traj_advantage == pytest.approx(-expected)


def test_the_garbage_steps_of_a_won_trajectory_are_masked(run):
    noisy = {t.trajectory: t for t in read_rollouts(run.dir).trajectories}["g0/noisy"]
    # the oracle's first action, then "xyzzy frobnicate" and "take moon from sky", then the rest
    assert [s.error for s in noisy.steps[:4]] == [False, True, True, False]
    assert [s.kind for s in noisy.steps] == ["kept", "masked", "masked"] + ["kept"] * (len(noisy) - 3)
    assert noisy.steps[1].advantage == 0.0 and noisy.steps[1].base_advantage > 0


def test_observation_is_what_the_action_was_taken_on(run):
    noisy = {t.trajectory: t for t in read_rollouts(run.dir).trajectories}["g0/noisy"]
    assert noisy.steps[0].observation.startswith("-= Welcome to TextWorld, ALFRED! =-")
    assert noisy.steps[1].observation.startswith("You arrive at")  # after the first "go to"
    assert noisy.steps[2].observation == "Nothing happens."  # after the garbage action


def _tiny(extra=None, anchor=None):
    step = Step(state="a", action="go", next_state="b", error=False, anchor=anchor, extra=extra or {})
    traj = Trajectory(group="g", trajectory="g/0", reward=1.0, steps=[step])
    credit = SimpleNamespace(
        offsets=np.array([0, 1]), rea=np.array([1]), pa=np.array([1]), fd=np.array([0]),
        base_advantage=np.array([0.5]), advantage=np.array([0.5]), uniform=np.array([True]),
        traj_advantage=np.array([0.5]),
    )
    return traj, credit


def test_observation_falls_back_to_the_trainer_context_then_the_anchor(tmp_path):
    traj, credit = _tiny(extra={"context": SimpleNamespace(observation="from context")}, anchor="the anchor")
    write_rollouts(tmp_path, 0, [traj], credit)
    assert read_rollouts(tmp_path).trajectories[0].steps[0].observation == "from context"
    traj, credit = _tiny(anchor="the anchor")
    write_rollouts(tmp_path, 0, [traj], credit)
    assert read_rollouts(tmp_path).trajectories[0].steps[0].observation == "the anchor"
    write_rollouts(tmp_path, 0, [traj], credit, observations=[["given"]])
    assert read_rollouts(tmp_path).trajectories[0].steps[0].observation == "given"


def test_same_batch_same_bytes(tmp_path):
    traj, credit = _tiny()
    a = write_rollouts(tmp_path / "a", 3, [traj], credit).read_bytes()
    b = write_rollouts(tmp_path / "b", 3, [traj], credit).read_bytes()
    assert a == b


def test_a_failed_write_leaves_the_previous_file_and_no_temporary(tmp_path):
    traj, credit = _tiny()
    path = write_rollouts(tmp_path, 5, [traj], credit)
    before = path.read_bytes()
    bad = SimpleNamespace(**{**vars(credit), "offsets": np.array([0, 2])})  # credit for 2 steps, trajectory has 1
    with pytest.raises(ValueError, match="has 1 steps, credit has 2"):
        write_rollouts(tmp_path, 5, [traj], bad)
    assert path.read_bytes() == before
    assert os.listdir(path.parent) == [path.name]


def test_missing_run_dir_and_missing_logs_are_clear_errors(tmp_path):
    with pytest.raises(ProasError, match="no such run directory"):
        read_rollouts(tmp_path / "nope")
    with pytest.raises(ProasError, match="no rollout logs"):
        read_rollouts(tmp_path)


def test_an_unlogged_step_names_the_logged_ones(run):
    with pytest.raises(ProasError, match=r"no rollout log for step 7; logged steps: 1, 2"):
        read_rollouts(run.dir, 7)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"this is not gzip", "corrupt rollout log"),
        (gzip.compress(b'{"group": "g"}\n' * 50)[:30], "corrupt rollout log"),  # truncated
        (gzip.compress(b"{not json\n"), "line 1: not JSON"),
        (gzip.compress(b'{"group": "g", "trajectory": "t", "reward": 1, "steps": []}\n'), "traj_advantage"),
        (
            gzip.compress(
                b'{"group": "g", "trajectory": "t", "reward": 1, "traj_advantage": 0, "steps": '
                b'[{"state": "a", "action": "x", "next_state": "b", "error": false}]}\n'
            ),
            "step 0: field 'rea'",
        ),
        (
            gzip.compress(
                b'{"group": "g", "trajectory": "t", "reward": 1, "traj_advantage": 0, "steps": '
                b'[{"state": "a", "action": "x", "next_state": "b", "error": false, "rea": 2, "pa": 0, "fd": 0,'
                b' "base_advantage": 0, "advantage": 0, "uniform": true}]}\n'
            ),
            "'rea' must be 0 or 1",
        ),
        (gzip.compress(b'{"group": 3}\n'), "field 'group' must be a string"),
        (gzip.compress(b""), "empty rollout log"),
    ],
)
def test_corrupt_files_are_one_line_errors_naming_the_file(tmp_path, content, message):
    path = rollout_path(tmp_path, 4)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with pytest.raises(ProasError, match=message) as info:
        read_rollouts(tmp_path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("kind", ["a FIFO", "a character device"])
def test_a_log_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path, kind):
    """*Found:* a FIFO in a log's place blocked ``proas inspect`` (and ``probe stats``) for ever."""
    import signal

    path = rollout_path(tmp_path, 4)
    path.parent.mkdir(parents=True)
    if kind == "a FIFO":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")

    def hung(signum, frame):
        raise TimeoutError("read_rollouts blocked")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        with pytest.raises(ProasError, match=f"is {kind}; a file read as data must be a regular file") as info:
            read_rollouts(tmp_path)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert str(path) in str(info.value)


def test_a_log_reached_through_a_link_is_read(run, tmp_path):
    (tmp_path / "rollouts").mkdir()
    rollout_path(tmp_path, 9).symlink_to(rollout_path(run.dir, list_rollout_steps(run.dir)[-1]))
    assert len(read_rollouts(tmp_path).trajectories) == len(read_rollouts(run.dir).trajectories)


def test_shaped_part_is_recovered_with_a_step_level_estimator(tmp_path):
    """GiGPO adds B_{i,t}: the log keeps A_i so Ã_{i,t} = advantage − (base − A_i) is exact."""
    from inspect_helpers import batch
    from proas.credit import ReferenceGraph, compute_credit
    from proas.envs.household.env import HouseholdEnv, oracle_trajectory

    env = HouseholdEnv()
    trajs = batch(env, seed=3)
    graph = ReferenceGraph.from_trajectories([oracle_trajectory(env, "train-pick-0000")])
    credit = compute_credit(trajs, graph, estimator="gigpo", shaping="proas", evolve=True)
    assert np.abs(credit.step_advantage).max() > 0  # the batch does exercise B_{i,t}
    write_rollouts(tmp_path, 1, trajs, credit)
    flat = [s for t in read_rollouts(tmp_path).trajectories for s in t.steps]
    np.testing.assert_allclose([s.shaped for s in flat], credit.advantage - credit.step_advantage, atol=1e-12)
    np.testing.assert_allclose([s.step_advantage for s in flat], credit.step_advantage, atol=1e-12)
    # APR reweights only T_i: a failed trajectory's step outside it keeps A_i
    outside = [s for s in flat if not s.uniform and s.traj_advantage < 0]
    assert outside and all(s.kind == "kept" for s in outside)


def test_trainer_rollouts_log_the_observation_each_action_was_chosen_on(tmp_path):
    """The trainer's own rollout (scorer policy on household) through the call the loop makes."""
    from proas.credit import ReferenceGraph, compute_credit
    from proas.envs.household.env import HouseholdEnv, oracle_trajectory
    from proas.policies.scorer import ScorerPolicy
    from proas.train.rollout import Slot, rollout

    tasks = ["train-pick-0000", "train-pick-0001"]
    slots = [Slot(t, f"g{g}", f"g{g}/{k}") for g, t in enumerate(tasks) for k in range(3)]
    trajs, _ = rollout([HouseholdEnv() for _ in slots], slots, ScorerPolicy(bits=10, dim=4, seed=0),
                       np.random.default_rng(0), max_steps=6, env_name="household")
    graph = ReferenceGraph.from_trajectories([oracle_trajectory(HouseholdEnv(), t) for t in tasks])
    credit = compute_credit(trajs, graph, evolve=True)
    write_rollouts(tmp_path, 1, trajs, credit)
    log = read_rollouts(tmp_path)
    assert [t.trajectory for t in log.trajectories] == [s.trajectory for s in slots]
    assert [t.task_id for t in log.trajectories] == [s.task_id for s in slots]
    for logged, traj in zip(log.trajectories, trajs):
        assert [s.observation for s in logged.steps] == [s.extra["context"].observation for s in traj.steps]
        assert logged.steps[0].observation.startswith("-= Welcome to TextWorld, ALFRED! =-")
        assert logged.task_type == "pick_and_place_simple"


def test_a_log_that_inflates_past_the_limit_is_refused_after_reading_at_most_that_much(tmp_path, monkeypatch):
    """A small gzip file can inflate to gigabytes: the reader stops one byte past
    MAX_ROLLOUT_BYTES instead of holding it all (the limit is lowered here to keep it fast)."""
    import proas.rollout_log as rl

    monkeypatch.setattr(rl, "MAX_ROLLOUT_BYTES", 4096)
    line = b'{"group": "g", "trajectory": "t", "reward": 1, "traj_advantage": 0, "steps": []}\n'
    path = rollout_path(tmp_path, 3)
    path.parent.mkdir(parents=True)
    path.write_bytes(gzip.compress(line * 1000))  # about 80 KB inflated, under 1 KB on disk
    assert path.stat().st_size < 4096
    with pytest.raises(ProasError, match="inflates to more than 4096 bytes") as info:
        read_rollouts(tmp_path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    path.write_bytes(gzip.compress(line * 40))  # about 3.2 KB inflated: read as before
    assert len(read_rollouts(tmp_path).trajectories) == 40
