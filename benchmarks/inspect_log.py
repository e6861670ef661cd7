"""Cost of the rollout log the trainer writes every RL step, against the credit it records.

Batch: household tasks (the real env, fast backend), 16 groups x 8 trajectories: the oracle
walkthrough and seven walks of random admissible actions of up to 30 steps, with the
observation text of every step. Prints median times (ms) of ``compute_credit`` (GRPO + ProAS,
evolving graph), the env-only rollout of the batch (no policy: a floor on
a real rollout), ``write_rollouts`` (gzip, atomic) and ``read_rollouts``, the ratios of writing to
credit and to the env-only rollout, the bytes written per step and per trajectory, and the time to render the HTML page
of one task (the ARG of its type drawn from the evolved graph).

    python benchmarks/inspect_log.py [--repeats 7]
    python benchmarks/inspect_log.py --quick        # 1 repeat: what CI runs
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from proas.credit import ReferenceGraph, compute_credit
from proas.envs.household.env import HouseholdEnv, oracle_trajectory
from proas.inspect.html import render_html
from proas.inspect.view import select
from proas.rollout_log import read_rollouts, write_rollouts
from proas.types import Step, Trajectory


def walk(env: HouseholdEnv, task_id: str, group: str, name: str, rng: random.Random | None) -> Trajectory:
    obs, info = env.reset(task_id)
    plan = env.oracle(task_id) if rng is None else None
    steps, won = [], False
    for k in range(len(plan) if plan else 30):
        action = plan[k] if plan else rng.choice(sorted(info["admissible"]))
        state, anchor, prev = info["abstract_state"], info["anchor"], obs
        obs, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        steps.append(
            Step(state, action, info["abstract_state"], info["error"], anchor, reward, extra={"observation": prev})
        )
        won = bool(info["won"])
        if done:
            break
    return Trajectory(
        group, f"{group}/{name}", 10.0 if won else 0.0, steps, info["task_type"], won, {"task_id": task_id}
    )


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="1 repeat: a smoke run for CI")
    args = ap.parse_args()
    if args.quick:
        args.repeats = 1
    env = HouseholdEnv()
    ids = env.task_ids("train")
    tasks = [ids[k * 211] for k in range(16)]
    def rollout():
        rng = random.Random(0)
        out = []
        for g, task_id in enumerate(tasks):
            out.append(walk(env, task_id, f"g{g}", "oracle", None))
            out += [walk(env, task_id, f"g{g}", f"r{k}", rng) for k in range(7)]
        return out

    t0 = time.perf_counter()
    trajs = rollout()
    rollout_ms = (time.perf_counter() - t0) * 1e3
    graph = ReferenceGraph.from_trajectories([oracle_trajectory(env, t) for t in ids[::40]])
    n_steps = sum(len(t) for t in trajs)
    credit = compute_credit(trajs, graph.copy(), evolve=True)

    def credit_once():
        compute_credit(trajs, graph.copy(), evolve=True)

    copy_ms = median_ms(graph.copy, args.repeats)
    credit_ms = median_ms(credit_once, args.repeats) - copy_ms
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        write_ms = median_ms(lambda: write_rollouts(run, 1, trajs, credit), args.repeats)
        size = (run / "rollouts" / "step_000001.jsonl.gz").stat().st_size
        read_ms = median_ms(lambda: read_rollouts(run), args.repeats)
        log = read_rollouts(run)
        evolved = graph.copy()
        evolved.add_trajectories(trajs)
        group, traj = select(log)
        html_ms = median_ms(lambda: render_html(log, group, traj, evolved, "graph.json"), args.repeats)
    print(f"batch: {len(trajs)} trajectories, {n_steps} steps; graph {graph.num_nodes} nodes")
    print(f"env-only rollout (no policy):            {rollout_ms:8.2f} ms")
    print(f"compute_credit (grpo + proas, evolving): {credit_ms:8.2f} ms")
    print(
        f"write_rollouts:                          {write_ms:8.2f} ms  "
        f"({write_ms / credit_ms:.1f}x credit, {write_ms / rollout_ms:.2f}x env-only rollout)"
    )
    print(f"read_rollouts:                           {read_ms:8.2f} ms")
    print(f"render_html (one task):                  {html_ms:8.2f} ms")
    print(
        f"log size: {size / 1024:.1f} KiB per RL step, {size / n_steps:.0f} B per step, "
        f"{size / len(trajs):.0f} B per trajectory"
    )


if __name__ == "__main__":
    main()
