"""The one data model that environments, the trainer and the credit layer all speak.

A *group* is the set of G trajectories sampled for one task (verl's ``uid``); a *trajectory*
(verl-agent's ``traj_uid``) is one episode, a list of steps. Each step records the abstract
state before the action ``s_t``, the action ``a_t``, the abstract state after it
``s_{t+1}``, whether the environment rejected the action (``error_t``) and the raw current
observation used as GiGPO's anchor.

The credit layer never looks at anything else. Environments and the trainer may attach their
own per-step data (observation text, log-probs, ...) in ``Step.extra``; the credit layer
ignores it.

JSON form (the ``proas credit`` input format, one trajectory per line)::

    {"group": str, "trajectory": str, "reward": float,
     "steps": [{"state": str, "action": str, "next_state": str, "error": bool,
                "anchor": str (optional), "reward": float (optional)}]}

Every number (a trajectory's reward, a step's reward and value) is finite and at most
``MAX_ABS_NUMBER`` (1e12) in magnitude: the estimators square and sum them, and a reward of
1e200 would turn a whole group's advantages into NaN. The trajectory's reward is required (not
null); anything else is a ``TrajectoryFormatError`` naming the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

__all__ = ["MAX_ABS_NUMBER", "Step", "Trajectory", "TrajectoryFormatError", "as_trajectories", "group_by",
           "successful"]

#: the largest magnitude of a reward or value a trajectory record may hold (module docstring)
MAX_ABS_NUMBER = 1e12


class TrajectoryFormatError(ValueError):
    """A trajectory record is malformed (missing field, wrong type)."""


@dataclass
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
        value: the critic's value ``V(s_t)`` for PPO/GAE, when there is one.
        extra: free-form per-step data of the env or trainer; ignored by the credit layer.
    """

    state: str
    action: str
    next_state: str
    error: bool = False
    anchor: str | None = None
    reward: float | None = None
    value: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

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
        extra: free-form data of the env or trainer; ignored by the credit layer.
    """

    group: str
    trajectory: str
    reward: float
    steps: list[Step]
    task_type: str | None = None
    won: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

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
        return cls(
            group=obj["group"],
            trajectory=obj["trajectory"],
            reward=reward,
            steps=steps,
            task_type=task_type,
            won=won,
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
