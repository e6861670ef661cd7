"""Cost of the ProAS hook per training batch, against verl's own GRPO on the same batch.

A verl-agent ALFWorld batch: 16 tasks x 8 rollouts, 1..50 steps each (one row per step),
512 response tokens per row. Times, best of ``--repeat``:

- verl's ``compute_grpo_outcome_advantage`` (the reference; needs verl installed);
- ``rows_to_trajectories`` (step rows -> trajectories), ``compute_credit`` (evolve, annotate,
  GRPO, ProAS), ``broadcast_to_tokens``, and ``ProASCredit.reshape`` end to end.

Run in the verl venv:  VENV/bin/python benchmarks/verl_reshape.py
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from proas.credit import ReferenceGraph, compute_credit
from proas.integrations.verl import ProASCredit, broadcast_to_tokens, rows_to_trajectories, trajectories_to_rows
from proas.types import Step, Trajectory


def make_batch(rng, n_groups, group_size, max_len, n_states=400):
    trajs = []
    for g in range(n_groups):
        for k in range(group_size):
            n = int(rng.integers(1, max_len + 1))
            won = bool(rng.random() < 0.5)
            states = [f"task{g}|start"] + [f"task{g}|s{int(rng.integers(0, n_states))}" for _ in range(n)]
            if won:
                states[-1] = f"task{g}|goal"
            steps = [
                Step(states[t], f"a{int(rng.integers(0, 20))}", states[t + 1], error=bool(rng.random() < 0.3),
                     anchor=f"obs {states[t]}", reward=10.0 if won and t == n - 1 else 0.0)
                for t in range(n)
            ]
            trajs.append(Trajectory(f"uid{g}", f"traj{g}.{k}", 10.0 if won else 0.0, steps))
    return trajs


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


class Rows:
    def __init__(self, batch, non_tensor):
        self.batch, self.non_tensor_batch = batch, non_tensor


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-len", type=int, default=50)
    ap.add_argument("--response-len", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    trajs = make_batch(rng, args.groups, args.group_size, args.max_len)
    rows = trajectories_to_rows(trajs)
    n = len(rows["uid"])
    perm = rng.permutation(n)
    rows = {k: v[perm] for k, v in rows.items()}
    lengths = torch.as_tensor(rng.integers(1, args.response_len + 1, size=n))
    mask = (torch.arange(args.response_len)[None, :] < lengths[:, None]).to(torch.int64)
    scores = torch.zeros(n, args.response_len)
    scores[torch.arange(n), lengths - 1] = torch.as_tensor(np.asarray(rows["episode_rewards"], dtype=np.float32))
    oracle = [t for t in trajs if t.success]
    print(f"batch: {len(trajs)} trajectories, {n} step rows, {args.response_len} response tokens")

    figures = {}
    try:
        from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

        figures["verl compute_grpo_outcome_advantage (reference)"] = best(
            lambda: compute_grpo_outcome_advantage(token_level_rewards=scores, response_mask=mask, index=rows["uid"]),
            args.repeat,
        )
    except ImportError:
        print("verl is not installed: no reference figure (run in the verl venv)")

    layout = rows_to_trajectories(rows)
    figures["rows_to_trajectories"] = best(lambda: rows_to_trajectories(rows), args.repeat)
    figures["compute_credit (evolve + annotate + grpo + proas)"] = best(
        lambda: compute_credit(layout.trajectories, ReferenceGraph.from_trajectories(oracle), evolve=True),
        args.repeat,
    )
    figures["  of which building the oracle graph"] = best(
        lambda: ReferenceGraph.from_trajectories(oracle), args.repeat
    )
    row_vals = np.zeros(n)
    figures["broadcast_to_tokens"] = best(lambda: broadcast_to_tokens(row_vals, mask), args.repeat)

    def end_to_end():
        credit = ProASCredit(ReferenceGraph.from_trajectories(oracle))
        credit.reshape(Rows({"response_mask": mask}, rows))

    figures["ProASCredit.reshape end to end (incl. graph build)"] = best(end_to_end, args.repeat)

    ref = figures.get("verl compute_grpo_outcome_advantage (reference)")
    for name, sec in figures.items():
        ratio = f"  {sec / ref:6.2f}x verl GRPO" if ref else ""
        print(f"{name:55s} {sec * 1e3:9.1f} ms{ratio}")


if __name__ == "__main__":
    main()
