"""Base advantage estimators, registered by name with their typed options (``proas.credit.registry``).

Each estimator maps a ``CreditBatch`` to a ``BaseAdvantage`` (docs/credit.md, "Base estimators"):

- ``traj``: ``(n,)`` the trajectory-level advantage ``A_i``, shared by every step of ``i``;
- ``step``: ``(S,)`` the step-specific part ``B_{i,t}`` (GiGPO's anchor-state term, GAE's
  whole advantage; zero for GRPO-style estimators);
- ``uniform``: ``(S,)`` bool ``U_{i,t}``: the step is credited uniformly (all steps for GRPO,
  DAPO, RLOO and REINFORCE++; GiGPO steps whose anchor-state group has one member; no step
  for GAE). ``T_i = {t : U_{i,t} = 1}``.

The full per-step base advantage is ``A_i + B_{i,t}``.

Conventions follow verl (``verl/trainer/ppo/core_algos.py``) and verl-agent
(``gigpo/core_gigpo.py``), at the granularity of steps rather than tokens. Group statistics
(``group_stats``) are taken, as verl-agent does by default (``compute_mean_std_cross_steps``),
over the group's **step rows** (``"steps"``: every step of every trajectory is a sample, so a
long trajectory weighs more), or over ``"trajectories"`` (one sample per trajectory); the
standard deviation is unbiased (N − 1); a group with one sample has mean 0 and std 1;
ε = 1e-6 is added to the std.

The invalid-action penalty (``step_penalty``, ``(S,)``, verl-agent's
``invalid_action_penalty_coef · (1 − is_action_valid)``) is subtracted from the row's score
before the group statistics, as verl-agent does: row ``(i, t)`` scores ``R_i − p_{i,t}``. The
part that comes from ``R_i`` is the trajectory-level ``A_i`` (what ProAS reshapes); the part that
comes from the row's own penalty, ``−p_{i,t}`` (divided by the group std where the estimator
normalises), is added to ``B_{i,t}``. For GiGPO the penalty is also subtracted from that row's
step return (not discounted into earlier steps), as verl-agent's ``step_rewards``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, get_args

import numpy as np

from proas.credit.batch import CreditBatch
from proas.credit.registry import ESTIMATORS, estimator_spec, in_range, register_estimator
from proas.types import MAX_ABS_NUMBER, Trajectory, group_by

__all__ = [
    "ESTIMATORS",
    "GROUP_STATS",
    "BaseAdvantage",
    "dapo",
    "discounted_returns",
    "dynamic_sampling_keep",
    "external",
    "gae",
    "get_estimator",
    "gigpo",
    "group_mean_std",
    "takes_group_stats",
    "grpo",
    "register_estimator",
    "reinforce_pp",
    "rloo",
]


@dataclass(frozen=True)
class BaseAdvantage:
    """A base estimator's output; see the module docstring. ``returns`` is set by GAE only."""

    traj: np.ndarray
    step: np.ndarray
    uniform: np.ndarray
    returns: np.ndarray | None = None

    def per_step(self, batch: CreditBatch) -> np.ndarray:
        """``(S,)`` ``A_i + B_{i,t}``: the full base advantage of every step."""
        return self.traj[batch.traj_of_step] + self.step


class Estimator(Protocol):
    def __call__(self, batch: CreditBatch, **options) -> BaseAdvantage: ...


#: how group statistics are taken; the first is the default (verl-agent's)
GroupStats = Literal["steps", "trajectories"]
GROUP_STATS: tuple[str, ...] = get_args(GroupStats)
#: GiGPO's and MiGPO's normalisation: mean only, or mean and std
NormMode = Literal["mean_norm", "mean_std_norm"]
#: REINFORCE++'s batch whitening: every step row a sample, or one per trajectory
WhitenOver = Literal["steps", "trajectories"]
#: the numeric options' ranges (``proas.credit.registry.in_range``): a discount, GAE's lambda,
#: a weight or reward scale (at most a reward's bound, ``MAX_ABS_NUMBER``) and the std floor ε
Discount = in_range(float, "(0, 1]")
Lambda = in_range(float, "[0, 1]")
Weight = in_range(float, f"[0, {MAX_ABS_NUMBER}]")
Epsilon = in_range(float, f"(0, {MAX_ABS_NUMBER}]")


def takes_group_stats(name: str) -> bool:
    """Whether the estimator ``name`` normalises over groups with a ``group_stats`` option."""
    spec = ESTIMATORS.get(name)
    return spec is not None and spec.takes("group_stats")


