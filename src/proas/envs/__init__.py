"""Environments: one protocol (``base.Env``); each env brings its own abstraction, oracle and task
sets; ``registry`` is the one table from an env name to its factory (``make(name, **options)``);
``replay`` plays any env's oracle (the reference graph's walkthroughs) and records env steps as
``proas.types.Step``; ``cli`` lets a person play any env by name (``proas play``, ``proas tasks``)."""

from proas.envs.base import REQUIRED_INFO_KEYS, Env, EnvCheckError, check_env, check_info
from proas.envs.registry import ENVS, EnvSpec, make, make_factory, names, register

__all__ = ["ENVS", "REQUIRED_INFO_KEYS", "Env", "EnvCheckError", "EnvSpec", "check_env", "check_info", "make",
           "make_factory", "names", "register"]
