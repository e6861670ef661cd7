"""The one data model that environments, the trainer and the credit layer all speak.

A *group* is the set of G trajectories sampled for one task (verl's ``uid``); a *trajectory*
(verl-agent's ``traj_uid``) is one episode, a list of steps. Each step records the abstract
state before the action ``s_t``, the action ``a_t``, the abstract state after it
``s_{t+1}``, whether the environment rejected the action (``error_t``) and the raw current
observation used as GiGPO's anchor.

The credit layer never looks at anything else. The rollout, the trainer and the baselines
attach their own per-step data (the context acted on, log-probs, ...) in ``Step.extra`` and
per-episode data in ``Trajectory.extra``, under the keys that ``StepExtra`` and
``TrajectoryExtra`` name and type; the credit layer ignores both.

JSON form (the ``proas credit`` input format, one trajectory per line)::

    {"group": str, "trajectory": str, "reward": float,
     "truncated": bool (optional, false when absent),
     "steps": [{"state": str, "action": str, "next_state": str, "error": bool,
                "anchor": str (optional), "reward": float (optional), "value": float (optional)}]}

Every number (a trajectory's reward, a step's reward and value) is finite and at most
``MAX_ABS_NUMBER`` (1e12) in magnitude: the estimators square and sum them, and a reward of
1e200 would turn a whole group's advantages into NaN. The trajectory's reward is required (not
null); anything else is a ``TrajectoryFormatError`` naming the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence, TypedDict

__all__ = ["MAX_ABS_NUMBER", "Step", "StepExtra", "Trajectory", "TrajectoryExtra", "TrajectoryFormatError",
           "as_trajectories", "group_by", "successful"]

#: the largest magnitude of a reward or value a trajectory record may hold (module docstring)
MAX_ABS_NUMBER = 1e12


class TrajectoryFormatError(ValueError):
    """A trajectory record is malformed (missing field, wrong type)."""


class StepExtra(TypedDict, total=False):
    """The keys of ``Step.extra``: what the rollout (``proas.train.rollout``) and the ReAct
    baseline record beside a step. None is read by the credit layer, and none is written to a
    trajectory log (``Step.to_json``).

    Keys:
        context: the ``proas.policies.base.Context`` the policy acted on (the scorer's and the
            critic's input); typed ``Any`` here, as the data model sits below the policies.
        policy: the decision's data for ``Policy.evaluate`` (``Decision.data``; the scorer and
            the lm put ``entropy`` there).
        response: the policy's raw response text.
        malformed: the response could not be parsed into an action (verl-agent's
            ``is_action_valid`` is false): the steps the invalid-action penalty is charged on.
        env_reward: the env's own reward for the step (the step reward ``Step.reward`` is the
            trainer's ``success_reward`` rule instead).
        logp: the log-probability of the response under the acting policy.
        reply, thought: the ReAct baseline's model reply and its thought (``proas react``).
        observation: the observation text a rollout log shows for the step
            (``proas.rollout_log.write_rollouts``; by default the context's observation).
    """

    context: Any
    policy: dict[str, Any]
    response: str
    malformed: bool
    env_reward: float
    logp: float
    reply: str
    thought: str
    observation: str


class TrajectoryExtra(TypedDict, total=False):
    """The keys of ``Trajectory.extra``, written by the rollout and the ReAct baseline.

    Keys:
        outcome: the outcome reward the rollout gave (``success_reward`` x won).
        score: the env's score of the episode's end (WebShop's reward; 1/0 for household).
        task_id: the task played.
        errors: how many of its steps were errors.
        env_exception: why the env raised, when it did (the episode then counts as failed).
    """

    outcome: float
    score: float
    task_id: str
    errors: int
    env_exception: str


@dataclass(slots=True)  # a run makes hundreds of thousands: no per-step __dict__
class Step:
    """One step ``t`` of a trajectory.

    Attributes:
        state: abstract state before the action, ``s_t`` (hashable text supplied by the env).
        action: the action text ``a_t`` as executed.
        next_state: abstract state after the action, ``s_{t+1}``.
        error: ``error_t``: the env rejected the action (malformed text, inadmissible command,
            explicit no-op such as ALFWorld's "Nothing happens.").
        anchor: raw current observation (the state the action was taken in), GiGPO's anchor.
            ``None`` means "use ``state``".
        reward: the environment's reward for this step ``r_t``, used by estimators with step
            returns (GiGPO, GAE). ``None`` means "not recorded": the credit layer then places
            the trajectory's outcome reward on the last step and zero elsewhere.
        value: the critic's value ``V(s_t)`` as a trajectory log records it (the ``value`` of
            the JSON form), which ``compute_credit`` gives GAE when it is handed no ``values``.
            The trainer passes its critic's values to the credit layer as an array instead
            (``compute_credit(..., values=...)``) and leaves this ``None``.
        extra: per-step data of the rollout or trainer, the keys of ``StepExtra``; ignored by
            the credit layer.
    """

    state: str
    action: str
    next_state: str
    error: bool = False
    anchor: str | None = None
    reward: float | None = None
    value: float | None = None
    extra: StepExtra = field(default_factory=StepExtra)  # type: ignore[assignment]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "state": self.state,
            "action": self.action,
            "next_state": self.next_state,
            "error": self.error,
        }
        if self.anchor is not None:
            out["anchor"] = self.anchor
        if self.reward is not None:
            out["reward"] = self.reward
        if self.value is not None:
            out["value"] = self.value
        return out

    @classmethod
    def from_json(cls, obj: Any, where: str = "step") -> "Step":
        if not isinstance(obj, Mapping):
            raise TrajectoryFormatError(f"{where}: expected an object, got {type(obj).__name__}")
        for key in ("state", "action", "next_state"):
            if key not in obj:
                raise TrajectoryFormatError(f"{where}: missing field {key!r}")
            if not isinstance(obj[key], str):
                raise TrajectoryFormatError(
                    f"{where}: field {key!r} must be a string, got {type(obj[key]).__name__}"
                )
        if "error" not in obj:
            raise TrajectoryFormatError(f"{where}: missing field 'error'")
        if not isinstance(obj["error"], bool):
            raise TrajectoryFormatError(
                f"{where}: field 'error' must be a boolean, got {type(obj['error']).__name__}"
            )
        anchor = obj.get("anchor")
        if anchor is not None and not isinstance(anchor, str):
            raise TrajectoryFormatError(f"{where}: field 'anchor' must be a string")
        reward = _optional_number(obj, "reward", where)
        value = _optional_number(obj, "value", where)
        return cls(
            state=obj["state"],
            action=obj["action"],
            next_state=obj["next_state"],
            error=obj["error"],
            anchor=anchor,
            reward=reward,
            value=value,
        )


@dataclass
class Trajectory:
    """One episode of one task.

    Attributes:
        group: the group id (one task instance shared by the G rollouts; verl's ``uid``).
        trajectory: the trajectory id, unique within the batch (verl-agent's ``traj_uid``).
        reward: the outcome reward ``R_i`` the base estimator normalises. ``reward > 0``
            counts as success when building the reference graph.
        steps: the steps in order, ``t = 0 .. T_i - 1``.
        task_type: optional task family (e.g. ALFWorld's ``pick_and_place_simple``).
        won: whether the environment reported success; ``None`` means "use ``reward > 0``".
        truncated: the episode was cut by a step limit (the env's ``truncated``, or the
            rollout's ``max_steps``) before it terminated: its last state is not an end of the
            task, and GAE may bootstrap from its value (``gae(bootstrap_truncated=True)``,
            docs/credit.md). ``False`` (the default) is an episode that terminated.
        extra: per-episode data of the rollout or trainer, the keys of ``TrajectoryExtra``;
            ignored by the credit layer.
    """

    group: str
    trajectory: str
    reward: float
    steps: list[Step]
    task_type: str | None = None
    won: bool | None = None
    truncated: bool = False
    extra: TrajectoryExtra = field(default_factory=TrajectoryExtra)  # type: ignore[assignment]

    @property
    def success(self) -> bool:
        return bool(self.won) if self.won is not None else self.reward > 0

    def __len__(self) -> int:
        return len(self.steps)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "group": self.group,
            "trajectory": self.trajectory,
            "reward": self.reward,
            "steps": [s.to_json() for s in self.steps],
        }
        if self.task_type is not None:
            out["task_type"] = self.task_type
        if self.won is not None:
            out["won"] = self.won
        if self.truncated:
            out["truncated"] = True
        return out

    @classmethod
    def from_json(cls, obj: Any, where: str = "trajectory") -> "Trajectory":
        if not isinstance(obj, Mapping):
            raise TrajectoryFormatError(f"{where}: expected an object, got {type(obj).__name__}")
        for key in ("group", "trajectory"):
            if key not in obj:
                raise TrajectoryFormatError(f"{where}: missing field {key!r}")
            if not isinstance(obj[key], str):
                raise TrajectoryFormatError(
                    f"{where}: field {key!r} must be a string, got {type(obj[key]).__name__}"
                )
        if "reward" not in obj:
            raise TrajectoryFormatError(f"{where}: missing field 'reward'")
        reward = _optional_number(obj, "reward", where)
        if reward is None:
            raise TrajectoryFormatError(f"{where}: field 'reward' must be a number, got null")
        if "steps" not in obj:
            raise TrajectoryFormatError(f"{where}: missing field 'steps'")
        if not isinstance(obj["steps"], list):
            raise TrajectoryFormatError(f"{where}: field 'steps' must be a list")
        steps = [Step.from_json(s, f"{where}, step {t}") for t, s in enumerate(obj["steps"])]
        task_type = obj.get("task_type")
        if task_type is not None and not isinstance(task_type, str):
            raise TrajectoryFormatError(f"{where}: field 'task_type' must be a string")
        won = obj.get("won")
        if won is not None and not isinstance(won, bool):
            raise TrajectoryFormatError(f"{where}: field 'won' must be a boolean")
        truncated = obj.get("truncated", False)
        if not isinstance(truncated, bool):
            raise TrajectoryFormatError(f"{where}: field 'truncated' must be a boolean")
        return cls(
            group=obj["group"],
            trajectory=obj["trajectory"],
            reward=reward,
            steps=steps,
            task_type=task_type,
            won=won,
            truncated=truncated,
        )


def _optional_number(obj: Mapping[str, Any], key: str, where: str) -> float | None:
    val = obj.get(key)
    if val is None:
        return None
    if isinstance(val, bool) or not isinstance(val, (int, float)):
        raise TrajectoryFormatError(
            f"{where}: field {key!r} must be a number, got {type(val).__name__}"
        )
    try:
        num = float(val)
    except OverflowError:  # an integer too large for a float
        digits = int(val.bit_length() * 0.30103) + 1
        raise TrajectoryFormatError(f"{where}: field {key!r} is an integer of about {digits} digits; its "
                                    f"magnitude must be at most {MAX_ABS_NUMBER:g} (MAX_ABS_NUMBER)") from None
    if not math.isfinite(num):
        raise TrajectoryFormatError(f"{where}: field {key!r} must be finite, got {val}")
    if abs(num) > MAX_ABS_NUMBER:
        raise TrajectoryFormatError(f"{where}: field {key!r} is {num:.3g}; its magnitude must be at most "
                                    f"{MAX_ABS_NUMBER:g} (MAX_ABS_NUMBER)")
    return num


def group_by(trajectories: Iterable[Trajectory]) -> dict[str, list[Trajectory]]:
    """Trajectories by group id, groups and members in first-seen order."""
    out: dict[str, list[Trajectory]] = {}
    for traj in trajectories:
        out.setdefault(traj.group, []).append(traj)
    return out


def successful(trajectories: Sequence[Trajectory]) -> list[Trajectory]:
    """The successful trajectories (``won`` if recorded, else ``reward > 0``)."""
    return [t for t in trajectories if t.success]


def as_trajectories(items: Iterable[Trajectory | Mapping[str, Any]]) -> list[Trajectory]:
    """``items`` as ``Trajectory`` objects: each one already is, or is a JSON record of one
    (a line of a trajectory log, as ``Trajectory.from_json`` reads it; a malformed record is a
    ``TrajectoryFormatError`` naming its index). Lets the credit API take parsed JSON lines."""
    out = []
    for i, item in enumerate(items):
        if isinstance(item, Trajectory):
            out.append(item)
        elif isinstance(item, Mapping):
            out.append(Trajectory.from_json(item, where=f"trajectory {i}"))
        else:
            raise TrajectoryFormatError(f"trajectory {i}: expected a Trajectory or a JSON object, "
                                        f"got {type(item).__name__}")
    return out
