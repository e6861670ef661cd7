"""Exact environment snapshots by replay.

Every proas environment is deterministic given a task id and the actions taken (the household
generator seeds each game from its id; both backends and the shop engine have no hidden
randomness), so the state after a prefix of actions is restored exactly by ``reset(task_id)``
and replaying the prefix. This works for any env of the protocol, needs no engine support, and
costs the prefix's steps (microseconds with the fast household backend, about 0.1 s per step
with the real ALFWorld engine). ``state_key`` is what "exactly" means in the tests: the
observation, the admissible commands and the abstract state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from proas.envs.base import Env
from proas.errors import ProasError
from proas.policies.base import Context, task_text

__all__ = ["Restored", "Snapshot", "restore", "state_key"]


@dataclass(frozen=True)
class Snapshot:
    """The state reached in task ``task_id`` after ``actions``."""

    task_id: str
    actions: tuple[str, ...] = ()

    def then(self, *actions: str) -> Snapshot:
        return Snapshot(self.task_id, self.actions + tuple(actions))


@dataclass
class Restored:
    """An env put back into a snapshot, with what a policy needs to continue from it."""

    env: Env
    task: str
    obs: str
    info: dict[str, Any]
    history: list[tuple[str, str]] = field(default_factory=list)
    errors: list[bool] = field(default_factory=list)

    @property
    def step(self) -> int:
        return len(self.history)

    def context(self, env_name: str) -> Context:
        return Context(env_name=env_name, task=self.task, observation=self.obs, history=list(self.history),
                       admissible=self.info.get("admissible"),
                       invalid_candidates=list(self.info.get("invalid_candidates") or []), step=self.step)


def restore(env: Env, snap: Snapshot) -> Restored:
    """Reset ``env`` to ``snap.task_id`` and replay ``snap.actions``.

    Raises ``ProasError`` when the episode ends before the prefix does (such a snapshot has no
    continuation).
    """
    obs, info = env.reset(snap.task_id)
    out = Restored(env=env, task=task_text(obs, info), obs=obs, info=info)
    for k, action in enumerate(snap.actions):
        nobs, _, terminated, truncated, ninfo = env.step(action)
        done = terminated or truncated
        out.history.append((out.obs, action))
        out.errors.append(bool(ninfo.get("error")))
        out.obs, out.info = nobs, ninfo
        if done and k < len(snap.actions) - 1:
            raise ProasError(f"snapshot of {snap.task_id}: the episode ended at step {k}, before its "
                             f"{len(snap.actions)}-action prefix")
    return out


def state_key(obs: str, info: dict[str, Any]) -> tuple[str, tuple[str, ...] | None, str]:
    """What identifies an env state for the probes: observation, admissible set, abstract state."""
    adm = info.get("admissible")
    return obs, (tuple(adm) if adm is not None else None), str(info.get("abstract_state", ""))


def restore_many(envs: Sequence[Env], snap: Snapshot) -> list[Restored]:
    return [restore(e, snap) for e in envs]
