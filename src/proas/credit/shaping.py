"""ProAS advantage shaping and its ablations, registered by name (``proas.credit.registry``;
docs/credit.md, "Shaping").

Only the trajectory-level part ``A_i`` is reshaped into ``Ã_{i,t}``; the step-specific part
``B_{i,t}`` is added back unchanged, so the final advantage is ``Ã_{i,t} + B_{i,t}``.

ProAS (``proas``):

- MUI, ``A_i > 0``: ``Ã_{i,t} = Rea_t · A_i`` (every step);
- APR, ``A_i < 0`` and ``t ∈ T_i``: ``Ã_{i,t} = D_{i,t} / (D̄_i + ε) · A_i`` where
  ``D̄_i = mean_{t' ∈ T_i} D_{i,t'}``; the penalty's sum over ``T_i`` stays ``|T_i| · A_i``
  (up to ε). When ``D̄_i = 0`` (every uniformly credited step advanced) there is nothing to
  redistribute by, and ``Ã_{i,t} = A_i``;
- otherwise ``Ã_{i,t} = A_i``.

Ablations: ``none``; ``no_mui`` (APR only, the paper's ProAS−); ``no_apr`` (MUI only, ProAS+);
``mask_pm`` (MUI, and for ``A_i < 0``, ``t ∈ T_i``: ``Ã = (1 − Rea_t) · A_i``, ProAS msk±);
``suffix`` (APR with ``D_{i,t}`` replaced by the remaining suffix length ``T_i − t + 1``, with
``t`` 1-based; MUI kept); ``random`` (ProAS on random labels, see ``random_annotations``).
``progress_reward`` is not a shaping of advantages but of the outcome reward before the base
estimator: see ``progress_bonus``.
"""

from __future__ import annotations

import numpy as np

from proas.credit.annotate import Annotations, future_drift
from proas.credit.batch import CreditBatch
from proas.credit.estimators import BaseAdvantage
from proas.credit.graph import ReferenceGraph
from proas.credit.registry import SHAPINGS, register_shaping, shaping_spec

__all__ = [
    "SHAPINGS",
    "mask_unreasonable",
    "progress_bonus",
    "random_annotations",
    "redistribute_penalty",
    "shape",
]


def mask_unreasonable(a: np.ndarray, rea: np.ndarray) -> np.ndarray:
    """MUI: where ``A_i > 0``, ``Ã = Rea_t · A_i``; elsewhere unchanged. Arrays of shape ``(S,)``."""
    return np.where(a > 0, a * rea, a)


def redistribute_penalty(
    a: np.ndarray,
    drift: np.ndarray,
    uniform: np.ndarray,
    traj_of_step: np.ndarray,
    n_traj: int,
    epsilon: float = 1e-6,
) -> np.ndarray:
    """APR: where ``A_i < 0`` and ``t ∈ T_i``, ``Ã = D_{i,t} / (D̄_i + ε) · A_i``.

    ``a`` is ``A_i`` broadcast to steps, ``drift`` the per-step drift ``D_{i,t}`` (Future-Drift,
    or the suffix length for the ``suffix`` ablation), ``uniform`` the mask ``U``; all ``(S,)``.
    ``D̄_i`` is the mean of ``drift`` over ``T_i``; a trajectory with ``D̄_i = 0`` keeps ``A_i``.
    """
    u = uniform.astype(np.float64)
    count = np.bincount(traj_of_step, weights=u, minlength=n_traj)
    total = np.bincount(traj_of_step, weights=u * drift, minlength=n_traj)
    mean = np.divide(total, count, out=np.zeros(n_traj), where=count > 0)[traj_of_step]
    apply = (a < 0) & uniform & (mean > 0)
    return np.where(apply, drift / (mean + epsilon) * a, a)


def random_annotations(ann: Annotations, batch: CreditBatch, rng: np.random.Generator) -> Annotations:
    """Random labels for the ``random`` ablation, at the rates the ARG gives on this batch.

    ``Rea ~ Bernoulli(mean Rea)``; among random-reasonable steps ``PA ~ Bernoulli(P(PA | Rea))``;
    Future-Drift follows from the random PA. Matching the rates isolates what the ARG's
    *information* contributes, rather than how many steps it masks.
    """
    n = batch.n_steps
    p_rea = float(ann.rea.mean()) if n else 0.0
    n_rea = int(ann.rea.sum())
    p_pa = float(ann.pa.sum()) / n_rea if n_rea else 0.0
    rea = (rng.random(n) < p_rea).astype(np.int64)
    pa = rea * (rng.random(n) < p_pa).astype(np.int64)
    return Annotations(rea=rea, pa=pa, fd=future_drift(pa, batch.offsets))


