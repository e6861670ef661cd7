"""Environments: one protocol (``base.Env``); each env brings its own abstraction, oracle and task
sets; ``replay`` plays any env's oracle (the reference graph's walkthroughs) and records env
steps as ``proas.types.Step``."""

from proas.envs.base import REQUIRED_INFO_KEYS, Env, EnvCheckError, check_env, check_info

__all__ = ["REQUIRED_INFO_KEYS", "Env", "EnvCheckError", "check_env", "check_info"]
