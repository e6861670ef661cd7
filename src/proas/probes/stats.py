"""Panel (a)'s statistics over training: the share of unreasonable steps (``Rea = 0``) in
successful trajectories and of non-advancing steps (``PA = 0``) in failed ones.

Sources, in order of preference:

0. ``RUN_DIR/rollouts/step_N.jsonl.gz`` (``proas.rollout_log``): every logged RL step's
   batch with each step's ``rea`` and ``pa`` as the trainer's credit computed them (source
   ``rollout_log``);
1. ``RUN_DIR/metrics.jsonl``: the trainer records ``train/unreasonable_in_success`` and
   ``train/na_in_failure`` at every RL step, computed on that step's rollouts against the graph
   of that moment (source ``metrics``);
2. otherwise, fresh rollouts of the run's checkpoints (``best`` and the latest), annotated
   against each checkpoint's saved graph, or the oracle graph of the training tasks when the
   checkpoint has none (source ``rollouts``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from proas.credit import CreditBatch, ReferenceGraph, annotate
from proas.errors import ProasError
from proas.train import checkpoint as ckpt
from proas.types import Trajectory

__all__ = ["run_stats", "shares", "stats_from_checkpoints", "stats_from_metrics", "stats_from_rollout_logs"]

KEYS = ("train/unreasonable_in_success", "train/na_in_failure")


def shares(trajs: list[Trajectory], graph: ReferenceGraph) -> dict[str, Any]:
    """Unreasonable share in successes, NA share in failures (None where there is no such step)."""
    trajs = [t for t in trajs if t.steps]
    if not trajs:
        return {"unreasonable_in_success": None, "na_in_failure": None, "episodes": 0, "success": 0}
    ann = annotate(CreditBatch.from_trajectories(trajs), graph)
    won = np.concatenate([np.full(len(t), t.success, dtype=bool) for t in trajs])
    return {
        "unreasonable_in_success": float(1 - ann.rea[won].mean()) if won.any() else None,
        "na_in_failure": float(1 - ann.pa[~won].mean()) if (~won).any() else None,
        "episodes": len(trajs),
        "success": sum(t.success for t in trajs),
    }


def stats_from_rollout_logs(run_dir: Path) -> list[dict[str, Any]]:
    """One row per logged RL step, from the steps' logged ``rea`` / ``pa``."""
    try:
        from proas.rollout_log import list_rollout_steps, read_rollouts
    except ImportError:  # an installation without the inspector
        return []
    rows = []
    for step in list_rollout_steps(run_dir):
        log = read_rollouts(run_dir, step)
        rea = [s.rea for t in log.trajectories if t.success for s in t.steps]
        pa = [s.pa for t in log.trajectories if not t.success for s in t.steps]
        n = len(log.trajectories)
        rows.append({"step": step,
                     "unreasonable_in_success": 1.0 - sum(rea) / len(rea) if rea else None,
                     "na_in_failure": 1.0 - sum(pa) / len(pa) if pa else None,
                     "train_sr": sum(t.success for t in log.trajectories) / n if n else None,
                     "source": "rollout_log"})
    return rows


def stats_from_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    rows = []
    for rec in ckpt.read_metrics(path):
        if any(k in rec for k in KEYS):
            share = {key: _share(rec, key, path) for key in (*KEYS, "train/sr")}
            rows.append({"step": int(rec["step"]),
                         "unreasonable_in_success": share[KEYS[0]],
                         "na_in_failure": share[KEYS[1]],
                         "train_sr": share["train/sr"], "source": "metrics"})
    return rows


def _share(rec: dict[str, Any], key: str, path: Path) -> float | None:
    """A share the trainer recorded: null (none that step: no success, say) or a number in
    [0, 1]. The trainer writes a non-finite figure as null, so anything else (a NaN, a string,
    7) is a damaged file, refused rather than drawn as a gap or a point off the scale."""
    v = rec.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and 0 <= v <= 1):
        raise ProasError(f"{path}: step {rec['step']}: {key} is {str(v)[:40]!r}, not a share in [0, 1]")
    return float(v)


def stats_from_checkpoints(run_dir: Path, *, tasks: int = 32, group: int = 4, seed: int = 0) -> list[dict[str, Any]]:
    """Fresh rollouts (``group`` per task on ``tasks`` training tasks) of each checkpoint."""
    from proas.baselines.common import env_name, load_policy
    from proas.envs import make_factory
    from proas.probes.fd import oracle_graph
    from proas.train.rollout import Slot, rollout

    dirs = []
    if (run_dir / "best" / ckpt.STATE_FILE).exists():
        dirs.append(run_dir / "best")
    latest = ckpt.latest_checkpoint(run_dir) if (run_dir / ckpt.CHECKPOINTS).exists() else None
    if latest is not None:
        dirs.append(latest)
    if not dirs:
        raise ProasError(f"{run_dir}: neither training metrics with the probe's figures nor a checkpoint")
    saved = {d: ReferenceGraph.load(d / ckpt.GRAPH_FILE) for d in dirs if (d / ckpt.GRAPH_FILE).exists()}
    for d, graph in saved.items():  # checked before any checkpoint plays
        _refuse_empty(graph, str(d))
    rows = []
    graph_cache: ReferenceGraph | None = None
    for d in dirs:
        policy, cfg, _, state = load_policy(d)
        make = make_factory(cfg.env.name, cfg.env.options, config=True)
        env0 = make()
        ids = list(env0.task_ids("train"))[:tasks]
        max_steps = int(cfg.env.max_steps or env0.max_steps)
        if d in saved:
            graph = saved[d]
        else:
            graph_cache = graph_cache or oracle_graph(env0, ids, max_steps)
            graph = graph_cache
            _refuse_empty(graph, "the oracle's walkthroughs")
        slots = [Slot(t, f"g{k}", f"g{k}-{j}") for k, t in enumerate(ids) for j in range(group)]
        envs = [env0] + [make() for _ in range(len(slots) - 1)]
        trajs, _ = rollout(envs, slots, policy, np.random.default_rng(seed), temperature=cfg.policy.temperature,
                           max_steps=max_steps, success_reward=cfg.env.success_reward, env_name=env_name(cfg, env0))
        s = shares(trajs, graph)
        rows.append({"step": int(state.get("step", -1)), "checkpoint": d.name,
                     "unreasonable_in_success": s["unreasonable_in_success"], "na_in_failure": s["na_in_failure"],
                     "train_sr": s["success"] / max(1, s["episodes"]), "source": "rollouts"})
    rows.sort(key=lambda r: r["step"])
    return rows


def _refuse_empty(graph: ReferenceGraph, of: str) -> None:
    """Against a graph without edges every step is unreasonable and non-advancing, so both shares
    would be 100% whatever the policy does: a figure that measures nothing (as ``probe fd``)."""
    if graph.num_edges == 0:
        raise ProasError(f"stats probe: the reference graph of {of} is empty ({graph.num_nodes} states, no edges), "
                         "so every step would count as unreasonable and non-advancing; probe a checkpoint saved "
                         "with a graph of successful trajectories (or none: the oracle's)")


def run_stats(run_dir: Path, **kw: Any) -> list[dict[str, Any]]:
    if not run_dir.is_dir():
        raise ProasError(f"{run_dir}: no such run directory")
    rows = stats_from_rollout_logs(run_dir) or stats_from_metrics(run_dir)
    return rows if rows else stats_from_checkpoints(run_dir, **kw)
