"""Panel (c): suppressing actions by Future-Drift. Recovered ESR after forbidding the original
action at points of different FD in failed trajectories.

1. The policy plays ``rollouts`` episodes per task (sampled at ``temperature``); the failed ones
   are annotated against the reference graph (``proas.credit.annotate``): ``Rea``, ``PA`` and the
   Future-Drift ``D_t``, the number of non-advancing steps from ``t`` to the end.
2. In each failed trajectory, up to ``points`` steps are chosen with FD values spread over the
   trajectory's range (the first step of each chosen FD value, evenly spaced over the distinct
   values, the largest and the smallest included).
3. At each point the env is restored to the state before the step (replay), the original action
   is forbidden for the first action, and N continuations are sampled with the remaining budget
   ``max_steps - t``; the recovered ESR is the share that wins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from proas.credit import CreditBatch, ReferenceGraph, annotate
from proas.envs.base import Env
from proas.envs.replay import replay_oracles
from proas.errors import ProasError
from proas.policies.base import Policy
from proas.probes.sampler import continue_episodes
from proas.probes.snapshot import Snapshot, restore_many
from proas.train.rollout import Slot, rollout
from proas.types import Trajectory

__all__ = ["choose_points", "fd_bins", "fd_probe", "oracle_graph"]


def oracle_graph(env: Env, task_ids: Sequence[str], max_steps: int) -> ReferenceGraph:
    """The ARG of an RL run's default: the oracle replayed on the training tasks, as the
    trainer does (``proas.envs.replay``: the won walkthroughs; a task whose oracle raises or
    does not win within ``max_steps`` is left out)."""
    trajs, _ = replay_oracles(env, task_ids, max_steps)
    if not trajs:
        raise ProasError("the oracle solved none of the training tasks; no reference graph")
    return ReferenceGraph.from_trajectories(trajs)


def choose_points(fd: Sequence[int], points: int) -> list[int]:
    """Step indices with FD values spread over the range: the first step of each of up to
    ``points`` distinct FD values, evenly spaced over the sorted distinct values."""
    first: dict[int, int] = {}
    for t, d in enumerate(fd):
        first.setdefault(int(d), t)
    values = sorted(first, reverse=True)
    if points <= 0 or not values:
        return []
    if len(values) <= points:
        chosen = values
    else:
        idx = np.unique(np.round(np.linspace(0, len(values) - 1, points)).astype(int))
        chosen = [values[i] for i in idx]
    return sorted(first[v] for v in chosen)


def fd_probe(policy: Policy, make_env: Callable[[], Env], task_ids: Sequence[str], graph: ReferenceGraph, *,
             env_name: str, max_steps: int, n: int = 50, rollouts: int = 1, points: int = 4,
             temperature: float = 1.0, seed: int = 0, progress: Callable[[str], None] | None = None,
             keep_failed: list[Trajectory] | None = None) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Rows ``(task, trajectory, t, fd, action, esr)``; and counts (episodes, failed, points).
    The failed trajectories are appended to ``keep_failed`` when given."""
    if n < 1 or rollouts < 1 or points < 1:
        raise ProasError("fd probe: need n, rollouts and points >= 1")
    if graph.num_edges == 0:
        # against a graph without edges every step is unreasonable, so FD is only the steps left
        raise ProasError(f"fd probe: the reference graph is empty ({graph.num_nodes} states, no edges), so every "
                         "step would be non-advancing and FD only the steps left; give a graph of successful "
                         "trajectories (--graph)")
    rng = np.random.default_rng(seed)
    envs = [make_env() for _ in range(max(n, len(task_ids) * rollouts))]
    slots = [Slot(t, f"fd-{k}", f"fd-{k}-{j}") for k, t in enumerate(task_ids) for j in range(rollouts)]
    trajs, _ = rollout(envs, slots, policy, rng, temperature=temperature, max_steps=max_steps, env_name=env_name)
    failed: list[Trajectory] = [t for t in trajs if not t.success and t.steps]
    counts = {"episodes": len(trajs), "failed": len(failed), "points": 0}
    if keep_failed is not None:
        keep_failed.extend(failed)
    if not failed:
        return [], counts
    ann = annotate(CreditBatch.from_trajectories(failed), graph)
    rows = []
    off = 0
    for traj in failed:
        fd = ann.fd[off: off + len(traj)]
        pa = ann.pa[off: off + len(traj)]
        off += len(traj)
        tid = traj.extra["task_id"]
        actions = [s.action for s in traj.steps]
        for t in choose_points(fd, points):
            res = continue_episodes(policy, restore_many(envs[:n], Snapshot(tid, tuple(actions[:t]))), rng,
                                    env_name=env_name, budget=max_steps - t, temperature=temperature,
                                    forbid=actions[t])
            rows.append({"task_id": tid, "trajectory": traj.trajectory, "task_type": traj.task_type, "t": t,
                         "length": len(traj), "fd": int(fd[t]), "pa": int(pa[t]), "action": actions[t], "n": n,
                         "esr": res.esr, "forbid_failed": res.forbid_failed})
            if progress:
                progress(f"{tid} t={t} FD={int(fd[t])}: recovered ESR {100 * res.esr:.0f}%")
    counts["points"] = len(rows)
    return rows, counts


def fd_bins(rows: Sequence[dict[str, Any]], bins: int = 4) -> list[dict[str, Any]]:
    """Mean recovered ESR per FD bin: up to ``bins`` bins of equal count over the sorted FDs."""
    if not rows:
        return []
    fds = np.array([r["fd"] for r in rows])
    esr = np.array([r["esr"] for r in rows])
    order = np.argsort(fds, kind="stable")
    out = []
    for part in np.array_split(order, min(bins, len(rows))):
        if len(part) == 0:
            continue
        lo, hi = int(fds[part].min()), int(fds[part].max())
        out.append({"fd_low": lo, "fd_high": hi, "fd_mean": float(fds[part].mean()), "points": len(part),
                    "esr": float(esr[part].mean())})
    return out