def progress_bonus(batch: CreditBatch, graph: ReferenceGraph, rea: np.ndarray, coef: float = 1.0) -> np.ndarray:
    """The progress-reward variant's bonus ``coef · p_i`` per trajectory (``(n,)``).

    ``p_i = clip(1 − d_min,i / d_ref,i, 0, 1)``, where ``d_min,i`` is the smallest ARG distance to
    a goal over the states that trajectory ``i`` reached by reasonable steps (``inf`` if none:
    ``p_i = 0``), and ``d_ref,i`` is the distance of its start state ``s_1`` (or, when the start
    state is unknown to the graph or as close as ``d_min,i``, the largest finite distance in the
    graph, so that any reasonable progress counts). A trajectory that reaches a goal state gets
    ``p_i = 1``. The variant then feeds ``R_i + coef · p_i`` to the base estimator, with no shaping.
    """
    dist = graph.distances_many(batch.states)
    reached = np.where(rea.astype(bool), dist[batch.next_state], np.inf)
    d_min = np.full(batch.n_traj, np.inf)
    np.minimum.at(d_min, batch.traj_of_step, reached)
    finite = dist[np.isfinite(dist)]
    depth = float(finite.max()) if finite.size else 0.0
    start = np.full(batch.n_traj, np.inf)
    has = batch.lengths > 0
    start[has] = dist[batch.state[batch.offsets[:-1][has]]]
    d_ref = np.where(np.isfinite(start) & (start > d_min), start, depth)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(d_min == 0, 1.0, np.where(np.isfinite(d_min) & (d_ref > 0), 1.0 - d_min / d_ref, 0.0))
    return coef * np.clip(p, 0.0, 1.0)


def _suffix_length(batch: CreditBatch) -> np.ndarray:
    return (batch.lengths[batch.traj_of_step] - batch.t).astype(np.float64)


def _apr(
    a: np.ndarray, shaped: np.ndarray, drift: np.ndarray, base: BaseAdvantage, batch: CreditBatch, epsilon: float
) -> np.ndarray:
    """``shaped`` where ``A_i >= 0``; APR with ``drift`` where ``A_i < 0``."""
    return np.where(
        a < 0, redistribute_penalty(a, drift, base.uniform, batch.traj_of_step, batch.n_traj, epsilon), shaped
    )


# ---------------------------------------------------------------------- the registered shapings
# Each takes ``A_i`` broadcast to steps (``a``, ``(S,)``) and returns ``Ã_{i,t}`` ``(S,)``.
@register_shaping("none")
def no_shaping(a: np.ndarray, base: BaseAdvantage, ann: Annotations, batch: CreditBatch) -> np.ndarray:
    """``Ã = A_i``: the base estimator alone."""
    return a


@register_shaping("proas")
def proas_shaping(
    a: np.ndarray, base: BaseAdvantage, ann: Annotations, batch: CreditBatch, *, epsilon: float = 1e-6
) -> np.ndarray:
    """ProAS: MUI for ``A_i > 0``, APR by Future-Drift for ``A_i < 0``."""
    return _apr(a, mask_unreasonable(a, ann.rea), ann.fd.astype(np.float64), base, batch, epsilon)


@register_shaping("no_mui")
def no_mui(
    a: np.ndarray, base: BaseAdvantage, ann: Annotations, batch: CreditBatch, *, epsilon: float = 1e-6
) -> np.ndarray:
    """APR only (the paper's ProAS−)."""
    return _apr(a, a, ann.fd.astype(np.float64), base, batch, epsilon)


@register_shaping("no_apr")
def no_apr(a: np.ndarray, base: BaseAdvantage, ann: Annotations, batch: CreditBatch) -> np.ndarray:
    """MUI only (the paper's ProAS+)."""
    return mask_unreasonable(a, ann.rea)


@register_shaping("mask_pm")
def mask_pm(a: np.ndarray, base: BaseAdvantage, ann: Annotations, batch: CreditBatch) -> np.ndarray:
    """MUI, and for ``A_i < 0``, ``t ∈ T_i``: ``Ã = (1 − Rea_t) · A_i`` (ProAS msk±)."""
    neg = (a < 0) & base.uniform
    return np.where(neg, (1 - ann.rea) * a, mask_unreasonable(a, ann.rea))


@register_shaping("suffix")
def suffix(
    a: np.ndarray, base: BaseAdvantage, ann: Annotations, batch: CreditBatch, *, epsilon: float = 1e-6
) -> np.ndarray:
    """MUI, and APR by the remaining suffix length ``T_i − t + 1`` instead of Future-Drift."""
    return _apr(a, mask_unreasonable(a, ann.rea), _suffix_length(batch), base, batch, epsilon)


@register_shaping("random")
def random_labels(
    a: np.ndarray,
    base: BaseAdvantage,
    ann: Annotations,
    batch: CreditBatch,
    *,
    epsilon: float = 1e-6,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """ProAS on random labels at the ARG's rates (``random_annotations``)."""
    ann = random_annotations(ann, batch, rng if rng is not None else np.random.default_rng(0))
    return proas_shaping(a, base, ann, batch, epsilon=epsilon)


@register_shaping("progress_reward", reward_bonus=True)
def progress_reward(
    a: np.ndarray, base: BaseAdvantage, ann: Annotations, batch: CreditBatch, *, progress_coef: float = 1.0
) -> np.ndarray:
    """``Ã = A_i``: the bonus ``progress_coef · p_i`` went into the rewards (``progress_bonus``)."""
    return a


def shape(
    name: str,
    base: BaseAdvantage,
    ann: Annotations,
    batch: CreditBatch,
    *,
    epsilon: float = 1e-6,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Reshape ``A_i`` into ``Ã_{i,t}`` with shaping ``name``; return ``Ã_{i,t} + B_{i,t}`` ``(S,)``.

    ``progress_reward`` acts on rewards, not here, so it behaves as ``none``.
    """
    spec = shaping_spec(name)
    kwargs: dict = {"epsilon": epsilon} if "epsilon" in spec.options else {}
    if spec.random:
        kwargs["rng"] = rng
    shaped = spec.fn(base.traj[batch.traj_of_step], base, ann, batch, **kwargs)
    return shaped + base.step
