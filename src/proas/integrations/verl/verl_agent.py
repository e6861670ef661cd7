"""The verl-agent side of the recipe (recipes/verl_agent/): what its patch calls, and the graphs.

The patch in ``recipes/verl_agent/verl-agent.patch`` keeps its edits to verl-agent's files to a
few lines each by calling into this module:

- ``check_config(config)`` in its ``main_ppo.main``, before Ray starts: a config ProAS cannot run
  with (an env without abstract states, bad ``proas:`` settings, a missing graph file) stops
  there with one line saying why and what to change;
- ``with_proas_envs(make_envs)`` around its ``make_envs``: for ``env.env_name``
  ``proas/household`` or ``proas/shop``, proas's envs behind verl-agent's own ALFWorld / WebShop
  env managers (its prompts, history and projection; ``make_envs``); for its own
  ``alfworld/AlfredTWEnv`` and WebShop envs with ``proas.enable``, their vectorised envs wrapped
  by the state trackers of ``proas.integrations.verl.states``;
- ``rollout_columns(infos)`` in its rollout loop: the step columns ProAS reads;
- ``trainer_credit(config)`` in its ``RayPPOTrainer``: the ``ProASCredit`` of the config's
  ``proas:`` section, or ``None`` when ``proas.enable`` is off.

``build_graph`` (``proas verl build-graph``) builds the initial Agentic Reference Graph of an
ARG variant before training: from the oracle's walkthroughs of the training tasks, pruned for
the ``incomplete`` ablation, or from another run's successes for ``distill``.

Nothing here imports verl or verl-agent: ``config`` is any mapping with verl-agent's keys.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from proas.credit import ESTIMATORS, ReferenceGraph
from proas.envs import make_factory
from proas.envs.base import Env
from proas.envs.replay import replay_oracles
from proas.errors import ProasError
from proas.integrations.verl.envs import ProasEnvManager, ProasVecEnv, step_columns
from proas.integrations.verl.hook import ProASCredit
from proas.types import Trajectory

__all__ = [
    "ALFWORLD_TW",
    "VERL_AGENT_COMMIT",
    "ENV_NAMES",
    "GRAPH_VARIANTS",
    "build_graph",
    "check_config",
    "check_env_states",
    "make_envs",
    "oracle_trajectories",
    "proas_env_of",
    "proas_settings",
    "rollout_columns",
    "states_source",
    "trainer_credit",
    "with_proas_envs",
]

#: the verl-agent commit the recipe's patch is made for and tested on
VERL_AGENT_COMMIT = "796ed310287fa605c9292a0fce07a86d79fde05e"
#: verl-agent ``env.env_name`` -> proas environment
ENV_NAMES = {"proas/household": "household", "proas/shop": "shop"}
#: verl-agent's text ALFWorld env, whose states come from the household simulator in lockstep
ALFWORLD_TW = "alfworld/AlfredTWEnv"
#: the env names ProAS can take states from, for messages
STATE_ENV_NAMES = ("proas/household", "proas/shop", ALFWORLD_TW, "Webshop")
#: initial graphs ``build_graph`` makes; evolving vs static is the trainer's ``proas.evolve``
GRAPH_VARIANTS = ("oracle", "incomplete", "distill")
#: the Incomplete ablation's share of state-action pairs removed (the paper's 0.4)
INCOMPLETE_PRUNE = 0.4


def proas_env_of(env_name: str) -> str | None:
    """``household`` / ``shop`` for a verl-agent ``env.env_name`` of the recipe, else ``None``."""
    return ENV_NAMES.get(str(env_name).strip().lower())


def env_factory(env: str, max_steps: int | None = None) -> Callable[[], Env]:
    """A zero-argument constructor of proas's env ``env`` (``proas.envs.make_factory``)."""
    return make_factory(env, {} if max_steps is None else {"max_steps": int(max_steps)})


def _get(cfg: Any, dotted: str, default: Any = None) -> Any:
    node = cfg
    for key in dotted.split("."):
        try:
            node = node[key] if isinstance(node, Mapping) or hasattr(node, "__getitem__") else getattr(node, key)
        except (KeyError, AttributeError, TypeError):
            return default
        if node is None:
            return default
    return node