def get_estimator(name: str) -> Estimator:
    """The function registered as ``name`` (``proas.credit.registry.ESTIMATORS``)."""
    return estimator_spec(name).fn


# ---------------------------------------------------------------------- kernels
def group_mean_std(
    values: np.ndarray, group: np.ndarray, n_groups: int, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-group mean and unbiased std of ``values``; a group of one sample gets (0, 1).

    ``weights`` (integer counts) repeat a value that many times, which is how "every step row
    is a sample" is computed without materialising the rows. Returns ``(mean, std, count)``,
    each of shape ``(n_groups,)``.
    """
    w = np.ones_like(values) if weights is None else weights.astype(np.float64)
    count = np.bincount(group, weights=w, minlength=n_groups)
    total = np.bincount(group, weights=w * values, minlength=n_groups)
    safe = np.maximum(count, 1.0)
    mean = total / safe
    sq = np.bincount(group, weights=w * (values - mean[group]) ** 2, minlength=n_groups)
    std = np.sqrt(sq / np.maximum(count - 1.0, 1.0))
    single = count <= 1
    mean = np.where(single, 0.0, mean)
    std = np.where(single, 1.0, std)
    return mean, std, count


def _check_penalty(batch: CreditBatch, step_penalty: np.ndarray | None) -> np.ndarray:
    if step_penalty is None:
        return np.zeros(batch.n_steps)
    pen = np.asarray(step_penalty, dtype=np.float64)
    if pen.shape != (batch.n_steps,):
        raise ValueError(f"step_penalty must have shape ({batch.n_steps},), got {pen.shape}")
    return pen


def _outcome_advantage(
    batch: CreditBatch,
    *,
    norm_by_std: bool,
    epsilon: float,
    group_stats: GroupStats,
    step_penalty: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(A_i (n,), penalty part of B (S,))`` of GRPO's group-normalised outcome advantage."""
    if group_stats not in GROUP_STATS:
        raise ValueError(f"unknown group_stats {group_stats!r}; choose one of: {', '.join(GROUP_STATS)}")
    pen = _check_penalty(batch, step_penalty)
    if group_stats == "steps":
        # every step row is a sample scoring R_i - p_{i,t}
        row_group = batch.group[batch.traj_of_step]
        mean, std, _ = group_mean_std(batch.reward[batch.traj_of_step] - pen, row_group, batch.n_groups)
    else:
        mean, std, _ = group_mean_std(batch.reward, batch.group, batch.n_groups)
    adv = batch.reward - mean[batch.group]
    step = -pen
    if norm_by_std:
        adv = adv / (std[batch.group] + epsilon)
        step = step / (std[batch.group][batch.traj_of_step] + epsilon)
    return adv, step


def _uniform_result(batch: CreditBatch, traj: np.ndarray, step: np.ndarray | None = None) -> BaseAdvantage:
    return BaseAdvantage(
        traj=traj,
        step=np.zeros(batch.n_steps) if step is None else step,
        uniform=np.ones(batch.n_steps, dtype=bool),
    )


def discounted_returns(rewards: np.ndarray, batch: CreditBatch, gamma: float) -> np.ndarray:
    """``G_t = r_t + γ G_{t+1}`` within each trajectory (``(S,)`` in, ``(S,)`` out).

    Vectorised over trajectories: one pass over the time axis of the longest trajectory.
    """
    out = rewards.astype(np.float64).copy()
    if batch.n_steps == 0:
        return out
    max_len = int(batch.lengths.max())
    for t in range(max_len - 2, -1, -1):
        live = batch.lengths > t + 1
        idx = batch.offsets[:-1][live] + t
        out[idx] += gamma * out[idx + 1]
    return out


def _within_step_groups(
    values: np.ndarray, batch: CreditBatch, sub_key: np.ndarray, norm: bool, epsilon: float
) -> tuple[np.ndarray, np.ndarray]:
    """Normalise ``values`` ``(S,)`` within step groups ``(task group, sub_key)``.

    GiGPO's anchor-state groups and MiGPO's segment groups. Returns the normalised values and
    the ``(S,)`` mask of steps alone in their group, whose value is set to 0.
    """
    key = batch.group[batch.traj_of_step] * (int(sub_key.max(initial=0)) + 1) + sub_key
    _, step_group = np.unique(key, return_inverse=True)
    mean, std, count = group_mean_std(values, step_group, int(step_group.max(initial=-1)) + 1)
    single = count[step_group] <= 1
    out = values - mean[step_group]
    if norm:
        out = out / (std[step_group] + epsilon)
    out[single] = 0.0
    return out, single


# ---------------------------------------------------------------------- estimators
@register_estimator("grpo", outcome_only=True)
def grpo(
    batch: CreditBatch,
    *,
    norm_by_std: bool = True,
    epsilon: Epsilon = 1e-6,
    group_stats: GroupStats = "steps",
    step_penalty: np.ndarray | None = None,
) -> BaseAdvantage:
    """GRPO (arXiv:2402.03300): ``A_i = (R_i − mean_g) / (std_g + ε)``.

    ``norm_by_std=False`` normalises by the mean only (Dr. GRPO, verl's
    ``norm_adv_by_std_in_grpo=False``). ``group_stats`` and ``step_penalty``: module docstring.
    """
    traj, step = _outcome_advantage(
        batch, norm_by_std=norm_by_std, epsilon=epsilon, group_stats=group_stats, step_penalty=step_penalty
    )
    return _uniform_result(batch, traj, step)


@register_estimator("dapo", outcome_only=True)
def dapo(
    batch: CreditBatch,
    *,
    norm_by_std: bool = True,
    epsilon: Epsilon = 1e-6,
    group_stats: GroupStats = "steps",
    step_penalty: np.ndarray | None = None,
) -> BaseAdvantage:
    """DAPO (arXiv:2503.14476): GRPO's advantage; groups are filtered by ``dynamic_sampling_keep``.

    The rest of DAPO (clip-higher 0.2/0.28, token-mean loss, bounded re-sampling) lives in the
    trainer's loss and rollout.
    """
    return grpo(batch, norm_by_std=norm_by_std, epsilon=epsilon, group_stats=group_stats, step_penalty=step_penalty)


@register_estimator("gigpo")
def gigpo(
    batch: CreditBatch,
    *,
    gamma: Discount = 0.95,
    step_weight: Weight = 1.0,
    mode: NormMode = "mean_norm",
    epsilon: Epsilon = 1e-6,
    group_stats: GroupStats = "steps",
    step_penalty: np.ndarray | None = None,
) -> BaseAdvantage:
    """GiGPO (arXiv:2505.10978): episode-level plus anchor-state step-level advantage.

    - Episode level: GRPO over the group's outcome rewards.
    - Step level: steps of one group whose anchor observations are identical form a step
      group; each step's discounted return ``G_t`` (γ) is normalised within it. A step group
      of one member gets 0 and is credited uniformly (``U = 1``).
    - ``mode``: ``"mean_norm"`` subtracts the mean only at both levels (verl-agent's config
      default and its WebShop scripts); ``"mean_std_norm"`` also divides by ``std + ε``
      (verl-agent's ALFWorld scripts).
    - ``B_{i,t} = step_weight · A^S_{i,t}`` plus the episode level's penalty part.
    """
    if mode not in get_args(NormMode):
        raise ValueError(f"unknown GiGPO mode {mode!r}; choose mean_norm or mean_std_norm")
    norm = mode == "mean_std_norm"
    traj, pen_part = _outcome_advantage(
        batch, norm_by_std=norm, epsilon=epsilon, group_stats=group_stats, step_penalty=step_penalty
    )
    returns = discounted_returns(batch.step_reward, batch, gamma) - _check_penalty(batch, step_penalty)
    step_adv, single = _within_step_groups(returns, batch, batch.anchor, norm, epsilon)
    return BaseAdvantage(traj=traj, step=step_weight * step_adv + pen_part, uniform=single)


def dynamic_sampling_keep(trajectories: list[Trajectory], atol: float = 0.0) -> dict[str, bool]:
    """DAPO's dynamic sampling: keep a group unless all its outcome rewards are equal.

    Returns ``{group_id: keep}``. ``atol`` treats rewards this close as equal.
    """
    keep = {}
    for gid, members in group_by(trajectories).items():
        rewards = np.array([t.reward for t in members], dtype=np.float64)
        keep[gid] = bool(rewards.max() - rewards.min() > atol)
    return keep


@register_estimator("rloo", outcome_only=True)
def rloo(batch: CreditBatch) -> BaseAdvantage:
    """RLOO (arXiv:2402.14740): ``A_i = R_i − mean_{j≠i} R_j = (R_i − mean_g) · G/(G−1)``.

    A group of one keeps its raw reward (verl's convention).
    """
    mean, _, count = group_mean_std(batch.reward, batch.group, batch.n_groups)
    g = count[batch.group]
    multi = g > 1
    adv = batch.reward.copy()
    adv[multi] = (batch.reward[multi] - mean[batch.group][multi]) * g[multi] / (g[multi] - 1)
    return _uniform_result(batch, adv)


@register_estimator("reinforce_pp", outcome_only=True)
def reinforce_pp(batch: CreditBatch, *, epsilon: Epsilon = 1e-8, whiten_over: WhitenOver = "steps") -> BaseAdvantage:
    """REINFORCE++ with baseline (arXiv:2501.03262; verl's ``reinforce_plus_plus_baseline``).

    ``R_i − mean_g`` (a group of one: mean 0), then whitened over the whole batch: mean
    subtracted and divided by ``sqrt(var + ε)`` with the unbiased variance. ``whiten_over``
    is ``"steps"`` (every step is a sample, as verl's token-level whitening over step rows) or
    ``"trajectories"``.
    """
    if whiten_over not in get_args(WhitenOver):
        raise ValueError("whiten_over must be 'steps' or 'trajectories'")
    mean, _, _ = group_mean_std(batch.reward, batch.group, batch.n_groups)
    centred = batch.reward - mean[batch.group]
    w = batch.lengths.astype(np.float64) if whiten_over == "steps" else np.ones(batch.n_traj)
    total = w.sum()
    if total > 1:
        mu = (w * centred).sum() / total
        var = (w * (centred - mu) ** 2).sum() / (total - 1)
        centred = (centred - mu) / np.sqrt(var + epsilon)
    return _uniform_result(batch, centred)


@register_estimator("migpo")
def migpo(
    batch: CreditBatch,
    *,
    milestones: np.ndarray,
    gamma: Discount = 0.9,
    scale: Weight = 10.0,
    step_weight: Weight = 1.0,
    mode: NormMode = "mean_norm",
    epsilon: Epsilon = 1e-6,
    group_stats: GroupStats = "steps",
    step_penalty: np.ndarray | None = None,
) -> BaseAdvantage:
    """MiGPO, milestone-guided policy optimisation (BEACON, arXiv:2605.06078).

    ``milestones`` ``(S,)`` bool marks the steps that reach a milestone. A trajectory is cut
    into segments that end at its milestone steps; in a completed segment ending at milestone
    step ``m``, step ``t`` gets the segment reward ``scale · γ^{m − t}`` (the key step gets
    ``scale``); steps after the last milestone get 0 and form one more segment. Segment groups
    are ``(task group, segment index)``; within each, rewards are normalised as GiGPO's step
    level (``mode``; a group of one gets 0 and is credited uniformly). ``A_i`` is GRPO's
    episode-level advantage and ``B_{i,t} = step_weight · A^seg_{i,t}``.

    ``compute_credit`` derives the milestones from the reference graph when none are given:
    see ``proas.credit.pipeline.arg_milestones``.
    """
    if mode not in get_args(NormMode):
        raise ValueError(f"unknown MiGPO mode {mode!r}; choose mean_norm or mean_std_norm")
    milestones = np.asarray(milestones, dtype=bool)
    if milestones.shape != (batch.n_steps,):
        raise ValueError(f"milestones must have shape ({batch.n_steps},), got {milestones.shape}")
    norm = mode == "mean_std_norm"
    traj, pen_part = _outcome_advantage(
        batch, norm_by_std=norm, epsilon=epsilon, group_stats=group_stats, step_penalty=step_penalty
    )
    # segment index of each step: milestones strictly before it in its trajectory
    m = milestones.astype(np.int64)
    csum = np.cumsum(m)
    start = batch.offsets[:-1][batch.traj_of_step]
    before = csum - m - np.where(start > 0, csum[np.maximum(start - 1, 0)], 0)
    # distance to the segment's closing milestone: next milestone at or after t, same trajectory
    idx = np.arange(batch.n_steps)
    next_m = np.full(batch.n_steps + 1, batch.n_steps, dtype=np.int64)
    pos = np.where(milestones, idx, batch.n_steps)
    next_m[:-1] = np.minimum.accumulate(pos[::-1])[::-1]
    end = batch.offsets[1:][batch.traj_of_step]
    closed = next_m[:-1] < end
    seg_reward = np.where(closed, scale * np.power(gamma, (next_m[:-1] - idx).astype(np.float64)), 0.0)
    seg_adv, single = _within_step_groups(seg_reward, batch, before, norm, epsilon)
    return BaseAdvantage(traj=traj, step=step_weight * seg_adv + pen_part, uniform=single)


@register_estimator("gae", needs_values=True)
def gae(
    batch: CreditBatch,
    *,
    gamma: Discount = 1.0,
    lam: Lambda = 1.0,
    whiten: bool = True,
    epsilon: Epsilon = 1e-8,
    bootstrap_truncated: bool = False,
    values: np.ndarray | None = None,
    final_values: np.ndarray | None = None,
) -> BaseAdvantage:
    """PPO's GAE (arXiv:1506.02438) over the steps of each trajectory.

    ``δ_t = r_t + γ V_{t+1} − V_t``, ``A_t = δ_t + γλ A_{t+1}``, returns ``A_t + V_t``; then
    optionally whitened over the batch (verl's ``masked_whiten``). GAE has no trajectory-level
    part, so ``A_i = 0`` and no step is uniform: ProAS shaping leaves PPO's advantages
    unchanged. Defaults γ = λ = 1 as in verl-agent's PPO scripts.

    - ``values``: ``(S,)`` the critic's ``V(s_t)`` (the trainer's critic, through
      ``credit_arrays(values=...)``); ``None`` reads the values the trajectories recorded
      (``Step.value``, a trajectory log's ``value``).
    - After the last step ``V`` is 0, except where ``bootstrap_truncated`` is on and the
      trajectory was truncated (``CreditBatch.truncated``: cut by the step limit, not ended by
      the task): there ``V_{T}`` is ``final_values[i]``, the critic's value of the state the
      episode was cut in (``(n,)``; a terminated trajectory's entry is not read). Off by
      default, as verl-agent (it treats the step limit as an end of the episode), which is
      right when the limit is part of the task and the critic sees the step count, as the
      trainer's does (docs/credit.md, "Episode ends: terminated and truncated").
    """
    if values is None:
        values = batch.value
        if batch.n_steps and np.isnan(values).any():
            raise ValueError("gae needs a value for every step (values=..., or Step.value in the trajectories)")
    else:
        values = np.asarray(values, dtype=np.float64)
        if values.shape != (batch.n_steps,):
            raise ValueError(f"values must have shape ({batch.n_steps},), got {values.shape}")
    next_values = np.zeros(batch.n_steps)
    not_last = batch.t < batch.lengths[batch.traj_of_step] - 1
    next_values[not_last] = values[np.flatnonzero(not_last) + 1]
    if bootstrap_truncated:
        cut = batch.truncated & (batch.lengths > 0)
        if cut.any():
            if final_values is None:
                raise ValueError("gae: bootstrap_truncated needs final_values, the value of the state each "
                                 "truncated trajectory was cut in")
            final = np.asarray(final_values, dtype=np.float64)
            if final.shape != (batch.n_traj,):
                raise ValueError(f"final_values must have shape ({batch.n_traj},), got {final.shape}")
            next_values[batch.offsets[1:][cut] - 1] = final[cut]
    delta = batch.step_reward + gamma * next_values - values
    adv = discounted_returns(delta, batch, gamma * lam)
    returns = adv + values
    if whiten and batch.n_steps > 1:
        adv = (adv - adv.mean()) / np.sqrt(adv.var(ddof=1) + epsilon)
    return BaseAdvantage(
        traj=np.zeros(batch.n_traj), step=adv, uniform=np.zeros(batch.n_steps, dtype=bool), returns=returns
    )


@register_estimator("external", outcome_only=True, external=True)
def external(batch: CreditBatch, *, advantage: np.ndarray) -> BaseAdvantage:
    """An advantage computed outside proas, one value per step (the verl hook's ``base="verl"``:
    verl's own advantage), split so that a shaping can reshape it.

    ``A_i`` is the mean of the trajectory's step values, ``B_{i,t}`` the step's value minus
    ``A_i`` (e.g. verl-agent's invalid-action penalty on that row), and every step is credited
    uniformly. It has no name in a config or on the command line (``EstimatorSpec.external``):
    its input is an array, which only a caller that holds one can give.
    """
    step_value = np.asarray(advantage, dtype=np.float64)
    if step_value.shape != (batch.n_steps,):
        raise ValueError(f"advantage must have shape ({batch.n_steps},), got {step_value.shape}")
    traj = np.bincount(batch.traj_of_step, weights=step_value, minlength=batch.n_traj) / np.maximum(batch.lengths, 1)
    return BaseAdvantage(traj=traj, step=step_value - traj[batch.traj_of_step],
                         uniform=np.ones(batch.n_steps, dtype=bool))
