"""``credit_arrays``: the one place an advantage is made; ``compute_credit`` on trajectories.

``credit_arrays`` is the only caller of the base estimators and the shapings in proas (a test,
``tests/test_credit_single_path.py``, checks it): the trainer reaches it through
``compute_credit``, the verl hook and ``proas credit`` likewise or directly. The steps:

1. the batch becomes flat arrays (``CreditBatch``; ``compute_credit`` does this, the verl hook
   builds them from its rows);
2. unless the graph is static, the batch's successful trajectories are merged into the graph
   (the evolving ARG) — before annotation, so a successful trajectory's clean path is known
   (``compute_credit(evolve=True)``; the verl hook evolves its graph itself);
3. ``Rea`` (under the rule ``rea``: ``transition``, ``state_action`` or ``node``), ``PA`` and
   ``D`` are computed against the graph;
4. the base estimator gives ``A_i``, ``B_{i,t}``, ``U_{i,t}`` (for ``progress_reward`` the
   estimator sees ``R_i`` plus the ARG progress bonus). Its per-batch inputs are arguments of
   ``credit_arrays``: the critic's ``values`` (and ``final_values`` to bootstrap truncated
   episodes) for GAE, the ``advantage`` computed elsewhere for ``external``, the ARG's
   milestones for MiGPO (derived here), the invalid-action penalty (step 6);
5. the shaping turns ``A_i`` into ``Ã_{i,t}``; the advantage is ``Ã_{i,t} + B_{i,t}``;
6. the invalid-action penalty (``InvalidActionPenalty``), charged here and nowhere else:
   estimators with a ``step_penalty`` option (GRPO, DAPO, GiGPO, MiGPO) take it in step 4,
   subtracted from the row's score before the group statistics as verl-agent does, so it is in
   ``B_{i,t}`` and in ``advantage``; for the others (RLOO, REINFORCE++, GAE) it is charged on
   the final advantage after shaping (``CreditResult.penalty``; ``CreditResult.final`` is what
   a policy loss uses), or not at all with ``otherwise="none"`` (the verl hook, as before:
   docs/verl.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from proas.credit.annotate import annotate
from proas.credit.batch import CreditBatch
from proas.credit.graph import ReferenceGraph
from proas.credit.registry import SHAPING_OPTIONS, check_options
from proas.credit.shaping import progress_bonus, shape
from proas.types import Trajectory, as_trajectories

__all__ = ["ARG_VARIANTS", "CreditResult", "InvalidActionPenalty", "arg_milestones", "compute_credit", "credit_arrays",
           "make_reference_graph"]

#: how the reference graph is built and evolved: the paper's ARG ablations
#: (docs/training.md, "The reference graph (ARG)")
ARG_VARIANTS = ("evolving", "static", "incomplete", "incomplete_static", "distill")


@dataclass(frozen=True)
class InvalidActionPenalty:
    """verl-agent's invalid-action penalty: ``coef`` on every step whose action was invalid.

    ``invalid`` is ``(S,)`` bool: verl-agent's ``1 − is_action_valid`` (the trainer: a response
    that could not be parsed into an action, ``Step.extra['malformed']``; the verl hook: the
    ``is_action_valid`` column). ``credit_arrays`` charges ``coef · invalid`` once (module
    docstring, step 6): in the row's score for the estimators that take ``step_penalty``; for the
    others on the final advantage (``otherwise="advantage"``, the trainer) or not at all
    (``otherwise="none"``, the verl hook).
    """

    coef: float
    invalid: np.ndarray
    otherwise: Literal["advantage", "none"] = "advantage"

    def per_step(self, n_steps: int) -> np.ndarray:
        """``(S,)`` the penalty of every step, ``coef · invalid``."""
        invalid = np.asarray(self.invalid, dtype=bool)
        if invalid.shape != (n_steps,):
            raise ValueError(f"invalid must have shape ({n_steps},), got {invalid.shape}")
        return self.coef * invalid.astype(np.float64)


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
        advantage: ``Ã_{i,t} + B_{i,t}``, the shaped advantage (with the invalid-action
            penalty where the estimator took it as ``step_penalty``).
        penalty: the invalid-action penalty charged after shaping (estimators without
            ``step_penalty``), zero elsewhere; ``final = advantage − penalty``.
        reward: ``(n,)`` the outcome rewards the estimator saw (with the progress bonus for
            ``progress_reward``).
        returns: value targets for GAE, else ``None``.
        values: the ``V(s_t)`` GAE used (the ``values`` given, or those recorded), else ``None``.
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
    penalty: np.ndarray | None = None
    values: np.ndarray | None = None

    @property
    def final(self) -> np.ndarray:
        """``(S,)`` the advantage a policy loss uses: ``advantage`` minus the penalty charged after
        shaping."""
        return self.advantage if self.penalty is None else self.advantage - self.penalty

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
    *,
    values: np.ndarray | None = None,
    final_values: np.ndarray | None = None,
    penalty: InvalidActionPenalty | None = None,
) -> CreditResult:
    """Annotate, estimate and shape a ``CreditBatch`` (no graph evolution): the one place an
    advantage is made (module docstring).

    Args:
        values: ``(S,)`` the critic's ``V(s_t)``, for estimators that read values (GAE); ``None``
            reads the values the trajectories recorded (``Step.value``).
        final_values: ``(n,)`` the critic's value of the state each trajectory ended in, read by
            GAE with ``bootstrap_truncated`` for the truncated ones.
        penalty: the invalid-action penalty, charged here (``InvalidActionPenalty``).
        Others: as ``compute_credit``.
    """
    est, sh = check_options(estimator, estimator_options, shaping, shaping_options)
    opts = dict(shaping_options or {})
    epsilon = float(opts.get("epsilon", SHAPING_OPTIONS["epsilon"].default))
    coef = float(opts.get("progress_coef", SHAPING_OPTIONS["progress_coef"].default))
    ann = annotate(batch, graph, rea)
    if sh.reward_bonus:
        batch = batch.with_reward(batch.reward + progress_bonus(batch, graph, ann.rea, coef))
    # the estimator's per-batch inputs
    est_opts = dict(estimator_options or {})
    if est.takes("milestones") and "milestones" not in est_opts:
        est_opts["milestones"] = arg_milestones(batch, graph, ann.rea)
    if est.takes("values") and values is not None:
        est_opts["values"] = values
    if est.takes("final_values") and final_values is not None:
        est_opts["final_values"] = final_values
    # the invalid-action penalty: in the row's score, or after shaping (step 6)
    after = None
    if penalty is not None:
        if "step_penalty" in est_opts:
            raise ValueError("give the invalid-action penalty once: penalty=... or the step_penalty option")
        per_step = penalty.per_step(batch.n_steps)
        if est.takes("step_penalty"):
            est_opts["step_penalty"] = per_step
        elif penalty.otherwise == "advantage":
            after = per_step
        elif penalty.otherwise != "none":
            raise ValueError(f"unknown InvalidActionPenalty.otherwise {penalty.otherwise!r}; choose advantage or none")
    missing = [o.name for o in est.options.values() if o.required and o.name not in est_opts]
    if missing:
        raise ValueError(f"estimator {est.name!r} needs option(s) {', '.join(missing)}")
    base = est.fn(batch, **est_opts)
    shaped = shape(shaping, base, ann, batch, epsilon=epsilon, rng=np.random.default_rng(seed))
    a = base.traj[batch.traj_of_step]
    used_values = None
    if est.takes("values"):
        used_values = np.asarray(values if values is not None else batch.value, dtype=np.float64)
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
        penalty=after,
        values=used_values,
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
    *,
    values: np.ndarray | None = None,
    final_values: np.ndarray | None = None,
    penalty: InvalidActionPenalty | None = None,
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
        values, final_values, penalty: the estimator's per-batch inputs, as ``credit_arrays``
            takes them (the critic's values, the values of the states truncated episodes were
            cut in, the invalid-action penalty).
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
        values=values,
        final_values=final_values,
        penalty=penalty,
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
