"""The oracle: optimal walkthroughs, checked against ALFWorld's own PDDL planner."""

from __future__ import annotations

import importlib.util

import pytest

from proas.envs.household import TASK_TYPES, make_household_env
from proas.envs.household.env import game_file
from proas.envs.household.oracle import solve
from proas.envs.household.sim import Sim

HAS_ALFWORLD = importlib.util.find_spec("alfworld") is not None


def _planner_plan(path):
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    from textworld.envs.pddl import PddlEnv

    env = AlfredInfos(AlfredDemangler(PddlEnv(textworld.EnvInfos(won=True, policy_commands=True)), shuffle=False))
    env.load(str(path))
    return list(env.reset()["policy_commands"])


@pytest.mark.alfworld
@pytest.mark.skipif(not HAS_ALFWORLD, reason="alfworld is not installed")
@pytest.mark.parametrize("short", list(TASK_TYPES))
def test_oracle_is_as_short_as_alfworlds_planner_and_both_win(tmp_path, short):
    env = make_household_env("fast")
    for task_id in (f"train-{short}-0021", f"valid_seen-{short}-0002"):
        ours = env.oracle(task_id)
        theirs = _planner_plan(game_file(task_id, tmp_path))
        assert theirs, f"{task_id}: ALFWorld's planner found no plan"
        assert len(ours) == len(theirs), f"{task_id}: oracle {ours} vs planner {theirs}"
        for plan in (ours, theirs):
            env.reset(task_id)
            for a in plan:
                _, _, terminated, truncated, info = env.step(a)
                done = terminated or truncated
                assert not info["error"], (task_id, a)
            assert done and info["won"]


def test_oracle_wins_every_type_in_the_fast_backend():
    env = make_household_env("fast")
    for short in TASK_TYPES:
        for i in range(15):
            task_id = f"train-{short}-{i:04d}"
            plan = env.oracle(task_id)
            env.reset(task_id)
            rewards = [env.step(a)[1] for a in plan]
            assert env.won and rewards[-1] == 10.0 and sum(rewards) == 10.0, task_id


def test_oracle_plan_lengths_follow_the_task_structure():
    # pick: go, [open], take, go, [open], move -> 4..6; pick2: two such rounds -> 8..12
    env = make_household_env("fast")
    bounds = {"pick": (4, 6), "look": (3, 5), "clean": (5, 8), "heat": (5, 8), "cool": (5, 8), "pick2": (8, 12)}
    for short, (lo, hi) in bounds.items():
        for i in range(20):
            n = len(env.oracle(f"train-{short}-{i:04d}"))
            assert lo <= n <= hi, (short, i, n)


def test_hint_is_the_next_oracle_step_from_the_current_state():
    env = make_household_env("fast")
    task_id = "train-heat-0004"
    plan = env.oracle(task_id)
    env.reset(task_id)
    assert env.hint() == plan[0]
    env.step("inventory")  # a detour changes nothing the plan needs
    assert env.hint() == plan[0]
    env.step(plan[0])
    assert env.hint() == plan[1]


def test_oracle_from_a_midgame_state_is_shorter():
    env = make_household_env("fast")
    task_id = "train-cool-0002"
    plan = env.oracle(task_id)
    env.reset(task_id)
    env.step(plan[0])
    rest = solve(env._sim, env.task_type, *env._params())
    assert rest == plan[1:]
    assert isinstance(env._sim, Sim)


def test_hints_finish_the_task_from_random_midgame_states():
    import random

    env = make_household_env("fast")
    for short in TASK_TYPES:
        for i in range(4):
            task_id = f"train-{short}-{i + 30:04d}"
            rng = random.Random(task_id)
            _, info = env.reset(task_id)
            for _ in range(10):
                _, _, terminated, truncated, info = env.step(rng.choice(info["admissible"]))
                done = terminated or truncated
                if done:
                    break
            for _ in range(30):
                if env.won:
                    break
                action = env.hint()
                _, _, _, _, info = env.step(action)
                assert not info["error"], (task_id, action)
            assert env.won, task_id


def test_oracle_trajectory_records_states_actions_and_the_win():
    from proas.envs.household import oracle_trajectory
    from proas.types import Trajectory

    env = make_household_env("fast")
    traj = oracle_trajectory(env, "train-heat-0003")
    # the trainer's replay (proas.envs.replay): outcome 1.0, step rewards 0.0
    assert traj.won and traj.reward == 1.0 and traj.task_type == "pick_heat_then_place_in_recep"
    assert [s.action for s in traj.steps] == env.oracle("train-heat-0003")
    assert traj.steps[0].state == "pick_heat_then_place_in_recep|at=start|hold=none|placed=0"
    assert traj.steps[-1].next_state == "pick_heat_then_place_in_recep|at=target|hold=none|placed=1"
    # consecutive steps chain, no errors
    assert all(a.next_state == b.state for a, b in zip(traj.steps, traj.steps[1:]))
    assert [s.reward for s in traj.steps] == [0.0] * 7 and not any(s.error for s in traj.steps)
    assert Trajectory.from_json(traj.to_json()).steps[3].anchor == traj.steps[3].anchor


def test_abstraction_generalises_oracle_paths_across_tasks():
    # 30 different rooms and objects per type collapse onto a handful of progress states
    from proas.envs.household import oracle_trajectory

    env = make_household_env("fast")
    for short in TASK_TYPES:
        states = set()
        for i in range(30):
            for step in oracle_trajectory(env, f"train-{short}-{i:04d}").steps:
                states.update((step.state, step.next_state))
        assert 4 <= len(states) <= 16, (short, sorted(states))
