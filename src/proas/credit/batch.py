"""``CreditBatch``: a batch of trajectories as flat per-step and per-trajectory arrays.

The credit layer's kernels (annotation, estimators, shaping) work on these arrays, never on
Python objects, so that a batch of thousands of steps costs milliseconds. Shapes use
``n`` = number of trajectories and ``S`` = total number of steps; steps are laid out
trajectory by trajectory in input order, and steps of trajectory ``i`` occupy
``[offsets[i], offsets[i + 1])``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from proas.types import Trajectory

__all__ = ["CreditBatch"]


def _intern(values: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    table: dict[str, int] = {}
    codes = np.fromiter((table.setdefault(v, len(table)) for v in values), dtype=np.int64, count=len(values))
    return codes, list(table)


@dataclass(frozen=True)
class CreditBatch:
    """Flat arrays of a batch of trajectories.

    Attributes (shapes):
        offsets: ``(n + 1,)`` step offsets of each trajectory.
        traj_of_step: ``(S,)`` trajectory index of each step.
        t: ``(S,)`` 0-based step index within its trajectory.
        lengths: ``(n,)`` ``T_i``.
        group: ``(n,)`` group code of each trajectory (codes index ``group_ids``).
        reward: ``(n,)`` outcome reward ``R_i``.
        success: ``(n,)`` bool, ``won`` if recorded else ``R_i > 0``.
        states: vocabulary of abstract states seen in the batch (before and after steps).
        state: ``(S,)`` code of ``s_t``; ``next_state``: ``(S,)`` code of ``s_{t+1}``.
        actions: vocabulary of the actions taken in the batch; action: ``(S,)`` code of ``a_t``.
        error: ``(S,)`` bool ``error_t``.
        anchor: ``(S,)`` code of the anchor observation (the state text when none was given);
            codes are only meaningful for equality.
        step_reward: ``(S,)`` env reward ``r_t``; where a trajectory recorded none, its outcome
            reward sits on the last step and zeros elsewhere.
        value: ``(S,)`` critic values ``V(s_t)`` as the trajectories recorded them (``Step.value``),
            NaN where not recorded; GAE reads them only when it is given no ``values``.
        truncated: ``(n,)`` bool, the episode was cut by a step limit before it terminated
            (``Trajectory.truncated``).
    """

    offsets: np.ndarray
    traj_of_step: np.ndarray
    t: np.ndarray
    lengths: np.ndarray
    group: np.ndarray
    group_ids: list[str]
    traj_ids: list[str]
    reward: np.ndarray
    success: np.ndarray
    states: list[str]
    state: np.ndarray
    next_state: np.ndarray
    actions: list[str]
    action: np.ndarray
    error: np.ndarray
    anchor: np.ndarray
    step_reward: np.ndarray
    value: np.ndarray
    reward_on_last: np.ndarray
    truncated: np.ndarray

    @property
    def n_traj(self) -> int:
        return len(self.lengths)

    @property
    def n_steps(self) -> int:
        return len(self.traj_of_step)

    @property
    def n_groups(self) -> int:
        return len(self.group_ids)

    def with_reward(self, reward: np.ndarray) -> CreditBatch:
        """The same batch with other outcome rewards (used by the progress-reward variant).

        Trajectories that recorded no step rewards carry the new outcome on their last step.
        """
        reward = np.asarray(reward, dtype=np.float64)
        step_reward = self.step_reward.copy()
        last = self.offsets[1:][self.reward_on_last] - 1
        step_reward[last] = reward[self.reward_on_last]
        return replace(self, reward=reward, step_reward=step_reward)

    @classmethod
    def from_trajectories(cls, trajectories: Sequence[Trajectory]) -> CreditBatch:
        n = len(trajectories)
        lengths = np.fromiter((len(tr.steps) for tr in trajectories), dtype=np.int64, count=n)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        n_steps = int(offsets[-1])
        traj_of_step = np.repeat(np.arange(n, dtype=np.int64), lengths)
        t = np.arange(n_steps, dtype=np.int64) - offsets[traj_of_step]
        group, group_ids = _intern([tr.group for tr in trajectories])
        steps = [s for tr in trajectories for s in tr.steps]
        state_codes, states = _intern([s.state for s in steps] + [s.next_state for s in steps])
        action, actions = _intern([s.action for s in steps])
        anchor, _ = _intern([s.anchor if s.anchor is not None else s.state for s in steps])
        reward = np.fromiter((tr.reward for tr in trajectories), dtype=np.float64, count=n)
        success = np.fromiter((tr.success for tr in trajectories), dtype=bool, count=n)
        error = np.fromiter((s.error for s in steps), dtype=bool, count=n_steps)
        step_reward = np.fromiter(
            (0.0 if s.reward is None else s.reward for s in steps), dtype=np.float64, count=n_steps
        )
        value = np.fromiter(
            (np.nan if s.value is None else s.value for s in steps), dtype=np.float64, count=n_steps
        )
        reward_on_last = np.fromiter(
            (len(tr.steps) > 0 and all(s.reward is None for s in tr.steps) for tr in trajectories),
            dtype=bool,
            count=n,
        )
        step_reward[offsets[1:][reward_on_last] - 1] = reward[reward_on_last]
        truncated = np.fromiter((bool(tr.truncated) for tr in trajectories), dtype=bool, count=n)
        return cls(
            offsets=offsets,
            traj_of_step=traj_of_step,
            t=t,
            lengths=lengths,
            group=group,
            group_ids=group_ids,
            traj_ids=[tr.trajectory for tr in trajectories],
            reward=reward,
            success=success,
            states=states,
            state=state_codes[:n_steps],
            next_state=state_codes[n_steps:],
            actions=actions,
            action=action,
            error=error,
            anchor=anchor,
            step_reward=step_reward,
            value=value,
            reward_on_last=reward_on_last,
            truncated=truncated,
        )
