"""The environment protocol every proas environment implements (plugging one into the trainer:
docs/training.md, "Your own environment").

An environment is reset to a task id and stepped with raw text actions. ``step`` returns, as
Gymnasium's ``Env.step`` does, ``(observation, reward, terminated, truncated, info)``:

- ``terminated`` (bool): the episode reached an end of the task (household: the task is solved;
  shop: something was bought, whatever its score). Nothing follows a terminal state;
- ``truncated`` (bool): the step limit ``max_steps`` cut the episode before it terminated. The
  state it was cut in had a future; GAE can bootstrap from its value (docs/credit.md, "Episode
  ends: terminated and truncated"). proas's envs set at most one of the two (a step that both
  terminates and reaches the limit is terminated); a caller treats ``terminated or truncated``
  as the end of the episode and ``terminated`` as winning over ``truncated``.

Each call (``reset`` and ``step``) returns the observation text and an ``info`` dict that
carries, at least, the keys in ``REQUIRED_INFO_KEYS``:

- ``won`` (bool): the task is solved;
- ``score`` (float): the environment's own score in [0, 1] (WebShop's reward; 1.0/0.0 for won);
- ``error`` (bool): the action was rejected (malformed text, inadmissible command, explicit
  no-op such as ALFWorld's "Nothing happens."); this is ``error_t`` of the credit layer;
- ``admissible`` (list[str] | None): the commands the env accepts now, where it has them;
- ``abstract_state`` (str): a task-relative, progress-relevant state for the reference graph.
  It starts with the task type (``"<task_type>|..."``) so that one graph can hold every task
  type without states of different types colliding;
- ``anchor`` (str): the raw current observation, GiGPO's anchor-state key;
- ``task_type`` (str): the task family.

Optional keys: ``invalid_candidates`` (list[str]): plausible actions that the env would reject
now, so that a policy that scores candidates can make mistakes.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

#: the step reward of a won episode, on the winning step (verl-agent's rule-based ``10 x won``),
#: for every env; the trainer's outcome reward ``env.success_reward`` defaults to it
SUCCESS_REWARD = 10.0

REQUIRED_INFO_KEYS = ("won", "score", "error", "admissible", "abstract_state", "anchor", "task_type")


@runtime_checkable
class Env(Protocol):
    """A text environment over a fixed set of tasks."""

    #: short name used in configs ("household", "shop")
    name: str
    #: episode step limit (50 household, 15 shop, as in verl-agent)
    max_steps: int

    def reset(self, task_id: str) -> tuple[str, dict[str, Any]]:
        """Start task ``task_id``; return the first observation and info."""
        ...

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Apply a raw text action; return observation, reward, terminated, truncated, info
        (module docstring)."""
        ...

    def oracle(self, task_id: str) -> list[str]:
        """An optimal (shortest known) action sequence that solves ``task_id``."""
        ...

    def task_ids(self, split: str) -> list[str]:
        """The task ids of a split (``"train"``, ``"valid"`` and env-specific others)."""
        ...


class EnvCheckError(AssertionError):
    """An environment breaks the protocol; the message names the likely fix."""


def check_info(info: Any, where: str) -> None:
    """Raise ``EnvCheckError`` unless ``info`` carries the protocol's keys with the right types."""
    if not isinstance(info, dict):
        raise EnvCheckError(f"{where}: info must be a dict, got {type(info).__name__}")
    missing = [k for k in REQUIRED_INFO_KEYS if k not in info]
    if missing:
        raise EnvCheckError(f"{where}: info lacks {missing}; every step must report them")
    if not isinstance(info["won"], bool):
        raise EnvCheckError(f"{where}: info['won'] must be a bool")
    if not isinstance(info["error"], bool):
        raise EnvCheckError(f"{where}: info['error'] must be a bool")
    if not isinstance(info["score"], (int, float)) or isinstance(info["score"], bool):
        raise EnvCheckError(f"{where}: info['score'] must be a number")
    if info["admissible"] is not None and not (
        isinstance(info["admissible"], list) and all(isinstance(a, str) for a in info["admissible"])
    ):
        raise EnvCheckError(f"{where}: info['admissible'] must be a list of str or None")
    for key in ("abstract_state", "anchor", "task_type"):
        if not isinstance(info[key], str):
            raise EnvCheckError(f"{where}: info[{key!r}] must be a str")
    if not info["abstract_state"].startswith(info["task_type"] + "|"):
        raise EnvCheckError(
            f"{where}: abstract_state must start with '<task_type>|' so that one graph can hold "
            f"every task type (got {info['abstract_state']!r})"
        )


def _check_step(out: Any, where: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
    """``out`` of ``step`` as the protocol's five-tuple, else ``EnvCheckError``."""
    if not isinstance(out, tuple) or len(out) != 5:
        n = len(out) if isinstance(out, tuple) else type(out).__name__
        raise EnvCheckError(f"{where}: step must return (observation, reward, terminated, truncated, info), "
                            f"as Gymnasium's Env.step, got {n}{' values' if isinstance(out, tuple) else ''}")
    obs, reward, terminated, truncated, info = out
    if not isinstance(terminated, bool) or not isinstance(truncated, bool):
        raise EnvCheckError(f"{where}: terminated and truncated must be bools")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise EnvCheckError(f"{where}: the reward must be a number")
    check_info(info, where)
    return obs, reward, terminated, truncated, info


def check_env(env: Env, task_id: str) -> None:
    """Check the protocol on one task: reset, the oracle wins (the walkthrough terminates, it is
    not truncated), a garbage action is an error that ends nothing, and ``step`` returns the
    five-tuple ``(observation, reward, terminated, truncated, info)``.

    Raises ``EnvCheckError`` naming the broken rule.
    """
    obs, info = env.reset(task_id)
    if not isinstance(obs, str):
        raise EnvCheckError("reset: observation must be a str")
    check_info(info, "reset")
    if info["won"]:
        raise EnvCheckError("reset: a fresh task must not be won already")
    obs, reward, terminated, truncated, info = _check_step(env.step("%%% not an action %%%"), "step(garbage)")
    if not info["error"]:
        raise EnvCheckError("step(garbage): a malformed action must set info['error'] = True")
    if terminated or (truncated and env.max_steps > 1):
        raise EnvCheckError("step(garbage): a malformed action must not end the episode")
    env.reset(task_id)
    actions = env.oracle(task_id)
    if not actions or len(actions) > env.max_steps:
        raise EnvCheckError(f"oracle: expected 1..{env.max_steps} actions, got {len(actions)}")
    terminated = truncated = False
    for t, action in enumerate(actions):
        if terminated or truncated:
            raise EnvCheckError(f"oracle: episode ended at step {t - 1}, before the walkthrough")
        obs, reward, terminated, truncated, info = _check_step(env.step(action), f"oracle step {t}")
        if info["error"]:
            raise EnvCheckError(f"oracle step {t}: action {action!r} was rejected")
    if not (terminated and info["won"]):
        raise EnvCheckError("oracle: the walkthrough must terminate the episode (terminated = True) with "
                            "info['won'] = True")
    if truncated:
        raise EnvCheckError("oracle: a won walkthrough terminates; truncated must be False")
