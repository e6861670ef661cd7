"""The one table from an env name to its factory: ``proas.envs.make(name, **options)``.

Every command that builds an env by name asks this module: the trainer and ``proas eval``
(``env.name`` / ``env.options``), ``proas play`` and ``proas tasks``, ``proas schedule``, the
baselines, the probes, ``proas lm tokenizer`` and the verl bridge.

A name is either registered here (``household``, ``shop``) or a ``package.module:function``
path to a factory of your own (the tests train on ``toy_env:make_env``). Either way the factory
is imported only when an env is first built, so a command's ``--help`` or a config typo does not
wait for an env's data to load, and it is called with the options as keyword arguments.

Adding an env to proas is one registration at the bottom of this file::

    register("garden", "proas.envs.garden:make_garden_env",
             splits="train, valid", tuning_split="test")

The factory returns an object that implements ``proas.envs.base.Env`` (``proas.envs.check_env``
checks one task). Per-env settings of the studies (GiGPO's mode, Spd.@K thresholds, prompts)
are the studies' own and live with them.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from proas.envs.base import Env
from proas.errors import ProasError

__all__ = ["ENVS", "EnvSpec", "make", "make_factory", "names", "register"]


@dataclass(frozen=True)
class EnvSpec:
    """A registered env."""

    name: str
    #: ``package.module:function``: the factory, imported when the env is first built
    factory: str
    #: the splits ``Env.task_ids`` lists, for the commands' help
    splits: str = "train, valid"
    #: the split no study trains or evaluates on, which tuning validation sets are drawn from
    #: (``proas schedule make-tuning-val``); ``None``: the env has none
    tuning_split: str | None = None


#: the registered envs by name, in the order the help lists them
ENVS: dict[str, EnvSpec] = {}


def register(name: str, factory: str, *, splits: str = "train, valid", tuning_split: str | None = None) -> EnvSpec:
    """Register env ``name`` built by ``factory`` (``package.module:function``)."""
    if ":" in name or not name:
        raise ValueError(f"an env name is a plain word (a name with ':' is a module:function path), got {name!r}")
    if factory.count(":") != 1:
        raise ValueError(f"env {name!r}: the factory must be 'package.module:function', got {factory!r}")
    spec = EnvSpec(name, factory, splits, tuning_split)
    ENVS[name] = spec
    return spec


def names() -> list[str]:
    """The registered env names."""
    return list(ENVS)


def make_factory(name: str, options: Mapping[str, Any] | None = None, *, config: bool = False) -> Callable[[], Env]:
    """A zero-argument constructor of env ``name`` (registered, or ``package.module:function``)
    with ``options``; each call builds a fresh env. The name is resolved (its factory imported)
    now, so a bad name fails before any work; a ``ProasError`` names what is wrong, in the
    config's words (``env.name`` / ``env.options``) when ``config`` is set."""
    label = f"config: env.name={name!r}" if config else f"env {name!r}"
    path = ENVS[name].factory if name in ENVS else name if ":" in str(name) else None
    if path is None:
        close = difflib.get_close_matches(str(name), names(), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        known = ", ".join(names())
        if config:
            raise ProasError(f"{label} is not {known} or module:factory{hint}")
        raise ProasError(f"unknown env {name!r}; choose one of {known}, or module:factory{hint}")
    module_name, _, attr = path.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError, TypeError) as exc:  # (an empty or relative module name)
        raise ProasError(f"{label} cannot be imported ({exc})") from None
    if not callable(fn):
        raise ProasError(f"{label} names a {type(fn).__name__}, not an env factory (a function or class that "
                         "returns an env)")
    opts = dict(options or {})
    where = "config: env.options" if config else f"the options {sorted(opts)}"

    def make_one() -> Env:
        try:
            env = fn(**opts)
        except TypeError as exc:
            raise ProasError(f"{where} do not fit env {name!r} ({exc})") from None
        if not isinstance(env, Env):  # the protocol of proas.envs.base: reset, step, oracle, task_ids, ...
            missing = [m for m in ("name", "max_steps", "reset", "step", "oracle", "task_ids") if not hasattr(env, m)]
            raise ProasError(f"{label} is not an env factory: it returned a {type(env).__name__}, which lacks "
                             f"{', '.join(missing)} (the env protocol, proas.envs.base.Env)")
        return env

    return make_one


def make(name: str, **options: Any) -> Env:
    """Build env ``name`` (registered, or ``package.module:function``) with ``options``."""
    return make_factory(name, options)()


# ----------------------------------------------------------------------------- the registered envs
register("household", "proas.envs.household:make_household_env",
         splits="train, valid_seen, valid_unseen, valid (the fixed 128)", tuning_split="valid_unseen")
register("shop", "proas.envs.shop:make_shop_env", splits="train, valid, test, all", tuning_split="test")
