"""Helpers shared by the baselines: a validation table like ``proas eval``'s, figures from a list
of validation trajectories, and the one-checkpoint run directory that ``proas eval`` reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proas.errors import ProasError
from proas.train import checkpoint as ckpt
from proas.train.evaluate import print_val_table
from proas.train.loop import val_result

__all__ = [
    "env_name",
    "load_policy",
    "print_val_table",
    "val_result",
    "validation_ids",
    "write_checkpoint_dir",
]  # re-exported


def write_checkpoint_dir(directory: Path, *, config_yaml: str, policy_state: dict[str, Any], step: int,
                         meta: dict[str, Any], graph=None) -> None:
    """Write a complete checkpoint into ``directory`` (replacing it only once complete).

    The layout is the trainer's (``state.pt`` with ``config`` and ``policy``), so ``proas eval``,
    ``proas serve`` and the probes load it like an RL checkpoint.
    """
    ckpt.replace_checkpoint(directory, {"step": step, "config": config_yaml, "policy": policy_state},
                            {"step": step, **meta}, graph)


def load_policy(target: str | Path):
    """``(policy, cfg, checkpoint_dir, state)`` of a run directory (best, else latest checkpoint),
    a checkpoint directory or a ``state.pt``: the same resolution as ``proas eval``."""
    import torch

    from proas.train.config import config_from_yaml
    from proas.train.loop import build_policy

    directory = ckpt.find_checkpoint(target)
    state = ckpt.load_state(directory)
    cfg = config_from_yaml(str(state.get("config", "")), where=f"{directory / ckpt.STATE_FILE} (config)")
    torch.set_num_threads(cfg.train.threads)
    policy = build_policy(cfg, cfg.seed)
    try:
        policy.load_state_dict(state["policy"])
    except (KeyError, RuntimeError) as exc:
        raise ProasError(f"{directory / ckpt.STATE_FILE}: policy weights do not fit the config "
                         f"({type(exc).__name__})") from None
    return policy, cfg, directory, state


def validation_ids(cfg, env) -> list[str]:
    """The validation tasks an RL run of ``cfg`` uses (fixed file, shipped set or valid split)."""
    from proas.train.loop import Trainer

    return Trainer._val_ids_for(cfg, env, env_name(cfg, env))


def env_name(cfg, env) -> str:
    return str(getattr(env, "name", cfg.env.name))
