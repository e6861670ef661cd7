"""proas environments behind verl-agent's env-manager contract, with the ProAS step fields.

verl-agent's rollout loop (``TrajectoryCollector``) drives a vectorised *environment manager*:
``reset(...) -> (obs, infos)`` and ``step(text_actions) -> (obs, rewards, dones, infos)``, where
``obs = {"text": prompts, "image": None, "anchor": raw observations}`` and each info carries
``is_action_valid`` and ``won``. ``ProasEnvManager`` is that contract over any proas ``Env``
(household, shop, your own), G copies per task. Each step's info also carries, under
``info["proas"]``, the fields a ProAS row needs, which the rollout loop copies into
``non_tensor_batch`` with :func:`step_columns` (docs/verl.md shows the three-line patch).

Action projection follows verl-agent's: the text between ``<action>`` and ``</action>`` is the
action; without the tags (or, with ``require_think``, without ``<think>...</think>``) the action
is invalid in verl-agent's sense (``is_action_valid = False``, its format penalty). ProAS's
``error_t`` is wider: the format is invalid *or* the env rejected the action (inadmissible,
"Nothing happens."): ``proas["env_error"]``.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from proas.envs.base import Env
from proas.errors import ProasError
from proas.integrations.verl.rows import StepColumns

__all__ = [
    "ERROR_COLUMN", "ProasEnvManager", "ProasVecEnv", "default_prompt", "project_action", "step_columns", "task_of",
]

#: the column name :func:`step_columns` gives ``error_t``; set ``columns.error`` to it
ERROR_COLUMN = "env_error"

_ACTION = re.compile(r"<action>(.*?)</action>", re.S)


def project_action(text: str, require_think: bool = True) -> tuple[str, bool]:
    """``(action, format_valid)`` from a model response, as verl-agent's projection does.

    The action is the stripped text inside the first ``<action>...</action>``; without the tags
    the whole stripped text is passed on (the env will reject it) and the format is invalid.
    """
    if not isinstance(text, str):
        return "", False
    m = _ACTION.search(text)
    if m is None:
        return text.strip(), False
    valid = not require_think or ("<think>" in text and "</think>" in text)
    return m.group(1).strip(), valid


def task_of(info: Mapping[str, Any]) -> str:
    """The task of an episode as its env states it: household's ``goal`` ("Your task is to: ..."),
    shop's ``task`` (the instruction), or ``""``."""
    task = info.get("goal") or info.get("task") or ""
    return task if isinstance(task, str) else ""


def default_prompt(obs: str, info: Mapping[str, Any], history: Sequence[tuple[str, str]]) -> str:
    """proas's prompt outside verl-agent: the task (at every step), how many steps were taken, the
    recent (observation, action) pairs, the observation, the admissible actions, and the answer
    format. Inside verl-agent the recipe uses verl-agent's own templates instead (``make_envs``).

    ``history`` holds the recent pairs only; ``info["steps"]`` (when the env reports it) is the
    count of steps taken so far.
    """
    parts = []
    task = task_of(info)
    if task:
        parts.append(task if task.lower().startswith("your task is to") else f"Your task is to: {task}")
    if history:
        taken = int(info.get("steps", len(history)) or len(history))
        lines = [f"[Observation {k + 1}: {o!r}, Action {k + 1}: {a!r}]" for k, (o, a) in enumerate(history)]
        parts.append(f"Steps taken so far: {taken}. Your most recent observations and actions:\n" + "\n".join(lines))
    parts.append(f"Current observation: {obs}")
    if info.get("admissible"):
        parts.append("Admissible actions: " + ", ".join(repr(a) for a in info["admissible"] if a != "help"))
    parts.append(
        "Think step by step inside <think> </think>, then give exactly one action inside "
        "<action> </action>."
    )
    return "\n\n".join(parts)


