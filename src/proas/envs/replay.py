"""Playing an env's oracle, and recording one env step as a ``proas.types.Step``.

Owns the one oracle replay of the project: ``oracle_walk`` steps the env through the oracle's
walkthrough of a task (the transitions, for callers that need the observations, such as the
SFT baseline's examples), and ``replay_oracle`` / ``replay_oracles`` turn it into the won
``Trajectory`` the reference graph is built from (the trainer's graph, the verl bridge's
graph, the FD probe's graph), or say why a task failed. ``env_step`` is the one rule that
turns the info before and after an action into a ``Step`` (the RL rollouts, the ReAct agent,
the oracle replay).

The replay's rules are the trainer's (they define the study's reference graphs): at most
``max_steps`` oracle actions (the env's step limit by default); a task fails when the env
raises or the walkthrough does not win; a won walkthrough is the trajectory
``oracle-<task id>`` (group and name) with outcome reward 1.0, step rewards 0.0, the task type
of the last info and the anchors of the protocol.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from proas.envs.base import Env
from proas.types import Step, StepExtra, Trajectory

__all__ = ["OracleReplay", "Transition", "env_step", "oracle_walk", "replay_oracle", "replay_oracles"]


def env_step(info: dict[str, Any], action: str, next_info: dict[str, Any], *, reward: float | None,
             malformed: bool = False, obs: str = "", extra: StepExtra | None = None) -> Step:
    """The ``Step`` of ``action`` taken with ``info`` and answered with ``next_info``.

    The abstract states come from the infos; the step is an error when the env rejected the
    action or the policy's response was ``malformed`` (ProAS's ``error_t``); the anchor is the
    info's raw observation, ``obs`` where the env gives none.
    """
    return Step(
        state=str(info.get("abstract_state", "")),
        action=action,
        next_state=str(next_info.get("abstract_state", "")),
        error=bool(next_info.get("error", False)) or malformed,
        anchor=str(info.get("anchor", obs)),
        reward=reward,
        extra=StepExtra() if extra is None else extra,
    )


@dataclass(frozen=True)
class Transition:
    """One oracle action: the observation and info it was taken in, what the env answered."""

    obs: str
    info: dict[str, Any]
    action: str
    next_obs: str
    reward: float
    #: the env's ``terminated`` and ``truncated`` (the env protocol)
    terminated: bool
    truncated: bool
    next_info: dict[str, Any]

    @property
    def done(self) -> bool:
        """The episode ended here: terminated or truncated."""
        return self.terminated or self.truncated


def oracle_walk(env: Env, task_id: str, max_steps: int | None = None) -> Iterator[Transition]:
    """Reset ``env`` to ``task_id`` and step it through the oracle's walkthrough (its first
    ``max_steps`` actions, the env's limit by default), until the episode terminates or is truncated. Exceptions of
    the env propagate; whether the walk won is ``next_info['won']`` of the last transition."""
    limit = int(env.max_steps if max_steps is None else max_steps)
    obs, info = env.reset(task_id)
    for action in env.oracle(task_id)[:limit]:
        nobs, reward, terminated, truncated, ninfo = env.step(action)
        tr = Transition(obs, info, action, nobs, float(reward), bool(terminated), bool(truncated), ninfo)
        yield tr
        obs, info = nobs, ninfo
        if tr.done:
            break


@dataclass(frozen=True)
class OracleReplay:
    """The oracle replayed on one task: the won trajectory, or why there is none."""

    task_id: str
    trajectory: Trajectory | None
    failure: str = ""  # "the walkthrough did not win" or "<exception type>: <message>"


def replay_oracle(env: Env, task_id: str, max_steps: int | None = None) -> OracleReplay:
    """The oracle's walkthrough of ``task_id`` as a won ``Trajectory`` (rules: module docstring)."""
    steps: list[Step] = []
    last: dict[str, Any] = {}
    try:
        for tr in oracle_walk(env, task_id, max_steps):
            steps.append(env_step(tr.info, tr.action, tr.next_info, reward=0.0))
            last = tr.next_info
    except Exception as exc:  # noqa: BLE001 - a broken task must not stop the callers' loops
        return OracleReplay(task_id, None, f"{type(exc).__name__}: {exc}")
    if not last.get("won"):
        return OracleReplay(task_id, None, "the walkthrough did not win")
    name = f"oracle-{task_id}"
    return OracleReplay(task_id, Trajectory(group=name, trajectory=name, reward=1.0, steps=steps,
                                            task_type=last.get("task_type"), won=True))


def replay_oracles(env: Env, task_ids: Sequence[str],
                   max_steps: int | None = None) -> tuple[list[Trajectory], list[OracleReplay]]:
    """``replay_oracle`` on each task: the won trajectories, in task order, and the failures."""
    won: list[Trajectory] = []
    failed: list[OracleReplay] = []
    for tid in task_ids:
        r = replay_oracle(env, tid, max_steps)
        if r.trajectory is not None:
            won.append(r.trajectory)
        else:
            failed.append(r)
    return won, failed
