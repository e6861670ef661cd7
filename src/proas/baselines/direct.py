"""The Direct baseline: the untrained policy of a config, evaluated on the validation set.

For the ``lm`` policy this is Direct prompting (the pretrained model with the ReAct-free prompt of
``proas.lm``); for the ``scorer`` it is the near-uniform initial policy. The figures are
exactly those of step 0 of an RL run with the same config (same policy seed, same validation
tasks, same validation seed and temperature). ``save`` writes the untrained weights as a run
directory so that ``proas eval``, ``proas serve`` and the probes can load them; as a run does, it
records absolute paths and, for an lm warm-started from a proas run, the source's structure, so
that it loads from any directory and never reads the source again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from proas.baselines.common import env_name, validation_ids, write_checkpoint_dir
from proas.envs import make_factory
from proas.errors import ProasError
from proas.train.config import Config, config_to_yaml, pin_tuned_defaults
from proas.train.loop import (
    ValResult,
    build_policy,
    val_seed,
    validate,
    write_run_config,
)
from proas.train.rundir import absolute_paths
from proas.train.warm_start import init_source_record

__all__ = ["direct_eval"]


def direct_eval(cfg: Config, *, tasks: int | None = None, temperature: float | None = None,
                seed: int | None = None, save: Path | None = None) -> tuple[ValResult, dict[str, Any]]:
    """Validate the untrained policy of ``cfg``; optionally save it as run directory ``save``.

    ``seed`` defaults to what the trainer uses for its step-0 validation (``val_seed(cfg.seed, 0)``).
    """
    if save is not None:
        # what it saves records them (paths, the per-env defaults as values): eval and RL from it
        # work from any directory, with its setting
        cfg = pin_tuned_defaults(absolute_paths(cfg))
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.train.threads)
    init_source = init_source_record(cfg) if save is not None else None
    policy = build_policy(cfg, cfg.seed)
    make = make_factory(cfg.env.name, cfg.env.options, config=True)
    env0 = make()
    name = env_name(cfg, env0)
    ids = validation_ids(cfg, env0)
    if tasks is not None:
        ids = ids[:tasks]
    if not ids:
        raise ProasError(f"env {name!r}: no validation tasks (env.fixed_val_set.enabled is false?)")
    if save is not None:
        if (save / "config.yaml").exists():
            raise ProasError(f"{save}: a run already lives here; choose another directory")
        save.mkdir(parents=True, exist_ok=True)
        write_run_config(save, cfg)
        write_checkpoint_dir(save / "best", config_yaml=config_to_yaml(cfg), policy=policy,
                             step=0, meta={"baseline": "direct"}, init_source=init_source)
    envs = [env0] + [make() for _ in range(len(ids) - 1)]
    res = validate(policy, envs, ids, seed=val_seed(cfg.seed, 0) if seed is None else seed,
                   temperature=cfg.policy.val_temperature if temperature is None else temperature,
                   max_steps=int(cfg.env.max_steps or env0.max_steps), env_name=name,
                   success_reward=cfg.env.success_reward)
    return res, {"env": cfg.env.name, "n": len(ids), "policy": cfg.policy.kind}
