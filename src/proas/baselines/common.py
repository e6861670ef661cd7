"""Helpers shared by the baselines: a validation table like ``proas eval``'s, figures from a list
of validation trajectories, and the one-checkpoint run directory that ``proas eval`` reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proas.train import checkpoint as ckpt
from proas.train.evaluate import print_val_table
from proas.train.loop import val_result
from proas.train.warm_start import INIT_SOURCE, load_policy

__all__ = [
    "env_name",
    "load_policy",
    "print_val_table",
    "val_result",
    "validation_ids",
    "write_checkpoint_dir",
]  # re-exported


def write_checkpoint_dir(directory: Path, *, config_yaml: str, policy, step: int,
                         meta: dict[str, Any], graph=None, init_source: dict[str, Any] | None = None) -> None:
    """Write a complete checkpoint of ``policy`` into ``directory`` (replacing it only once complete).

    The layout is the trainer's (``state.json`` with ``config``; the weights in ``state.pt`` as
    ``policy``, or for the lm as a Hugging Face directory beside it), so ``proas eval``, ``proas
    serve``, the probes and ``proas lm export`` load it like an RL checkpoint. ``init_source``:
    for an lm warm-started from a proas run, the source's structure (``init_source_record``), which
    the trainer's checkpoints record too, so that loading this one never reads the source again.
    """
    state = {"step": step, "config": config_yaml, **policy.checkpoint_state(),
             **({INIT_SOURCE: init_source} if init_source is not None else {})}
    ckpt.replace_checkpoint(directory, state, {"step": step, **meta}, graph, write_files=policy.checkpoint_writer())


def validation_ids(cfg, env) -> list[str]:
    """The validation tasks an RL run of ``cfg`` uses (fixed file, shipped set or valid split)."""
    from proas.train.loop import Trainer

    return Trainer._val_ids_for(cfg, env, env_name(cfg, env))


def env_name(cfg, env) -> str:
    return str(getattr(env, "name", cfg.env.name))