def states_source(env_name: str) -> str | None:
    """Where a verl-agent env's abstract states come from: ``proas`` (proas's envs),
    ``alfworld`` (``alfworld/AlfredTWEnv``: the household simulator in lockstep), ``webshop``
    (any name verl-agent routes to WebShop: the page tracker), or ``None`` (no states)."""
    name = str(env_name).strip()
    if proas_env_of(name) is not None:
        return "proas"
    if name == ALFWORLD_TW:
        return "alfworld"
    if "webshop" in name.lower():
        return "webshop"
    return None


def proas_enabled(config: Any) -> bool:
    return bool(_get(config, "proas.enable", False))


def _verl_agent_alfworld_config() -> Path | None:
    """verl-agent's ``config_tw.yaml`` (what its ``AlfredTWEnv`` reads), when ``agent_system`` is
    importable."""
    try:
        spec = importlib.util.find_spec("agent_system.environments")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "env_package" / "alfworld" / "configs" / "config_tw.yaml"
    return path if path.is_file() else None


def check_env_states(config: Any) -> None:
    """Refuse (``ProasError``, one line) a run with ``proas.enable`` whose env cannot give ProAS
    its abstract states; nothing when ProAS is off."""
    if not proas_enabled(config):
        return
    name = str(_get(config, "env.env_name", ""))
    source = states_source(name)
    if source is None:
        raise ProasError(f"proas.enable=True, but env.env_name={name!r} gives no abstract states for the reference "
                         f"graph; use one of {', '.join(STATE_ENV_NAMES)}, or set proas.enable=False")
    if source == "alfworld":
        cfg = _verl_agent_alfworld_config()
        if cfg is not None:
            from omegaconf import OmegaConf

            if bool(OmegaConf.select(OmegaConf.load(cfg), "env.domain_randomization", default=False)):
                raise ProasError(f"proas.enable=True with {ALFWORLD_TW} needs env.domain_randomization: False in {cfg} "
                                 f"(randomised object names break the lockstep states)")


