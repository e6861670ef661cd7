"""``proas eval``: load a checkpoint and run it on the validation set."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from proas.envs import make_factory
from proas.termtext import safe_text
from proas.train.loop import (
    Trainer,
    ValResult,
    validate,
)
from proas.train.warm_start import load_policy

__all__ = ["evaluate_checkpoint", "print_val_table", "spread_over_types"]


def spread_over_types(ids: Sequence[str], types: Sequence[str], n: int) -> list[str]:
    """``n`` of ``ids`` spread evenly over their task types, deterministically.

    The types take turns in the order they first appear in ``ids``; each turn takes the type's
    next task in set order, and a type that has run out is skipped. So every type gets
    ``n // k`` or one more (k types) while it has tasks. The result keeps set order. The first
    ``n`` would do instead only for a set that is shuffled; the shipped household set is sorted
    by type, so its first 16 are all of one type.
    """
    by_type: dict[str, list[str]] = {}
    for tid, typ in zip(ids, types):
        by_type.setdefault(typ, []).append(tid)
    chosen: set[str] = set()
    queues = [list(v) for v in by_type.values()]
    while len(chosen) < min(n, len(ids)):
        for q in queues:
            if q and len(chosen) < n:
                chosen.add(q.pop(0))
    return [t for t in ids if t in chosen]


def evaluate_checkpoint(target: Path, *, tasks: int | None = None, temperature: float | None = None,
                        seed: int | None = None) -> tuple[ValResult, dict[str, Any]]:
    """Validate the policy of a run directory (best checkpoint, else latest) or checkpoint.

    ``seed`` seeds the sampling; None takes the seed of the run's own validation at the
    checkpoint's step (``val_seed``), so that the best checkpoint, on the run's validation tasks
    at its temperature, gives again the figure training reported for that step. Another seed
    draws other samples: a figure that differs by sampling alone (and, for the best checkpoint,
    one free of the choice of the best step, which favours a lucky draw).
    """
    # the checkpoint (best, else latest; best.old when a kill left best/ missing), its structure
    # checked, its policy built without reading a warm start's source again
    policy, cfg, directory, state = load_policy(target)
    make = make_factory(cfg.env.name, cfg.env.options, config=True)
    env0 = make()
    # the validation set the run used (fixed file, shipped set or the env's valid split)
    env_name = str(getattr(env0, "name", cfg.env.name))
    if tasks is not None:
        # ``tasks`` of the whole set (more or fewer than the run used), spread over task types
        cfg.env.fixed_val_set.size = sys.maxsize
        ids = Trainer._val_ids_for(cfg, env0, env_name)
        if tasks < len(ids):
            ids = spread_over_types(ids, [_task_type(env0, t) for t in ids], tasks)
    else:
        ids = Trainer._val_ids_for(cfg, env0, env_name)
    envs = [env0] + [make() for _ in range(len(ids) - 1)]
    from proas.train.loop import val_seed

    step = int(state.get("step", -1))
    run_seed = val_seed(cfg.seed, max(step, 0))
    res = validate(policy, envs, ids, seed=run_seed if seed is None else seed,
                   temperature=cfg.policy.val_temperature if temperature is None else temperature,
                   max_steps=int(cfg.env.max_steps or env0.max_steps),
                   env_name=str(getattr(env0, "name", cfg.env.name)), success_reward=cfg.env.success_reward)
    return res, {"checkpoint": directory, "step": step, "env": cfg.env.name, "n": len(ids),
                 "seed": run_seed if seed is None else seed, "run_seed": run_seed,
                 # what training reported for this checkpoint (the best one records it), and
                 # whether this evaluation repeats that validation exactly
                 "reported_sr": _reported_sr(directory, step),
                 "as_run": (seed is None or seed == run_seed) and tasks is None and temperature in (
                     None, cfg.policy.val_temperature)}


def _reported_sr(directory: Path, step: int) -> float | None:
    """The validation SR training logged for ``step``, as the checkpoint's ``meta.json``
    records it (the best checkpoint's); None when it records none."""
    import json

    try:
        meta = json.loads((Path(directory) / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    sr = meta.get("val/sr") if isinstance(meta, dict) and meta.get("step") == step else None
    return float(sr) if isinstance(sr, (int, float)) and not isinstance(sr, bool) else None


def _task_type(env: Any, task_id: str) -> str:
    """A task's type, read from a reset (the env protocol has no other way to ask)."""
    try:
        return str(env.reset(task_id)[1]["task_type"])
    except Exception:  # noqa: BLE001 - a task that cannot start is counted as failed by validation
        return "?"


def print_val_table(res: ValResult, title: str | None = None) -> None:
    """The per-task-type table ``proas eval`` prints, with the same columns."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for name, justify in (("task type", "left"), ("won", "right"), ("tasks", "right"), ("SR %", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for t, (won, total) in sorted(res.by_type.items()):
        table.add_row(safe_text(t, newlines=False), str(won), str(total), f"{100 * won / total:.1f}")  # env text
    won = sum(w for w, _ in res.by_type.values())
    total = sum(n for _, n in res.by_type.values())
    table.add_row("[bold]all", str(won), str(total), f"[bold]{100 * res.sr:.1f}")
    Console().print(table)
    print(f"TS (mean score x 100): {res.ts:.1f}   mean episode length: {res.steps:.1f}")
