"""Batched multi-turn group rollout over the env protocol, recorded in ``proas.types``.

All episodes of a batch advance together: at every turn the live environments' contexts go to
the policy in one call (one forward pass for the ``lm`` policy), and each env is stepped with
its action. An episode ends when the env says it terminated or was truncated, or after the
rollout's step limit ``max_steps``; a trajectory cut by a step limit (the env's or the rollout's)
before it terminated is recorded as ``Trajectory.truncated`` (docs/credit.md, "Episode ends").

Rewards (the decision documented in docs/training.md): the step reward ``Step.reward`` is
``success_reward`` on the step that wins and 0 elsewhere (verl-agent's ``10 x won``), and the
trajectory's outcome reward ``R_i`` is ``success_reward x won``. A step is an error
(``Step.error``, ProAS's ``error_t``) when the env rejects the action or the ``lm`` response is
malformed. The invalid-action penalty is for malformed responses only (verl-agent's
``is_action_valid``): the trainer hands ``extra['malformed']`` to the credit layer, and
``proas.credit.credit_arrays`` charges it (docs/credit.md, "Invalid-action penalty").

An environment that raises ends its trajectory as failed (``won=False``); the exception is
counted and its message kept in ``extra['env_exception']``; the batch goes on.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from proas.envs.base import SUCCESS_REWARD, Env
from proas.envs.replay import env_step
from proas.policies.base import Context, Policy, task_text
from proas.types import Step, Trajectory, TrajectoryExtra

__all__ = ["RolloutStats", "Slot", "rollout"]


@dataclass
class Slot:
    """One episode to play: which task, which group and trajectory ids."""

    task_id: str
    group: str
    trajectory: str


@dataclass
class RolloutStats:
    """Counts of one rollout batch."""

    env_exceptions: int = 0
    exception_messages: list[str] = field(default_factory=list)
    env_steps: int = 0
    #: policy decisions made, those whose response was cut by the token budget and those whose
    #: prompt was trimmed to fit (the ``lm`` policy's ``truncated`` / ``prompt_trimmed`` flags)
    decisions: int = 0
    truncated_responses: int = 0
    trimmed_prompts: int = 0


@dataclass
class _Live:
    slot: Slot
    env: Env
    task: str
    obs: str
    info: dict[str, Any]
    history: list[tuple[str, str]]
    steps: list[Step]
    won: bool = False
    score: float = 0.0
    errors: int = 0
    exception: str | None = None
    done: bool = False
    truncated: bool = False


def _describe(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    loc = f" at {where.filename.rsplit('/', 1)[-1]}:{where.lineno}" if where else ""
    return f"{type(exc).__name__}: {exc}{loc}"


def rollout(
    envs: Sequence[Env],
    slots: Sequence[Slot],
    policy: Policy,
    rng: np.random.Generator,
    *,
    temperature: float = 1.0,
    max_steps: int,
    success_reward: float = SUCCESS_REWARD,
    env_name: str = "",
    on_turn: Callable[[int], None] | None = None,
) -> tuple[list[Trajectory], RolloutStats]:
    """Play ``slots[i]`` on ``envs[i]`` with ``policy``; return one trajectory per slot.

    ``envs`` must hold at least ``len(slots)`` distinct instances. Trajectories come back in
    slot order. A step's ``extra`` holds ``context`` (the ``Context`` acted on), ``policy`` (the
    decision's data for ``Policy.evaluate``), ``response``, ``malformed``, ``env_reward`` and
    ``logp`` (``proas.types.StepExtra`` documents each); a trajectory's ``extra`` the keys of
    ``proas.types.TrajectoryExtra``.
    """
    if len(envs) < len(slots):
        raise ValueError(f"rollout: {len(slots)} slots but only {len(envs)} envs")
    stats = RolloutStats()
    live: list[_Live] = []
    for slot, env in zip(slots, envs):
        try:
            obs, info = env.reset(slot.task_id)
            state = _Live(slot, env, task_text(obs, info), obs, info, [], [])
        except Exception as exc:  # noqa: BLE001 - any env failure ends only this episode
            state = _Live(slot, env, "", "", {}, [], [], exception=_describe(exc), done=True)
            stats.env_exceptions += 1
            stats.exception_messages.append(f"{slot.task_id} reset: {state.exception}")
        live.append(state)

    for turn in range(max_steps):
        active = [s for s in live if not s.done]
        if not active:
            break
        contexts = [
            Context(
                env_name=env_name,
                task=s.task,
                observation=s.obs,
                history=list(s.history),
                admissible=s.info.get("admissible"),
                invalid_candidates=list(s.info.get("invalid_candidates") or []),
                step=turn,
            )
            for s in active
        ]
        decisions = policy.act(contexts, rng, temperature=temperature)
        stats.decisions += len(decisions)
        stats.truncated_responses += sum(bool(d.data.get("truncated")) for d in decisions)
        stats.trimmed_prompts += sum(bool(d.data.get("prompt_trimmed")) for d in decisions)
        for s, ctx, dec in zip(active, contexts, decisions):
            prev_info = s.info
            try:
                obs, env_reward, terminated, truncated, info = s.env.step(dec.action)
            except Exception as exc:  # noqa: BLE001
                s.exception = _describe(exc)
                s.done = True
                stats.env_exceptions += 1
                stats.exception_messages.append(f"{s.slot.task_id} step {turn}: {s.exception}")
                continue
            stats.env_steps += 1
            won = bool(info.get("won", False))
            reward = success_reward if won else 0.0
            s.steps.append(
                env_step(
                    prev_info,
                    dec.action,
                    info,
                    reward=reward,
                    malformed=dec.malformed,
                    obs=s.obs,
                    extra={
                        "context": ctx,
                        "policy": dec.data,
                        "response": dec.response,
                        "malformed": dec.malformed,
                        "env_reward": float(env_reward),
                        "logp": dec.logp,
                    },
                )
            )
            s.errors += int(s.steps[-1].error)
            s.history.append((s.obs, dec.action))
            s.obs, s.info = obs, info
            s.score = float(info.get("score", 0.0))
            if won:
                s.won = True
            if terminated or truncated or won:
                s.done = True
                s.truncated = truncated and not (terminated or won)
        if on_turn is not None:
            on_turn(turn)

    out = []
    for s in live:
        if not s.done:  # still playing at the rollout's step limit: cut, not ended
            s.truncated = True
        outcome = success_reward if s.won else 0.0
        extra: TrajectoryExtra = {
            "outcome": outcome,
            "score": s.score if s.exception is None else 0.0,
            "task_id": s.slot.task_id,
            "errors": s.errors,
        }
        if s.exception is not None:
            extra["env_exception"] = s.exception
        out.append(
            Trajectory(
                group=s.slot.group,
                trajectory=s.slot.trajectory,
                reward=outcome,
                steps=s.steps,
                task_type=s.info.get("task_type") if s.info else None,
                won=s.won,
                truncated=s.truncated,
                extra=extra,
            )
        )
    return out, stats