class _TaskDraws:
    """The seeded task draws of a batch of envs, as state a checkpoint keeps: a run resumed from
    a checkpoint draws the tasks the uninterrupted run would have drawn next."""

    rng: np.random.Generator

    def state_dict(self) -> dict[str, Any]:
        """The draws' generator state (JSON-serialisable)."""
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned; a state of another generator is refused."""
        rng = state.get("rng") if isinstance(state, Mapping) else None
        if not isinstance(rng, Mapping) or rng.get("bit_generator") != self.rng.bit_generator.state["bit_generator"]:
            raise ProasError("env draw state: expected the 'rng' of a "
                             f"{self.rng.bit_generator.state['bit_generator']} generator")
        try:
            self.rng.bit_generator.state = dict(rng)
        except (TypeError, ValueError, KeyError) as exc:
            raise ProasError(f"env draw state: bad generator state ({exc})") from None


class ProasEnvManager(_TaskDraws):
    """verl-agent's environment-manager contract over proas environments.

    Args:
        make_env: builds one environment (e.g. ``proas.envs.household.make_household_env``).
        group_n: rollouts per task (verl-agent's ``env.rollout.n``); env ``i`` plays task
            ``i // group_n``.
        tasks: where ``reset()`` without arguments (verl-agent's call) takes its tasks from:
            a list of task ids to draw ``env_num`` distinct ones from (seeded), or a callable
            returning the next batch's task ids (e.g. a fixed train schedule).
        env_num: tasks per batch when drawing from a list (verl-agent's
            ``data.train_batch_size``).
        seed: seeds the draws.
        history_length: how many past (observation, action) pairs the prompt shows (2, as
            verl-agent's default).
        require_think: a response without ``<think>...</think>`` is format-invalid.
        prompt: ``(obs, info, history) -> str``; ``default_prompt`` by default.
    """

    def __init__(
        self,
        make_env: Callable[[], Env],
        group_n: int = 1,
        *,
        history_length: int = 2,
        require_think: bool = True,
        prompt: Callable[[str, Mapping[str, Any], Sequence[tuple[str, str]]], str] | None = None,
        tasks: Sequence[str] | Callable[[], Sequence[str]] | None = None,
        env_num: int | None = None,
        seed: int = 0,
    ) -> None:
        if group_n < 1:
            raise ProasError(f"group_n must be >= 1, got {group_n}")
        if tasks is not None and not callable(tasks):
            tasks = list(tasks)
            if env_num is None or not 1 <= env_num <= len(tasks):
                raise ProasError(f"env_num must be in 1..{len(tasks)} to draw tasks from a list, got {env_num}")
        self.tasks = tasks
        self.env_num = env_num
        self.rng = np.random.default_rng(seed)
        self.make_env = make_env
        self.group_n = int(group_n)
        self.history_length = int(history_length)
        self.require_think = require_think
        self.prompt = prompt or default_prompt
        self.envs: list[Env] = []
        self._reset_state(0)

    def _reset_state(self, n: int) -> None:
        self.obs: list[str] = [""] * n
        self.infos: list[dict[str, Any]] = [{} for _ in range(n)]
        self.history: list[list[tuple[str, str]]] = [[] for _ in range(n)]
        self.steps = np.zeros(n, dtype=np.int64)
        self.done = np.zeros(n, dtype=bool)

    def reset(
        self, task_ids: Sequence[str] | None = None, kwargs: Sequence[Mapping[str, Any]] | None = None
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Start a batch: ``task_ids`` (one per group, each played ``group_n`` times), per-env
        ``kwargs`` (one mapping with ``task_id`` per env), or, with neither (verl-agent's
        ``envs.reset()``), the next tasks from ``tasks``."""
        if task_ids is None and kwargs is None and self.tasks is not None:
            if callable(self.tasks):
                task_ids = list(self.tasks())
            else:
                picks = self.rng.choice(len(self.tasks), size=self.env_num, replace=False)
                task_ids = [self.tasks[int(k)] for k in picks]
        if kwargs is not None:
            try:
                per_env = [str(k["task_id"]) for k in kwargs]
            except (KeyError, TypeError):
                raise ProasError("reset(kwargs=...): every env's kwargs need a 'task_id'") from None
        elif task_ids is not None:
            per_env = [str(t) for t in task_ids for _ in range(self.group_n)]
        else:
            raise ProasError("reset needs task_ids (one per group), kwargs (one per env), or a task source (tasks=...)")
        while len(self.envs) < len(per_env):
            self.envs.append(self.make_env())
        self._reset_state(len(per_env))
        for i, task in enumerate(per_env):
            obs, info = self.envs[i].reset(task)
            self.obs[i], self.infos[i] = obs, info
        return self._observations(), [dict(info) for info in self.infos]

    def step(self, text_actions: Sequence[str]) -> tuple[dict[str, Any], np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """Apply one response per env. Finished envs are left alone (reward 0, done), as
        verl-agent steps every env and drops the finished ones' rows afterwards."""
        n = len(self.obs)
        if len(text_actions) != n:
            raise ProasError(f"step: expected {n} actions (one per env), got {len(text_actions)}")
        rewards = np.zeros(n, dtype=np.float32)
        infos: list[dict[str, Any]] = []
        for i, text in enumerate(text_actions):
            before = self.infos[i]
            if self.done[i]:
                # no "proas" entry: this env took no step, so it has no row to describe
                infos.append({k: v for k, v in before.items() if k != "proas"} | {"is_action_valid": True})
                continue
            action, valid = project_action(text, self.require_think)
            # verl-agent's managers have one done flag: a terminated or a truncated episode is done
            obs, reward, terminated, truncated, info = self.envs[i].step(action)
            done = terminated or truncated
            info = dict(info)
            info["is_action_valid"] = valid
            info["proas"] = {
                "step_index": int(self.steps[i]),
                "abstract_state": before["abstract_state"],
                "next_abstract_state": info["abstract_state"],
                "action": action,
                ERROR_COLUMN: bool(info["error"]) or not valid,
            }
            self.history[i].append((self.obs[i], action))
            self.obs[i], self.infos[i] = obs, info
            self.steps[i] += 1
            self.done[i] = bool(done)
            rewards[i] = reward
            infos.append(info)
        return self._observations(), rewards, self.done.copy(), infos

    def _observations(self) -> dict[str, Any]:
        k = self.history_length
        texts = [
            self.prompt(obs, info, hist[-k:] if k > 0 else [])
            for obs, info, hist in zip(self.obs, self.infos, self.history)
        ]
        anchors = [info.get("anchor", obs) for obs, info in zip(self.obs, self.infos)]
        return {"text": texts, "image": None, "anchor": anchors}

    def success(self) -> np.ndarray:
        """``(n_envs,)`` bool: each env's ``won`` now."""
        return np.array([bool(info.get("won", False)) for info in self.infos], dtype=bool)

    def success_evaluator(self, *args: Any, **kwargs: Any) -> dict[str, np.ndarray]:
        """verl-agent's end-of-rollout hook: ``{"success_rate": (n_envs,) float}``, each env's
        ``won`` at its last step (the arguments verl-agent passes are not needed)."""
        return {"success_rate": self.success().astype(np.float64)}


#: the two vectorised-env contracts of verl-agent's env managers ``ProasVecEnv`` speaks
VEC_LAYOUTS = ("alfworld", "webshop")


class ProasVecEnv(_TaskDraws):
    """proas environments behind the *vectorised env* contract of verl-agent's own env managers,
    so that verl-agent's ``AlfWorldEnvironmentManager`` (household) or ``WebshopEnvironmentManager``
    (shop) drives them: its prompt templates (the task at every step), its history, its action
    projection and its success metrics, unchanged.

    ``layout="alfworld"`` is the contract of verl-agent's ALFWorld envs: ``reset() -> (text_obs,
    None, infos)``, ``step(actions) -> (text_obs, None, rewards, dones, infos)``, each info with
    ``admissible_commands``, ``won`` and ``extra.gamefile`` (here ``proas/household/<task type>/
    <task id>``, which its per-type success rates read), and ``get_admissible_commands``.
    ``layout="webshop"`` is WebShop's: ``reset() -> (obs, infos)``, ``step(actions) -> (obs,
    rewards, dones, infos)``, each info with ``available_actions`` (``has_search_bar``,
    ``clickables``), ``won`` and ``task_score`` (WebShop's raw score of the purchase).

    Tasks: ``env_num`` distinct tasks a batch drawn from ``tasks`` (seeded), or ``tasks()`` when
    it is a callable, each played by ``group_n`` consecutive envs. Every info carries the env's
    ``abstract_state``; every step's info also the ProAS fields under ``info["proas"]`` (as
    ``ProasEnvManager``'s; ``env_error`` here is the env's own rejection, and ``step_columns``
    adds the manager's format flag, ``is_action_valid``). Finished envs are not stepped again:
    they return their last observation, reward 0, done, and no ``proas`` entry.
    """

    def __init__(
        self,
        make_env: Callable[[], Env],
        *,
        layout: str,
        tasks: Sequence[str] | Callable[[], Sequence[str]],
        env_num: int | None = None,
        group_n: int = 1,
        seed: int = 0,
    ) -> None:
        if layout not in VEC_LAYOUTS:
            raise ProasError(f"unknown layout {layout!r}; choose one of {', '.join(VEC_LAYOUTS)}")
        if group_n < 1:
            raise ProasError(f"group_n must be >= 1, got {group_n}")
        if not callable(tasks):
            tasks = list(tasks)
            if env_num is None or not 1 <= env_num <= len(tasks):
                raise ProasError(f"env_num must be in 1..{len(tasks)} to draw tasks from a list, got {env_num}")
        self.layout = layout
        self.tasks = tasks
        self.env_num = env_num
        self.group_n = int(group_n)
        self.rng = np.random.default_rng(seed)
        self.make_env = make_env
        self.envs: list[Env] = []
        self.task_ids: list[str] = []
        self.obs: list[str] = []
        self.infos: list[dict[str, Any]] = []
        self.done = np.zeros(0, dtype=bool)
        self.steps = np.zeros(0, dtype=np.int64)

    @property
    def num_processes(self) -> int:
        return len(self.obs)

    def _next_tasks(self) -> list[str]:
        if callable(self.tasks):
            return [str(t) for t in self.tasks()]
        picks = self.rng.choice(len(self.tasks), size=self.env_num, replace=False)
        return [str(self.tasks[int(k)]) for k in picks]

    def _outer(self, info: Mapping[str, Any], task_id: str) -> dict[str, Any]:
        out = dict(info)
        out["won"] = bool(info.get("won", False))
        if self.layout == "alfworld":
            out["admissible_commands"] = list(info.get("admissible", []))
            env_name = getattr(self.envs[0], "name", "env")
            out["extra.gamefile"] = f"proas/{env_name}/{info.get('task_type', '')}/{task_id}"
        else:
            out["available_actions"] = {"has_search_bar": bool(info.get("has_search_bar", False)),
                                        "clickables": list(info.get("clickables", []))}
            out["task_score"] = float(info.get("score", 0.0))
        return out

    def reset(self) -> tuple:
        per_env = [t for t in self._next_tasks() for _ in range(self.group_n)]
        while len(self.envs) < len(per_env):
            self.envs.append(self.make_env())
        self.task_ids = per_env
        self.obs, self.infos = [], []
        for env, task in zip(self.envs, per_env):
            obs, info = env.reset(task)
            self.obs.append(obs)
            self.infos.append(dict(info))
        self.done = np.zeros(len(per_env), dtype=bool)
        self.steps = np.zeros(len(per_env), dtype=np.int64)
        outer = [self._outer(info, t) for info, t in zip(self.infos, per_env)]
        if self.layout == "alfworld":
            return list(self.obs), None, outer
        return list(self.obs), outer

    def step(self, actions: Sequence[str]) -> tuple:
        n = len(self.obs)
        if len(actions) != n:
            raise ProasError(f"step: expected {n} actions (one per env), got {len(actions)}")
        rewards = [0.0] * n
        outer: list[dict[str, Any]] = []
        for i, action in enumerate(actions):
            if self.done[i]:
                info = {k: v for k, v in self.infos[i].items() if k != "proas"}
                outer.append(self._outer(info, self.task_ids[i]))
                continue
            before = self.infos[i]["abstract_state"]
            obs, reward, terminated, truncated, info = self.envs[i].step(action)
            done = terminated or truncated  # one done flag, as verl-agent's envs
            info = dict(info)
            info["proas"] = {
                "step_index": int(self.steps[i]),
                "abstract_state": before,
                "next_abstract_state": info["abstract_state"],
                "action": action,
                ERROR_COLUMN: bool(info["error"]),
            }
            self.obs[i], self.infos[i] = obs, info
            self.steps[i] += 1
            self.done[i] = bool(done)
            rewards[i] = float(reward)
            outer.append(self._outer(info, self.task_ids[i]))
        dones = [bool(d) for d in self.done]
        if self.layout == "alfworld":
            return list(self.obs), None, rewards, dones, outer
        return list(self.obs), rewards, dones, outer

    @property
    def get_admissible_commands(self) -> list[list[str]]:
        """verl-agent's ALFWorld envs' property: each env's admissible commands now."""
        return [list(info.get("admissible", [])) for info in self.infos]

    def close(self) -> None:
        self.envs = []


def step_columns(
    infos: Sequence[Mapping[str, Any]], columns: StepColumns | None = None, error_column: str = ERROR_COLUMN
) -> dict[str, np.ndarray]:
    """The ProAS ``non_tensor_batch`` columns of one rollout step, from the ``proas`` entries of
    its infos (``ProasEnvManager``, ``ProasVecEnv`` or a state tracker of ``states``): step
    index, abstract state before and after, action, and ``error_t`` (the env rejected the action,
    or ``is_action_valid`` is false).

    Rows of finished envs (no ``proas`` entry) get ``None``; verl-agent drops them by
    ``active_masks`` before training.
    """
    cols = columns or StepColumns()
    names = {
        "step_index": cols.step,
        "abstract_state": cols.state,
        "next_abstract_state": cols.next_state,
        "action": cols.action,
        ERROR_COLUMN: error_column,
    }
    out: dict[str, np.ndarray] = {}
    for field, name in names.items():
        if name is None:
            continue
        arr = np.empty(len(infos), dtype=object)
        arr[:] = [_field(info, field) if "proas" in info else None for info in infos]
        out[name] = arr
    return out


def _field(info: Mapping[str, Any], field: str) -> Any:
    value = info["proas"][field]
    if field == ERROR_COLUMN:
        # error_t: the env rejected the action, or its format was invalid (verl-agent's flag,
        # which its env managers add after the env's step)
        return bool(value) or not bool(info.get("is_action_valid", True))
    return value
