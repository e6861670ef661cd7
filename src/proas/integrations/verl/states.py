"""Abstract states for verl-agent's own environments: ALFWorld's ``AlfredTWEnv`` and WebShop.

verl-agent's env managers drive a *vectorised env* (``reset`` / ``step`` over a list of
workers). The trackers here wrap that vectorised env, so verl-agent's manager, prompts and
projection stay as they are, and add to every info the abstract state ProAS needs, and to every
step's info the ProAS fields under ``info["proas"]`` (``step_index``, ``abstract_state``,
``next_abstract_state``, ``action``, ``env_error``), which the recipe's rollout-loop line copies
into the step rows (``step_columns``).

**ALFWorld** (``AlfworldLockstep``). The state is proas's household abstraction
(``proas.envs.household.abstraction``: where the agent is relative to the task, what it holds,
how many task objects are placed or whether the lamp is on), computed on proas's household
simulator stepped in lockstep with the real engine on the same game file: at reset the tracker
loads the ``game.tw-pddl`` and ``traj_data.json`` the engine loaded (``info["extra.gamefile"]``),
then plays every action the manager sent to the engine. The simulator reproduces the engine's
texts, so the tracker checks, at every reset and step, that its observation equals the engine's,
and stops with an error naming the game and step if they ever differ (e.g. with ALFWorld's
``domain_randomization``, which renames objects; the start-up check refuses that setting).
Games of any source work: ALFWorld's official data and the games ``proas household export``
writes. On an exported game the states are exactly those of ``proas/household`` for the same
task and actions. ``env_error`` is the household env's: malformed text, an inadmissible command,
or "Nothing happens.".

**WebShop** (``WebshopPages``). verl-agent runs WebShop's server inside Ray workers and hands its
manager only the page text and the page's actions, so the state is read off what the session
shows: the page kind (``search``, ``results``, ``item``, ``description`` / ``features`` /
``reviews`` / ``attributes``, ``done``) and, on a product's pages, how many of the options the
instruction asks for ("... with color: red, and size: large") the session has selected so far
(WebShop's ``session["options"]``: one value per option name, the last click wins, cleared by a
new search or a return to the results), matched as WebShop's reward matches options (fuzzy
token-set ratio above 85 after colour normalisation). The done page records won or lost. The
product's identity and the search words are left out: they differ between tasks and would stop
states from recurring. ``env_error``: WebShop's no-ops (an action that is neither a non-empty
``search[...]`` nor a ``click[...]`` of the page's clickables, or ``click[search]``).
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping, Sequence

import numpy as np

from proas.errors import ProasError
from proas.integrations.verl.envs import ERROR_COLUMN

__all__ = ["AlfworldLockstep", "WebshopPages", "instruction_options", "webshop_page_kind"]

_MAX_STEPS = 10**9  # the engine ends the episode; the tracker only follows it


def _proas_fields(step: int, before: str, after: str, action: str, error: bool) -> dict[str, Any]:
    return {"step_index": int(step), "abstract_state": before, "next_abstract_state": after,
            "action": action, ERROR_COLUMN: bool(error)}


class AlfworldLockstep:
    """verl-agent's vectorised ALFWorld env (``AlfworldEnvs``) with proas's household states,
    from the household simulator stepped in lockstep on the same game files (module docstring).

    Args:
        envs: the vectorised env: ``reset() -> (text_obs, image_obs, infos)``, ``step(actions)
            -> (text_obs, image_obs, rewards, dones, infos)``, each info with
            ``extra.gamefile``. Every other attribute (``get_admissible_commands``, ``close``)
            is the wrapped env's.
    """

    def __init__(self, envs: Any) -> None:
        self.envs = envs
        self.trackers: list[Any] = []
        self.gamefiles: list[str] = []
        self.done: list[bool] = []
        self.states: list[str] = []
        #: resets so far: each draws one game per worker from its seeded shuffle
        self.resets = 0

    def state_dict(self) -> dict[str, Any]:
        """How many games each worker has drawn (one a reset), as a checkpoint keeps it."""
        return {"resets": self.resets}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Fast-forward fresh workers past the games an earlier run drew (``state_dict``), so a
        resumed run plays the games the uninterrupted run would have played next.

        verl-agent's ``AlfworldEnvs`` seeds each Ray worker's TextWorld env at construction, and
        each reset takes the next game of that env's seeded shuffle. Loading skips as many
        games in every worker (TextWorld's ``skip``, run inside the actor), without loading them.
        """
        n = state.get("resets") if isinstance(state, Mapping) else None
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ProasError(f"ALFWorld env state: expected a count 'resets' >= 0, got {n!r}")
        if n > self.resets:
            workers = getattr(self.envs, "workers", None)
            if workers is None:
                raise ProasError("ALFWorld env state: the vectorised env has no 'workers' (verl-agent's AlfworldEnvs "
                                 "Ray actors) to fast-forward")
            _ray_get([w.__ray_call__.remote(_skip_games, n - self.resets) for w in workers])
        elif n < self.resets:
            raise ProasError(f"ALFWorld env state: the envs have drawn {self.resets} games a worker already, "
                             f"more than the checkpoint's {n}; load the state before the first reset")
        self.resets = n

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["envs"], name)

    def reset(self, *args: Any, **kwargs: Any) -> tuple:
        from proas.envs.household import HouseholdEnv
        from proas.envs.household.env import OFFICIAL_PREFIX

        text_obs, image_obs, infos = self.envs.reset(*args, **kwargs)
        self.resets += 1
        while len(self.trackers) < len(text_obs):
            self.trackers.append(HouseholdEnv(backend="fast", max_steps=_MAX_STEPS))
        self.gamefiles, self.done, self.states = [], [], []
        for i, (obs, info) in enumerate(zip(text_obs, infos)):
            gamefile = info.get("extra.gamefile")
            if not gamefile:
                raise ProasError("ALFWorld states: the engine's info has no 'extra.gamefile' (AlfredInfos wrapper); "
                                 "the lockstep simulator needs the game file each env plays")
            gamefile = os.path.abspath(str(gamefile))
            mine, state = self.trackers[i].reset(OFFICIAL_PREFIX + os.path.dirname(gamefile))
            self._check(obs, mine, gamefile, 0, None)
            self.gamefiles.append(gamefile)
            self.done.append(False)
            self.states.append(state["abstract_state"])
            info["abstract_state"] = state["abstract_state"]
        return text_obs, image_obs, infos

    def step(self, actions: Sequence[str]) -> tuple:
        actions = list(actions)  # the engine may be handed the same list; keep what was sent
        text_obs, image_obs, rewards, dones, infos = self.envs.step(actions)
        for i, info in enumerate(infos):
            if self.done[i]:
                continue  # verl-agent steps finished envs too; their rows are dropped
            tracker = self.trackers[i]
            step = tracker.steps
            mine, _, _, _, state = tracker.step(actions[i])
            self._check(text_obs[i], mine, self.gamefiles[i], step + 1, actions[i])
            before, after = self.states[i], state["abstract_state"]
            self.states[i] = after
            info["abstract_state"] = after
            info["proas"] = _proas_fields(step, before, after, actions[i], state["error"])
            self.done[i] = bool(_scalar(dones[i]))
        return text_obs, image_obs, rewards, dones, infos

    @staticmethod
    def _check(engine: str, mine: str, gamefile: str, step: int, action: str | None) -> None:
        if engine != mine:
            what = "at reset" if action is None else f"after step {step} ({action!r})"
            raise ProasError(
                f"ALFWorld states: the engine's observation differs from proas's simulator on {gamefile} {what}: "
                f"{engine[:80]!r} vs {mine[:80]!r}; the lockstep states would be wrong (domain_randomization must "
                f"be off)")


