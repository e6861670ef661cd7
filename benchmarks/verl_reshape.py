"""Cost of the ProAS hook per training batch, against verl's own GRPO on the same batch.

A verl-agent ALFWorld batch: 16 tasks x 8 rollouts, 1..50 steps each (one row per step, shuffled
as verl's ``_balance_batch`` does), 512 response tokens per row. Times, best of ``--repeat``:

- verl's ``compute_grpo_outcome_advantage`` (the reference; needs verl installed);
- the parts: ``rows_to_batch`` (step rows -> credit arrays, the hook's path) against
  ``rows_to_trajectories`` + ``CreditBatch.from_trajectories`` (the object path it replaced),
  ``credit_arrays`` (annotate, estimator, ProAS), the graph evolution, ``broadcast_to_tokens``;
- ``ProASCredit.reshape`` end to end with evolve on and off, against the same hook on the
  object path (rows -> ``Step`` objects -> ``compute_credit``), as a ratio from the same run.
  The initial graph comes from another draw of rollouts of the same tasks; it is built and
  copied outside the timed call.

Run in the verl venv:  VENV/bin/python benchmarks/verl_reshape.py
A smoke run (what CI runs, in that venv: 4 groups, 2 repeats):  VENV/bin/python benchmarks/verl_reshape.py --quick
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from proas.credit import ESTIMATORS, CreditBatch, ReferenceGraph, compute_credit, credit_arrays
from proas.integrations.verl import (
    ProASCredit,
    broadcast_to_tokens,
    rows_to_batch,
    rows_to_trajectories,
    trajectories_to_rows,
)
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


def best(fn, repeat, setup=None):
    """Best wall time of ``fn(setup())`` (``fn()`` without a setup); the setup is not timed."""
    times = []
    for _ in range(repeat):
        arg = setup() if setup is not None else None
        t0 = time.perf_counter()
        fn(arg) if setup is not None else fn()
        times.append(time.perf_counter() - t0)
    return min(times)


class Rows:
    def __init__(self, batch, non_tensor):
        self.batch, self.non_tensor_batch = batch, non_tensor


class ObjectPathCredit(ProASCredit):
    """The hook as it was before ``rows_to_batch``: a ``Step`` per row, then ``compute_credit``.

    Kept here only to time the array path against it (tests/test_verl_rows.py checks that they
    agree); ``base="proas"`` only.
    """

    def step_advantages(self, non_tensor_batch, row_base=None):
        layout = rows_to_trajectories(non_tensor_batch, self.columns)
        options = dict(self.estimator_options)
        name = self.columns.valid
        takes = ESTIMATORS[self.estimator].takes("step_penalty")
        if self.invalid_action_penalty and name in non_tensor_batch and takes:
            step_valid = np.ones(layout.n_steps, dtype=bool)
            step_valid[layout.row_to_step] = [bool(v) for v in non_tensor_batch[name]]
            options["step_penalty"] = self.invalid_action_penalty * (~step_valid).astype(np.float64)
        result = compute_credit(
            layout.trajectories, self.graph, estimator=self.estimator, shaping=self.shaping,
            estimator_options=options, shaping_options=self.shaping_options,
            seed=self.seed + self.batches_seen, evolve=self.evolve, rea=self.rea,
        )
        self.batches_seen += 1
        self.last_result = result
        return result.advantage[layout.row_to_step]

    def metrics(self):
        return {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-len", type=int, default=50)
    ap.add_argument("--response-len", type=int, default=512)
    ap.add_argument("--estimator", default="gigpo", help="proas base estimator of the hook (gigpo, grpo, ...)")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads; 1 by default: on a shared 2-core machine a second "
                         "thread waits on a busy core and makes every token-sized op ~10x slower")
    ap.add_argument("--quick", action="store_true", help="4 groups, 2 repeats: a smoke run for CI")
    args = ap.parse_args()
    if args.quick:
        args.groups, args.repeat = 4, 2
    torch.set_num_threads(args.threads)

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
    # the initial graph from other rollouts of the same tasks, so that evolving it with the
    # batch's successes adds paths, as in training
    oracle = [t for t in make_batch(np.random.default_rng(1), args.groups, args.group_size, args.max_len)
              if t.success]
    graph = ReferenceGraph.from_trajectories(oracle)
    print(f"batch: {len(trajs)} trajectories ({sum(t.success for t in trajs)} successful), {n} step rows, "
          f"{args.response_len} response tokens; estimator {args.estimator}; torch threads {args.threads}")

    figures = {}
    try:
        from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

        figures["verl compute_grpo_outcome_advantage (reference)"] = best(
            lambda: compute_grpo_outcome_advantage(token_level_rewards=scores, response_mask=mask, index=rows["uid"]),
            args.repeat,
        )
    except ImportError:
        print("verl is not installed: no reference figure (run in the verl venv)")

    figures["rows_to_batch (array path)"] = best(lambda: rows_to_batch(rows), args.repeat)
    figures["rows_to_trajectories + CreditBatch (object path)"] = best(
        lambda: CreditBatch.from_trajectories(rows_to_trajectories(rows).trajectories), args.repeat
    )
    batch = rows_to_batch(rows).batch
    figures[f"credit_arrays (annotate + {args.estimator} + proas)"] = best(
        lambda: credit_arrays(batch, graph, estimator=args.estimator), args.repeat
    )
    figures["graph evolution, add_batch (array path)"] = best(lambda g: g.add_batch(batch), args.repeat, graph.copy)
    trajectories = rows_to_trajectories(rows).trajectories
    figures["graph evolution, add_trajectories (object path)"] = best(
        lambda g: g.add_trajectories(trajectories), args.repeat, graph.copy
    )
    row_vals = np.zeros(n)
    figures["broadcast_to_tokens"] = best(lambda: broadcast_to_tokens(row_vals, mask), args.repeat)

    ratios = []
    for evolve in (True, False):
        times = {}
        for path, cls in (("array", ProASCredit), ("object", ObjectPathCredit)):
            times[path] = best(
                lambda credit: credit.reshape(Rows({"response_mask": mask}, rows)), args.repeat,
                lambda cls=cls: cls(graph.copy(), estimator=args.estimator, evolve=evolve),
            )
            figures[f"ProASCredit.reshape, evolve={evolve}, {path} path"] = times[path]
        ratios.append(f"evolve={evolve}: array path {times['array'] * 1e3:.1f} ms = "
                      f"{times['array'] / times['object']:.2f}x the object path's {times['object'] * 1e3:.1f} ms")

    ref = figures.get("verl compute_grpo_outcome_advantage (reference)")
    for name, sec in figures.items():
        ratio = f"  {sec / ref:6.2f}x verl GRPO" if ref else ""
        print(f"{name:55s} {sec * 1e3:9.1f} ms{ratio}")
    for line in ratios:
        print("reshape, " + line)


if __name__ == "__main__":
    main()
