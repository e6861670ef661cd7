"""Credit overhead: base estimator + annotation + shaping on a realistic batch.

Batch: 16 groups x 8 trajectories x 5-50 steps (about 3.6k steps); reference graph of >= 10k
nodes. Prints median times (ms) of:

- GRPO + ProAS and GiGPO + ProAS on a prepared ``CreditBatch`` (the kernels);
- turning ``Trajectory`` objects into a ``CreditBatch`` (done once per batch);
- evolving the graph with the batch's successful trajectories, up to a graph whose goal
  distances are current again (what the next batch's annotation reads);
- a plain per-step Python reference of GiGPO + ProAS (dict grouping, one step at a time, the
  style of verl-agent's estimator), and the speed-up of the kernels over it.

Every figure is also printed as a ratio to that reference, measured in the same run, so that
runs on a busy or a different machine compare.

Goals: GiGPO + ProAS <= 10 ms median on 2 cores (issue 2); the graph evolution <= 10 ms
(issue 16).

    python benchmarks/credit_overhead.py [--repeats 30]
    python benchmarks/credit_overhead.py --quick          # 3 repeats: what CI runs
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

import numpy as np

from proas.credit import CreditBatch, ReferenceGraph, annotate_loop, credit_arrays
from proas.types import Step, Trajectory


def make_graph(
    rng: np.random.Generator, n_paths: int = 700, pool: int = 16000
) -> tuple[ReferenceGraph, list[list[str]]]:
    paths = []
    for k in range(n_paths):
        length = int(rng.integers(15, 35))
        states = [f"s{int(x)}" for x in rng.choice(pool, size=length, replace=False)]
        paths.append(states)
    graph = ReferenceGraph()
    for states in paths:
        graph.add_path(states, [f"a{j}" for j in range(len(states) - 1)])
    return graph, paths


def make_batch(rng: np.random.Generator, paths: list[list[str]], groups: int = 16, g: int = 8) -> list[Trajectory]:
    trajs = []
    for gi in range(groups):
        path = paths[gi]
        for k in range(g):
            length = int(rng.integers(5, 51))
            success = rng.random() < 0.4
            steps, pos = [], 0
            cur = path[0]
            for t in range(length):
                r = rng.random()
                if r < 0.15:  # error: state unchanged
                    steps.append(Step(cur, "bad", cur, error=True, anchor=f"obs-{cur}"))
                    continue
                if r < 0.35:  # detour to an unknown state
                    nxt = f"u{int(rng.integers(0, 200))}"
                elif r < 0.45 and pos > 0:  # back to an earlier state
                    nxt = path[int(rng.integers(0, pos))]
                else:
                    pos = min(pos + 1, len(path) - 1)
                    nxt = path[pos]
                steps.append(Step(cur, f"go {nxt}", nxt, anchor=f"obs-{cur}"))
                cur = nxt
            trajs.append(Trajectory(f"g{gi}", f"g{gi}-{k}", 10.0 if success else 0.0, steps))
    return trajs


def reference_gigpo_proas(trajs: list[Trajectory], graph: ReferenceGraph, gamma=0.95, eps=1e-6) -> list[float]:
    """One step at a time, dicts for grouping: what the kernels replace."""
    by_group = defaultdict(list)
    for tr in trajs:
        by_group[tr.group].append(tr.reward)
    stats = {}
    for gid, rs in by_group.items():
        stats[gid] = (statistics.fmean(rs), 1.0) if len(rs) > 1 else (0.0, 1.0)
    ann = annotate_loop(trajs, graph)
    returns, keys = [], []
    for tr in trajs:
        g_t, out = 0.0, []
        for t in reversed(range(len(tr.steps))):
            r = tr.reward if t == len(tr.steps) - 1 else 0.0
            g_t = r + gamma * g_t
            out.append(g_t)
        returns += reversed(out)
        keys += [(tr.group, s.anchor) for s in tr.steps]
    members = defaultdict(list)
    for k, v in zip(keys, returns):
        members[k].append(v)
    adv, k = [], 0
    for tr in trajs:
        mean, _ = stats[tr.group]
        a = tr.reward - mean
        n = len(tr.steps)
        fd = ann.fd[k : k + n]
        uniform = [len(members[keys[k + t]]) == 1 for t in range(n)]
        dbar = [d for d, u in zip(fd, uniform) if u]
        dbar = sum(dbar) / len(dbar) if dbar else 0.0
        for t in range(n):
            grp = members[keys[k + t]]
            b = 0.0 if len(grp) == 1 else returns[k + t] - sum(grp) / len(grp)
            if a > 0:
                x = ann.rea[k + t] * a
            elif a < 0 and uniform[t] and dbar > 0:
                x = fd[t] / (dbar + eps) * a
            else:
                x = a
            adv.append(x + b)
        k += n
    return adv


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="3 repeats: a smoke run for CI")
    args = ap.parse_args()
    if args.quick:
        args.repeats = 3
    rng = np.random.default_rng(args.seed)
    graph, paths = make_graph(rng)
    trajs = make_batch(rng, paths)
    batch = CreditBatch.from_trajectories(trajs)
    print(f"batch: {batch.n_groups} groups, {batch.n_traj} trajectories, {batch.n_steps} steps; "
          f"graph: {graph.num_nodes} nodes, {graph.num_edges} edges")

    # the reference takes group statistics over trajectories, one sample each, with std 1
    gigpo_opts = {"mode": "mean_norm", "group_stats": "trajectories"}
    # the kernels agree with the reference before anything is timed
    fast = credit_arrays(batch, graph, "gigpo", "proas", gigpo_opts).advantage
    slow = np.array(reference_gigpo_proas(trajs, graph))
    assert np.allclose(fast, slow), "kernel and reference disagree"

    rows = []
    grpo = median_ms(lambda: credit_arrays(batch, graph, "grpo", "proas"), args.repeats)
    gigpo = median_ms(lambda: credit_arrays(batch, graph, "gigpo", "proas", gigpo_opts), args.repeats)
    convert = median_ms(lambda: CreditBatch.from_trajectories(trajs), args.repeats)
    ref = median_ms(lambda: reference_gigpo_proas(trajs, graph), max(3, args.repeats // 5))
    wins = [t for t in trajs if t.success]

    probe = [s.state for t in trajs for s in t.steps]

    def evolve():
        g = graph.copy()
        g.distances_many(probe[:1])  # distances current before the merge, as after any batch
        t0 = time.perf_counter()
        g.add_trajectories(wins)
        g.distances_many(probe[:1])  # and current again after it: a deferred recomputation counts
        return (time.perf_counter() - t0) * 1e3

    evo = statistics.median(evolve() for _ in range(max(5, args.repeats // 3)))
    rows += [
        ("GRPO + ProAS (estimate + annotate + shape)", grpo),
        ("GiGPO + ProAS (estimate + annotate + shape)", gigpo),
        ("Trajectory objects -> CreditBatch", convert),
        (f"graph evolution with {len(wins)} successful trajectories", evo),
        ("reference: per-step Python GiGPO + ProAS", ref),
    ]
    width = max(len(r[0]) for r in rows)
    for name, ms in rows:
        print(f"{name:<{width}}  {ms:8.2f} ms (median)  {ms / ref:6.3f} x reference")
    print(f"speed-up of GiGPO + ProAS kernels over the per-step reference: {ref / gigpo:.1f}x")
    print(f"graph evolution / GiGPO + ProAS: {evo / gigpo:.2f}")
    print(f"goal GiGPO + ProAS <= 10 ms: {'met' if gigpo <= 10 else 'NOT met'} ({gigpo:.2f} ms)")
    print(f"goal graph evolution <= 10 ms: {'met' if evo <= 10 else 'NOT met'} ({evo:.2f} ms)")


if __name__ == "__main__":
    main()
