"""Run directories for the inspector tests, built from the real household env.

Each task group holds: the oracle walkthrough (wins), the oracle with a garbage action and an
inadmissible one inserted (wins, with error steps), and two walks of random admissible actions
(seeded; they fail within the step budget). Credit is ``compute_credit`` against a reference
graph built from the oracle walkthroughs of the same tasks, evolved with the batch; the graph
is saved through the trainer's own checkpoint writer.
"""

from __future__ import annotations

import random
from pathlib import Path

from proas.credit import ReferenceGraph, compute_credit
from proas.envs.household.env import HouseholdEnv, oracle_trajectory
from proas.rollout_log import write_rollouts
from proas.types import Step, Trajectory

TASKS = ("train-pick-0000", "train-pick-0001")


def play(env: HouseholdEnv, task_id: str, actions, group: str, name: str) -> Trajectory:
    """Play ``actions`` (a list, or a callable ``admissible -> action``) and record the steps."""
    obs, info = env.reset(task_id)
    steps = []
    won = False
    plan = list(actions) if not callable(actions) else None
    for k in range(len(plan) if plan is not None else 12):
        action = plan[k] if plan is not None else actions(info["admissible"])
        state, anchor = info["abstract_state"], info["anchor"]
        prev_obs = obs
        obs, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        steps.append(
            Step(state=state, action=action, next_state=info["abstract_state"], error=info["error"], anchor=anchor,
                 reward=reward, extra={"observation": prev_obs})
        )
        won = bool(info["won"])
        if done:
            break
    return Trajectory(group=group, trajectory=f"{group}/{name}", reward=10.0 if won else 0.0, steps=steps,
                      task_type=info["task_type"], won=won, extra={"task_id": task_id})


def batch(env: HouseholdEnv, tasks=TASKS, seed: int = 0) -> list[Trajectory]:
    rng = random.Random(seed)
    out = []
    for g, task_id in enumerate(tasks):
        group = f"g{g}"
        oracle = env.oracle(task_id)
        noisy = oracle[:1] + ["xyzzy frobnicate", "take moon from sky"] + oracle[1:]
        out.append(play(env, task_id, oracle, group, "oracle"))
        out.append(play(env, task_id, noisy, group, "noisy"))
        for k in range(2):
            out.append(play(env, task_id, lambda adm: rng.choice(sorted(adm)), group, f"random{k}"))
    return out


def make_run(run_dir: Path, steps=(1, 2), tasks=TASKS):
    """Write rollout logs for ``steps`` and a checkpoint with the evolved graph.

    Returns ``(trajectories, credit, graph)`` of the last step.
    """
    from proas.train.checkpoint import save_resumable

    env = HouseholdEnv()
    graph = ReferenceGraph.from_trajectories([oracle_trajectory(env, t) for t in tasks])
    trajs: list[Trajectory] = []
    credit = None
    for n, step in enumerate(steps):
        trajs = batch(env, tasks, seed=n)
        # one sample per trajectory, so the tests can work the advantages out by hand
        credit = compute_credit(trajs, graph, estimator="grpo", shaping="proas", evolve=True,
                                estimator_options={"group_stats": "trajectories"})
        write_rollouts(run_dir, step, trajs, credit)
    save_resumable(run_dir, steps[-1], {"step": steps[-1]}, graph)
    return trajs, credit, graph
