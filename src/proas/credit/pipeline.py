"""``compute_credit``: base estimator, annotation and shaping in one call, plus ARG variants.

This is what the trainer, the verl integration and ``proas credit`` call. The steps:

1. the batch becomes flat arrays (``CreditBatch``);
2. unless the graph is static, the batch's successful trajectories are merged into the graph
   (the evolving ARG) — before annotation, so a successful trajectory's clean path is known;
3. ``Rea`` (under the rule ``rea``: ``transition``, ``state_action`` or ``node``), ``PA`` and
   ``D`` are computed against the graph;
4. the base estimator gives ``A_i``, ``B_{i,t}``, ``U_{i,t}`` (for ``progress_reward`` the
   estimator sees ``R_i`` plus the ARG progress bonus);
5. the shaping turns ``A_i`` into ``Ã_{i,t}``; the final advantage is ``Ã_{i,t} + B_{i,t}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from proas.credit.annotate import annotate
from proas.credit.batch import CreditBatch
from proas.credit.graph import ReferenceGraph
from proas.credit.registry import SHAPING_OPTIONS, check_options
from proas.credit.shaping import progress_bonus, shape
from proas.types import Trajectory, as_trajectories

__all__ = ["ARG_VARIANTS", "CreditResult", "arg_milestones", "compute_credit", "credit_arrays", "make_reference_graph"]

#: how the reference graph is built and evolved: the paper's ARG ablations
#: (docs/training.md, "The reference graph (ARG)")
ARG_VARIANTS = ("evolving", "static", "incomplete", "incomplete_static", "distill")


@dataclass(frozen=True)
class CreditResult:
    """Per-step credit of a batch; every array has shape ``(S,)`` unless noted.

    Steps are laid out trajectory by trajectory in input order; trajectory ``i`` owns
    ``[offsets[i], offsets[i + 1])``.

    Attributes:
        rea, pa, fd: ``Rea_t``, ``PA_t``, ``D_{i,t}`` (the labels actually used; for the
            ``random`` ablation, shaping draws its own labels from these rates).
        traj_advantage: ``A_i`` broadcast to steps; step_advantage: ``B_{i,t}``;
        uniform: ``U_{i,t}``.
        base_advantage: ``A_i + B_{i,t}``, the estimator's advantage before shaping.
        advantage: ``Ã_{i,t} + B_{i,t}``, the final advantage.
        reward: ``(n,)`` the outcome rewards the estimator saw (with the progress bonus for
            ``progress_reward``).
        returns: value targets for GAE, else ``None``.
        offsets: ``(n + 1,)``.
    """

    rea: np.ndarray
    pa: np.ndarray
    fd: np.ndarray
    traj_advantage: np.ndarray
    step_advantage: np.ndarray
    uniform: np.ndarray
    base_advantage: np.ndarray
    advantage: np.ndarray
    reward: np.ndarray
    returns: np.ndarray | None
    offsets: np.ndarray

    def per_trajectory(self, field: str = "advantage") -> list[np.ndarray]:
        arr = getattr(self, field)
        return [arr[a:b] for a, b in zip(self.offsets[:-1], self.offsets[1:])]


def arg_milestones(batch: CreditBatch, graph: ReferenceGraph, rea: np.ndarray) -> np.ndarray:
    """``(S,)`` bool: MiGPO milestones read off the reference graph.

    A reasonable step is a milestone when it reaches a state strictly closer to a goal (by
    ARG distance) than the trajectory's start state and every state it reached before by a
    reasonable step: each new best step along the ARG's path to the goal.
    """
    dist = graph.distances_many(batch.states)
    reached = np.where(rea.astype(bool), dist[batch.next_state], np.inf)
    out = np.zeros(batch.n_steps, dtype=bool)
    for i in range(batch.n_traj):
        lo, hi = batch.offsets[i], batch.offsets[i + 1]
        if hi == lo:
            continue
        best = dist[batch.state[lo]]
        seg = reached[lo:hi]
        prior = np.minimum.accumulate(np.concatenate([[best], seg[:-1]]))
        out[lo:hi] = np.isfinite(seg) & (seg < prior)
    return out


def credit_arrays(
    batch: CreditBatch,
    graph: ReferenceGraph,
    estimator: str = "grpo",
    shaping: str = "proas",
    estimator_options: Mapping[str, Any] | None = None,
    shaping_options: Mapping[str, Any] | None = None,
    seed: int = 0,
    rea: str = "transition",
) -> CreditResult:
    """Annotate, estimate and shape a ``CreditBatch`` (no graph evolution)."""
    est, sh = check_options(estimator, estimator_options, shaping, shaping_options)
    opts = dict(shaping_options or {})
    epsilon = float(opts.get("epsilon", SHAPING_OPTIONS["epsilon"].default))
    coef = float(opts.get("progress_coef", SHAPING_OPTIONS["progress_coef"].default))
    ann = annotate(batch, graph, rea)
    if sh.reward_bonus:
        batch = batch.with_reward(batch.reward + progress_bonus(batch, graph, ann.rea, coef))
    est_opts = dict(estimator_options or {})
    if est.takes("milestones") and "milestones" not in est_opts:
        est_opts["milestones"] = arg_milestones(batch, graph, ann.rea)
    base = est.fn(batch, **est_opts)
    shaped = shape(shaping, base, ann, batch, epsilon=epsilon, rng=np.random.default_rng(seed))
    a = base.traj[batch.traj_of_step]
    return CreditResult(
        rea=ann.rea,
        pa=ann.pa,
        fd=ann.fd,
        traj_advantage=a,
        step_advantage=base.step,
        uniform=base.uniform,
        base_advantage=a + base.step,
        advantage=shaped,
        reward=batch.reward,
        returns=base.returns,
        offsets=batch.offsets,
    )


def compute_credit(
    trajectories: Sequence[Trajectory | Mapping[str, Any]],
    graph: ReferenceGraph,
    estimator: str = "grpo",
    shaping: str = "proas",
    estimator_options: Mapping[str, Any] | None = None,
    shaping_options: Mapping[str, Any] | None = None,
    seed: int = 0,
    evolve: bool = False,
    rea: str = "transition",
) -> CreditResult:
    """Credit for a batch of trajectories.

    Args:
        trajectories: the batch, groups identified by ``Trajectory.group``: ``Trajectory``
            objects or their JSON records (the lines of a trajectory log, parsed), checked as
            ``proas credit`` checks them (``TrajectoryFormatError``, a ``ValueError``).
        graph: the reference graph; with ``evolve=True`` the batch's successful trajectories
            are merged into it first (the graph is modified in place).
        estimator: a name in ``proas.credit.ESTIMATORS``; ``estimator_options`` go to it (its
            entry's ``options``: unknown keys and values of the wrong type are a ``ValueError``).
        shaping: a name in ``proas.credit.SHAPINGS``; ``shaping_options``: ``epsilon`` (APR's
            ε, 1e-6) and ``progress_coef`` (the progress-reward bonus weight, 1.0), the keys of
            ``proas.credit.registry.SHAPING_OPTIONS``.
        seed: seeds the ``random`` ablation's labels.
        rea: the reasonableness rule (``proas.credit.REA_RULES``; ``transition`` by default).
    """
    trajectories = as_trajectories(trajectories)
    if evolve:
        graph.add_trajectories(trajectories)
    return credit_arrays(
        CreditBatch.from_trajectories(trajectories),
        graph,
        estimator=estimator,
        shaping=shaping,
        estimator_options=estimator_options,
        shaping_options=shaping_options,
        seed=seed,
        rea=rea,
    )


def make_reference_graph(
    variant: str,
    oracle: Sequence[Trajectory] = (),
    *,
    distill_from: Sequence[Trajectory] = (),
    prune_fraction: float = 0.4,
    seed: int = 0,
) -> tuple[ReferenceGraph, bool]:
    """Build the initial graph for an ARG variant; return ``(graph, evolve)``.

    - ``evolving`` (default ProAS): from the oracle trajectories, evolved every batch;
    - ``static``: the same graph, never evolved;
    - ``incomplete`` / ``incomplete_static``: pruned by ``prune_fraction`` (0.4) of its
      state-action pairs with ``seed``, evolved / not;
    - ``distill``: from another policy's successful rollouts (``distill_from``), evolved.
    """
    if variant not in ARG_VARIANTS:
        raise ValueError(f"unknown ARG variant {variant!r}; choose one of: {', '.join(ARG_VARIANTS)}")
    source = distill_from if variant == "distill" else oracle
    graph = ReferenceGraph.from_trajectories(source)
    if variant.startswith("incomplete"):
        graph.prune(prune_fraction, seed=seed)
    graph.meta.update({"variant": variant, "built_from": len(source)})
    return graph, variant not in ("static", "incomplete_static")