def check_config(config: Any) -> None:
    """The start-up check the patch runs in ``main_ppo.main`` before Ray starts: with
    ``proas.enable``, the env must give states (``check_env_states``), the ``proas:`` settings
    must build a ``ProASCredit``, and a named graph file must exist. On a problem, one line on
    stderr (``proas: ...``) and exit status 2; nothing when ProAS is off."""
    if not proas_enabled(config):
        return
    try:
        check_env_states(config)
        settings = proas_settings(config)
        graph = settings.get("graph")
        if graph is not None and not Path(str(graph)).is_file():
            raise ProasError(f"proas.graph={graph} does not exist; build it with proas verl build-graph, "
                             f"or set proas.graph=null to start from an empty graph")
        ProASCredit.from_config({k: v for k, v in settings.items() if k != "graph"})
    except ProasError as exc:
        print(f"proas: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _verl_agent_managers(env: str) -> tuple[type, Callable, str] | None:
    """verl-agent's env-manager class, action projection and vectorised-env layout for a proas
    env (household: its ALFWorld manager and ``alfworld_projection``; shop: its WebShop manager
    and ``webshop_projection``), or ``None`` outside a verl-agent install (no ``agent_system``)."""
    try:
        if importlib.util.find_spec("agent_system") is None:
            return None
    except (ImportError, ValueError):
        return None
    from agent_system.environments.env_manager import AlfWorldEnvironmentManager, WebshopEnvironmentManager

    if env == "household":
        return AlfWorldEnvironmentManager, _projection("alfworld", "alfworld_projection"), "alfworld"
    return WebshopEnvironmentManager, _projection("webshop", "webshop_projection"), "webshop"


def _projection(package: str, name: str) -> Callable:
    """verl-agent's ``env_package/<package>/projection.py`` function ``name``, loaded from its file:
    the env package's ``__init__`` imports its engine (TextWorld and torchvision for ALFWorld,
    Ray and gym for WebShop), which proas's envs do not need; the projection module is plain."""
    spec = importlib.util.find_spec("agent_system.environments")
    assert spec is not None and spec.submodule_search_locations
    path = Path(list(spec.submodule_search_locations)[0]) / "env_package" / package / "projection.py"
    module_spec = importlib.util.spec_from_file_location(f"_verl_agent_{package}_projection", path)
    if module_spec is None or module_spec.loader is None:
        raise ProasError(f"verl-agent's {path} is missing; is the checkout complete?")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return functools.partial(getattr(module, name))


def make_envs(config: Any) -> tuple[Any, Any] | None:
    """The (train, validation) env managers for ``env.env_name`` ``proas/household`` or
    ``proas/shop``; ``None`` for another env name, so verl-agent's own branches run.

    Training envs: ``data.train_batch_size`` tasks a batch drawn from the env's ``train`` split,
    each played ``env.rollout.n`` times; validation envs: ``data.val_batch_size`` tasks of its
    ``valid`` split (the fixed 128), once each, seeded ``env.seed + 1000`` as verl-agent's own.
    ``env.max_steps`` and ``env.history_length`` are honoured.

    Inside verl-agent (its ``agent_system`` package importable) the managers are verl-agent's
    own, ``AlfWorldEnvironmentManager`` for household and ``WebshopEnvironmentManager`` for shop,
    over ``ProasVecEnv``: the prompts are its templates (the task at every step), the projection
    its own. Elsewhere they are ``ProasEnvManager`` with proas's ``default_prompt``.
    """
    env = proas_env_of(_get(config, "env.env_name", ""))
    if env is None:
        return None
    group_n = int(_get(config, "env.rollout.n", 1) or 1)
    seed = int(_get(config, "env.seed", 0))
    history = int(_get(config, "env.history_length", 2))
    make = env_factory(env, _get(config, "env.max_steps"))
    probe = make()
    train, valid = list(probe.task_ids("train")), list(probe.task_ids("valid"))
    train_n = int(_get(config, "data.train_batch_size", 16))
    val_n = min(int(_get(config, "data.val_batch_size", len(valid))), len(valid))
    theirs = _verl_agent_managers(env)
    if theirs is not None:
        manager, projection, layout = theirs
        vec = ProasVecEnv(make, layout=layout, tasks=train, env_num=train_n, group_n=max(group_n, 1), seed=seed)
        val_vec = ProasVecEnv(make, layout=layout, tasks=valid, env_num=val_n, group_n=1, seed=seed + 1000)
        return manager(vec, projection, config), manager(val_vec, projection, config)
    envs = ProasEnvManager(make, group_n=max(group_n, 1), tasks=train, env_num=train_n, seed=seed,
                           history_length=history)
    val_envs = ProasEnvManager(make, group_n=1, tasks=valid, env_num=val_n, seed=seed + 1000,
                               history_length=history)
    return envs, val_envs


def with_proas_envs(make: Callable[[Any], tuple[Any, Any]]) -> Callable[[Any], tuple[Any, Any]]:
    """verl-agent's ``make_envs`` with the recipe's envs: the patch rebinds
    ``make_envs = with_proas_envs(make_envs)`` at the end of its ``env_manager.py``.

    The result checks that the env gives states when ProAS is on (``check_env_states``), builds
    proas's envs for ``proas/*`` names (``make_envs``), and otherwise calls verl-agent's
    ``make``; with ``proas.enable`` it then wraps the vectorised env of both managers in the
    state tracker of ``proas.integrations.verl.states`` (``AlfworldLockstep`` for
    ``alfworld/AlfredTWEnv``, ``WebshopPages`` for WebShop).
    """

    @functools.wraps(make)
    def make_envs_with_proas(config: Any) -> tuple[Any, Any]:
        check_env_states(config)
        ours = make_envs(config)
        if ours is not None:
            return ours
        envs, val_envs = make(config)
        if proas_enabled(config):
            from proas.integrations.verl.states import AlfworldLockstep, WebshopPages

            source = states_source(str(_get(config, "env.env_name", "")))
            tracker = AlfworldLockstep if source == "alfworld" else WebshopPages
            for manager in (envs, val_envs):
                manager.envs = tracker(manager.envs)
        return envs, val_envs

    return make_envs_with_proas


def rollout_columns(infos: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ProAS step columns of one rollout step (``step_columns``), or ``{}`` when no env of
    the batch is a proas one, so verl-agent's own envs' batches are left as they were."""
    if not any(isinstance(info, Mapping) and "proas" in info for info in infos):
        return {}
    return step_columns(infos)


def trainer_credit(config: Any, envs: Sequence[Any] = ()) -> ProASCredit | None:
    """The run's ``ProASCredit`` from the config's ``proas:`` section, or ``None`` when the section
    is missing or ``proas.enable`` is false (the trainer then runs verl-agent's advantage only).

    What the section leaves unset follows verl-agent's own config (``proas_settings``). ``envs``:
    the trainer's (train, validation) env managers, whose task draws its checkpoints then keep
    (``ProASCredit.attach_envs``).
    """
    section = _get(config, "proas")
    if section is None or not bool(_get(section, "enable", False)):
        return None
    credit = ProASCredit.from_config(proas_settings(config))
    credit.attach_envs(*envs)
    return credit


def _plain(node: Any) -> Any:
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(node, (DictConfig, ListConfig)):
            return OmegaConf.to_container(node, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf is a proas dependency
        pass
    return node


#: verl-agent ``algorithm.adv_estimator`` -> proas estimator, when ``proas.estimator`` is unset
_ESTIMATOR_OF = {"grpo": "grpo", "gigpo": "gigpo", "rloo": "rloo", "reinforce_plus_plus_baseline": "reinforce_pp"}


_NORM_BY_STD = ("norm_by_std", "algorithm.norm_adv_by_std_in_grpo", True, bool)
#: the estimator options that follow verl-agent's config for the estimators it has itself:
#: estimator -> (proas option, verl-agent key, verl-agent's default, type)
_VERL_AGENT_OPTIONS: dict[str, tuple[tuple[str, str, Any, type], ...]] = {
    "grpo": (_NORM_BY_STD,),
    "dapo": (_NORM_BY_STD,),
    "gigpo": (
        ("gamma", "algorithm.gamma", 0.95, float),
        ("mode", "algorithm.gigpo.mode", "mean_norm", str),
        ("step_weight", "algorithm.gigpo.step_advantage_w", 1.0, float),
    ),
}


def proas_settings(config: Any) -> dict[str, Any]:
    """The ``proas:`` section with its unset values filled from verl-agent's config, so that one
    switch (``proas.enable=True``) gives ProAS on the estimator and settings of the run:

    - ``estimator``: from ``algorithm.adv_estimator`` (``grpo``, ``gigpo``, ``rloo``,
      ``reinforce_plus_plus_baseline``); DAPO (verl-agent's ``grpo`` with ``filter_groups``)
      and MiGPO name theirs;
    - ``estimator_options``, each unless given: GRPO / DAPO ``norm_by_std`` <-
      ``algorithm.norm_adv_by_std_in_grpo``; GiGPO ``gamma`` <- ``algorithm.gamma``, ``mode`` <-
      ``algorithm.gigpo.mode``, ``step_weight`` <- ``algorithm.gigpo.step_advantage_w``;
    - ``invalid_action_penalty``: ``actor_rollout_ref.actor.invalid_action_penalty_coef``, or 0
      when ``use_invalid_action_penalty`` is off (verl-agent's switch), unless given.
    """
    section = dict(_plain(_get(config, "proas")) or {})
    section.pop("enable", None)
    estimator = section.get("estimator")
    if estimator is None:
        adv = str(_get(config, "algorithm.adv_estimator", "grpo"))
        if adv not in _ESTIMATOR_OF:
            raise ProasError(f"proas.estimator is unset and algorithm.adv_estimator={adv!r} has no ProAS "
                             f"counterpart; set proas.estimator (one of grpo, dapo, gigpo, migpo, rloo, reinforce_pp)")
        estimator = _ESTIMATOR_OF[adv]
    section["estimator"] = estimator
    options = dict(section.get("estimator_options") or {})
    for option, key, default, kind in _VERL_AGENT_OPTIONS.get(estimator, ()):
        options.setdefault(option, kind(_get(config, key, default)))
    if estimator in ESTIMATORS and not ESTIMATORS[estimator].takes("group_stats"):
        options.pop("group_stats", None)  # the recipe's default group_stats, for rloo and reinforce_pp
    section["estimator_options"] = options
    if section.get("invalid_action_penalty") is None:
        on = bool(_get(config, "actor_rollout_ref.actor.use_invalid_action_penalty", True))
        coef = float(_get(config, "actor_rollout_ref.actor.invalid_action_penalty_coef", 0.1))
        section["invalid_action_penalty"] = coef if on else 0.0
    if section.get("graph") in ("", None):
        section.pop("graph", None)
    return section


def oracle_trajectories(env: Env, task_ids: Sequence[str]) -> tuple[list[Trajectory], list[str]]:
    """The oracle's won walkthroughs on ``task_ids`` (one trajectory each) and the ids it did not
    win: the in-repo trainer's replay (``proas.envs.replay.replay_oracles``), so the same graph."""
    won, failed = replay_oracles(env, task_ids)
    return won, [r.task_id for r in failed]


def build_graph(
    env: str,
    variant: str = "oracle",
    *,
    tasks: int | None = None,
    seed: int = 0,
    prune: float = INCOMPLETE_PRUNE,
    source: str | Path | None = None,
) -> ReferenceGraph:
    """The initial ARG of a variant for ``env`` (``household`` / ``shop``).

    - ``oracle``: the oracle's walkthroughs of the env's training tasks (the first ``tasks`` of
      them if given); the ProAS default, and the Static ablation (with ``proas.evolve=false``);
    - ``incomplete``: the same graph with ``prune`` (0.4) of its state-action pairs removed
      (seeded); Incomplete and Incomplete & Static;
    - ``distill``: from another run: ``source`` is a saved graph (e.g. a teacher run's
      ``global_step_N/proas/graph.json.gz``) or a trajectory JSONL whose successes are merged.
    """
    if variant not in GRAPH_VARIANTS:
        raise ProasError(f"unknown graph variant {variant!r}; choose one of: {', '.join(GRAPH_VARIANTS)}")
    if variant == "distill":
        if source is None:
            raise ProasError("variant distill needs --from: a saved graph or a trajectory JSONL of the teacher run")
        path = Path(source)
        if path.suffix == ".jsonl":
            from proas.credit.cli import read_trajectories

            trajs = read_trajectories(path)
            graph = ReferenceGraph.from_trajectories(trajs)
            graph.meta.update({"variant": "distill", "built_from": sum(t.success for t in trajs)})
        else:
            graph = ReferenceGraph.load(path)
            graph.meta.update({"variant": "distill"})
        if graph.num_nodes == 0:
            # as the oracle variant: an empty ARG would make ProAS's rows silently no-ARG rows
            what = (f"{len(trajs)} trajectories, none of them successful" if path.suffix == ".jsonl"
                    else "an empty graph")
            raise ProasError(f"{path}: {what}; no graph to distil")
        return graph
    probe = env_factory(env)()
    ids = list(probe.task_ids("train"))
    if tasks is not None:
        ids = ids[: int(tasks)]
    trajs, failed = oracle_trajectories(probe, ids)
    if not trajs:
        raise ProasError(f"env {env!r}: the oracle won none of {len(ids)} training tasks; no graph to build")
    graph = ReferenceGraph.from_trajectories(trajs)
    graph.meta.update({"variant": variant, "env": env, "built_from": len(trajs), "oracle_failed": len(failed)})
    if variant == "incomplete":
        graph.prune(prune, seed=seed)
        graph.meta.update({"prune": prune, "prune_seed": seed})
    return graph


def sft_examples(env: str, *, tasks: int | None = None, history_length: int = 2) -> list[dict[str, str]]:
    """(prompt, response) pairs of the oracle's walkthroughs of ``env``'s training tasks, for the
    SFT row: the prompt is what the RL runs' env manager shows the policy at that step (inside
    verl-agent its own manager and templates, as ``make_envs`` builds them; elsewhere
    ``ProasEnvManager``), the response the answer format the RL runs require,
    ``<think>..</think>`` then ``<action>..</action>``. The oracle gives no reasoning, so the
    think part only names the action; the model learns the format and the actions, as imitation
    of the walkthroughs.
    """
    make = env_factory(env)
    probe = make()
    ids = list(probe.task_ids("train"))
    if tasks is not None:
        ids = ids[: int(tasks)]
    current: list[str] = []
    theirs = _verl_agent_managers(env)
    if theirs is not None:
        from omegaconf import OmegaConf

        manager_cls, projection, layout = theirs
        vec = ProasVecEnv(make, layout=layout, tasks=lambda: list(current))
        manager = manager_cls(vec, projection, OmegaConf.create({"env": {"history_length": history_length}}))
        played = vec
    else:
        manager = ProasEnvManager(make, group_n=1, history_length=history_length, tasks=lambda: list(current))
        played = manager
    out: list[dict[str, str]] = []
    for tid in ids:
        current[:] = [tid]
        obs, _ = manager.reset(kwargs=None)
        for action in played.envs[0].oracle(tid)[: int(played.envs[0].max_steps)]:
            response = f"<think>The next step towards the goal: {action}.</think>\n<action>{action}</action>"
            out.append({"prompt": obs["text"][0], "response": response, "task_id": tid})
            obs, _, done, _ = manager.step([response])
            if bool(done[0]):
                break
    return out
