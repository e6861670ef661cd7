"""The verl-agent side of the recipe (recipes/verl_agent/): what its patch calls, and the graphs.

The patch in ``recipes/verl_agent/verl-agent.patch`` keeps its edits to verl-agent's files to a
few lines each by calling into this module:

- ``make_envs(config)`` in verl-agent's ``make_envs``: the proas household / shop environments
  behind ``ProasEnvManager`` for ``env.env_name`` ``proas/household`` or ``proas/shop``;
- ``rollout_columns(infos)`` in its rollout loop: the step columns ProAS reads;
- ``trainer_credit(config)`` in its ``RayPPOTrainer``: the ``ProASCredit`` of the config's
  ``proas:`` section, or ``None`` when ``proas.enable`` is off.

``build_graph`` (``proas verl build-graph``) builds the initial Agentic Reference Graph of an
ARG variant before training: from the oracle's walkthroughs of the training tasks, pruned for
the ``incomplete`` ablation, or from another run's successes for ``distill``.

Nothing here imports verl or verl-agent: ``config`` is any mapping with verl-agent's keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from proas.credit import ESTIMATORS, ReferenceGraph
from proas.envs.base import Env
from proas.envs.replay import replay_oracles
from proas.errors import ProasError
from proas.integrations.verl.envs import ProasEnvManager, step_columns
from proas.integrations.verl.hook import ProASCredit
from proas.types import Trajectory

__all__ = [
    "ENV_NAMES",
    "GRAPH_VARIANTS",
    "build_graph",
    "make_envs",
    "oracle_trajectories",
    "proas_env_of",
    "proas_settings",
    "rollout_columns",
    "trainer_credit",
]

#: verl-agent ``env.env_name`` -> proas environment
ENV_NAMES = {"proas/household": "household", "proas/shop": "shop"}
#: initial graphs ``build_graph`` makes; evolving vs static is the trainer's ``proas.evolve``
GRAPH_VARIANTS = ("oracle", "incomplete", "distill")
#: the Incomplete ablation's share of state-action pairs removed (the paper's 0.4)
INCOMPLETE_PRUNE = 0.4


def proas_env_of(env_name: str) -> str | None:
    """``household`` / ``shop`` for a verl-agent ``env.env_name`` of the recipe, else ``None``."""
    return ENV_NAMES.get(str(env_name).strip().lower())


def env_factory(env: str, max_steps: int | None = None) -> Callable[[], Env]:
    """A zero-argument constructor of proas's ``household`` or ``shop`` env."""
    kwargs = {} if max_steps is None else {"max_steps": int(max_steps)}
    if env == "household":
        from proas.envs.household import make_household_env

        return lambda: make_household_env(**kwargs)
    if env == "shop":
        from proas.envs.shop import make_shop_env

        return lambda: make_shop_env(**kwargs)
    raise ProasError(f"unknown env {env!r}; choose household or shop")


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


def make_envs(config: Any) -> tuple[ProasEnvManager, ProasEnvManager] | None:
    """verl-agent's ``make_envs`` for ``env.env_name`` ``proas/household`` or ``proas/shop``.

    Training envs: ``data.train_batch_size`` tasks a batch drawn from the env's ``train`` split,
    each played ``env.rollout.n`` times; validation envs: ``data.val_batch_size`` tasks of its
    ``valid`` split (the fixed 128), once each, seeded ``env.seed + 1000`` as verl-agent's own.
    ``env.max_steps`` and ``env.history_length`` are honoured. Returns ``None`` for another
    env name, so the patch's call falls through to verl-agent's own branches.
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
    envs = ProasEnvManager(make, group_n=max(group_n, 1), tasks=train, env_num=train_n, seed=seed,
                           history_length=history)
    val_envs = ProasEnvManager(make, group_n=1, tasks=valid, env_num=val_n, seed=seed + 1000,
                               history_length=history)
    return envs, val_envs


def rollout_columns(infos: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ProAS step columns of one rollout step (``step_columns``), or ``{}`` when no env of
    the batch is a proas one, so verl-agent's own envs' batches are left as they were."""
    if not any(isinstance(info, Mapping) and "proas" in info for info in infos):
        return {}
    return step_columns(infos)


def trainer_credit(config: Any) -> ProASCredit | None:
    """The run's ``ProASCredit`` from the config's ``proas:`` section, or ``None`` when the section
    is missing or ``proas.enable`` is false (the trainer then runs verl-agent's advantage only).

    What the section leaves unset follows verl-agent's own config (``proas_settings``).
    """
    section = _get(config, "proas")
    if section is None or not bool(_get(section, "enable", False)):
        return None
    return ProASCredit.from_config(proas_settings(config))


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
    SFT row: the prompt is what ``ProasEnvManager`` shows the policy at that step (the RL runs'
    prompt), the response the answer format the RL runs require, ``<think>..</think>`` then
    ``<action>..</action>``. The oracle gives no reasoning, so the think part only names the
    action; the model learns the format and the actions, as imitation of the walkthroughs.
    """
    make = env_factory(env)
    probe = make()
    ids = list(probe.task_ids("train"))
    if tasks is not None:
        ids = ids[: int(tasks)]
    manager = ProasEnvManager(make, group_n=1, history_length=history_length)
    out: list[dict[str, str]] = []
    for tid in ids:
        obs, _ = manager.reset([tid])
        for action in manager.envs[0].oracle(tid)[: int(manager.envs[0].max_steps)]:
            response = f"<think>The next step towards the goal: {action}.</think>\n<action>{action}</action>"
            out.append({"prompt": obs["text"][0], "response": response, "task_id": tid})
            obs, _, done, _ = manager.step([response])
            if done[0]:
                break
    return out