def _skip_games(worker: Any, n: int) -> None:
    """Inside a verl-agent ``AlfworldWorker`` actor: skip the next ``n`` games of its env."""
    worker.env.skip(n)


def _ray_get(refs: Sequence[Any]) -> list[Any]:
    """Wait for Ray futures (values that are not futures pass through)."""
    try:
        import ray
    except ImportError:
        return list(refs)
    return [ray.get(r) if isinstance(r, ray.ObjectRef) else r for r in refs]


def _scalar(x: Any) -> Any:
    try:
        return x.item()
    except AttributeError:
        return x


# ====================================================================== WebShop
_OPTION_CLAUSE = re.compile(r" with (.+?)(?:, and price lower than [\d.]+ dollars)?$")
_OPTION_ITEM = re.compile(r"^([^:,]+): (.+)$")
_SUB_PAGES = ("description", "features", "reviews", "attributes")
_FIXED_CLICKS = {"back to search", "< prev", "next >", "description", "features", "reviews", "attributes",
                 "buy now", "search"}


def instruction_options(instruction: str) -> list[tuple[str, str]]:
    """The (option name, value) pairs a WebShop instruction asks for: its synthetic goals end with
    ``" with <name>: <value>, and <name>: <value>[, and price lower than X dollars]"``. Human
    instructions state no such clause: ``[]``."""
    m = _OPTION_CLAUSE.search(instruction.strip().lower())
    if m is None:
        return []
    out = []
    for part in m.group(1).split(", and "):
        item = _OPTION_ITEM.match(part.strip())
        if item is None:
            return []  # " with " was part of the product, not an option clause
        out.append((item.group(1).strip(), item.group(2).strip()))
    return out


def webshop_page_kind(before: str, action: str) -> str | None:
    """The kind of page WebShop's text env shows after ``action`` on a page of kind ``before``
    (``search``, ``results``, ``item``, a sub-page's name, ``done``), as its ``SimServer`` moves
    between pages; ``None`` when WebShop ignores the action (a no-op). Clickability is checked
    by the caller against the page's clickables."""
    from proas.envs.shop.env import parse_action

    name, arg = parse_action(action) if isinstance(action, str) else ("", None)
    arg = arg.lower() if arg is not None else None
    if name == "search" and arg:
        return "results"
    if name != "click" or not arg or arg == "search" or before == "done":
        return None
    if arg == "back to search":
        return "search"
    if arg == "buy now":
        return "done"
    if arg in ("next >", "< prev") and before == "results":
        return "results"
    if arg == "< prev":
        return "results" if before == "item" else "item"
    if arg in _SUB_PAGES:
        return arg
    return "item"  # a product link (results) or an option value (item)


def _option_names(obs: str, values: set[str]) -> dict[str, str]:
    """Option value -> option name on an item page: the page lists each name, then its values."""
    names: dict[str, str] = {}
    current = None
    parts = [p.strip() for p in obs.split(" [SEP] ")]
    for k, part in enumerate(parts):
        low = part.lower()
        if low in values and current is not None:
            names.setdefault(low, current)
        elif k + 1 < len(parts) and parts[k + 1].lower() in values and low not in _FIXED_CLICKS:
            current = low
    return names


class WebshopPages:
    """verl-agent's vectorised WebShop env (``WebshopMultiProcessEnv``) with page states read off
    the session's pages and the manager's actions (module docstring).

    Args:
        envs: ``reset() -> (obs, infos)``, ``step(actions) -> (obs, rewards, dones, infos)``,
            each info with ``available_actions`` (``has_search_bar``, ``clickables``) and, after
            a purchase, ``won``. Every other attribute is the wrapped env's.
    """

    def __init__(self, envs: Any) -> None:
        self.envs = envs
        self.goal_options: list[list[tuple[str, str]]] = []
        self.selected: list[dict[str, str]] = []
        self.kinds: list[str] = []
        self.pages: list[str] = []
        self.available: list[Mapping[str, Any]] = []
        self.states: list[str] = []
        self.steps: list[int] = []
        self.done: list[bool] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["envs"], name)

    def state_dict(self) -> dict[str, Any]:
        """The goal draws' generator state, as a checkpoint keeps it: verl-agent's
        ``WebshopMultiProcessEnv`` draws each reset's goals in the trainer's process, from one
        ``numpy.random.RandomState`` seeded at construction (``_rng``). ``{}`` for an env
        without one."""
        rng = getattr(self.envs, "_rng", None)
        if not isinstance(rng, np.random.RandomState):
            return {}
        state = rng.get_state(legacy=False)
        return {"rng": {"bit_generator": state["bit_generator"], "key": state["state"]["key"].tolist(),
                        "pos": int(state["state"]["pos"]), "has_gauss": int(state["has_gauss"]),
                        "gauss": float(state["gauss"])}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned: a resumed run draws the goals the uninterrupted
        run would have drawn next."""
        if not isinstance(state, Mapping):
            raise ProasError(f"WebShop env state: expected a mapping, got {type(state).__name__}")
        saved = state.get("rng")
        if saved is None:
            return
        rng = getattr(self.envs, "_rng", None)
        if not isinstance(rng, np.random.RandomState):
            raise ProasError("WebShop env state: the checkpoint holds goal draws, but the vectorised env has no "
                             "numpy RandomState '_rng' to restore them into")
        try:
            key = np.asarray(saved["key"], dtype=np.uint32)
            if saved["bit_generator"] != "MT19937" or key.shape != (624,):
                raise ValueError("not an MT19937 state")
            rng.set_state({"bit_generator": "MT19937", "state": {"key": key, "pos": int(saved["pos"])},
                           "has_gauss": int(saved["has_gauss"]), "gauss": float(saved["gauss"])})
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise ProasError(f"WebShop env state: bad goal-draw generator state ({exc})") from None

    def reset(self, *args: Any, **kwargs: Any) -> tuple:
        obs, infos = self.envs.reset(*args, **kwargs)
        n = len(obs)
        self.goal_options = [instruction_options(_instruction(o)) for o in obs]
        self.selected = [{} for _ in range(n)]
        self.kinds = ["search"] * n  # WebShop's episodes start on the search page
        self.pages = list(obs)
        self.available = [info.get("available_actions") or {} for info in infos]
        self.steps, self.done = [0] * n, [False] * n
        self.states = [self._state(i, won=False) for i in range(n)]
        for info, state in zip(infos, self.states):
            info["abstract_state"] = state
        return obs, infos

    def step(self, actions: Sequence[str]) -> tuple:
        actions = list(actions)
        obs, rewards, dones, infos = self.envs.step(actions)
        for i, info in enumerate(infos):
            if self.done[i]:
                continue
            error = self._apply(i, actions[i], obs[i], info)
            before, after = self.states[i], self._state(i, won=bool(info.get("won", False)))
            self.states[i] = after
            info["abstract_state"] = after
            info["proas"] = _proas_fields(self.steps[i], before, after, actions[i], error)
            self.steps[i] += 1
            self.done[i] = bool(_scalar(dones[i]))
        return obs, rewards, dones, infos

    def _apply(self, i: int, action: str, obs: str, info: Mapping[str, Any]) -> bool:
        """Follow the page and the session's options through one action; True when WebShop
        ignored it (the page and the session stay as they were)."""
        from proas.envs.shop.env import parse_action

        clicks = {str(c).lower() for c in self.available[i].get("clickables", [])}
        name, arg = parse_action(action) if isinstance(action, str) else ("", None)
        arg = arg.lower() if arg is not None else None
        kind = webshop_page_kind(self.kinds[i], action)
        if kind is None or (name == "click" and arg not in clicks):
            return True
        if kind in ("search", "results"):
            self.selected[i] = {}  # a new search, back to search, or the results shown again
        elif self.kinds[i] == "item" and kind == "item":  # an option value clicked
            option = _option_names(self.pages[i], clicks - _FIXED_CLICKS).get(arg)
            if option is not None:
                self.selected[i][option] = arg  # WebShop: session["options"][name] = value
        self.kinds[i] = kind
        self.pages[i] = obs
        self.available[i] = info.get("available_actions") or {}
        return False

    def _state(self, i: int, won: bool) -> str:
        kind = self.kinds[i]
        if kind == "done":
            return f"webshop|done|{'won' if won else 'lost'}"
        if kind in ("item", *_SUB_PAGES) and self.goal_options[i]:
            done = _satisfied(self.selected[i], self.goal_options[i])
            return f"webshop|{kind}|opts={done}/{len(self.goal_options[i])}"
        return f"webshop|{kind}"


def _instruction(obs: str) -> str:
    parts = obs.split(" [SEP] ")
    return parts[2] if len(parts) > 2 and parts[1] == "Instruction:" else ""


def _satisfied(selected: Mapping[str, str], goal: Sequence[tuple[str, str]]) -> int:
    """How many goal options the selection satisfies, as WebShop's option reward counts them."""
    from proas.envs.shop.reward import MATCH_THRESHOLD, normalize_color, token_set_ratio

    chosen = [normalize_color(v) for v in selected.values()]
    return sum(any(token_set_ratio(c, normalize_color(value)) > MATCH_THRESHOLD for c in chosen)
               for _, value in goal)
