"""`proas schedule make | make-tuning-val | verify`: the task sets of this package from the command
line.

The env is built by name through ``proas.envs.make`` (the env registry). A factory returns an
object with ``task_ids(split)`` (the env protocol); ``"train"`` is the pool
schedules are drawn from and ``"valid"`` the fixed validation set. An optional attribute
``taskset_source`` (str) says where the ids come from and is recorded in the manifests.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

from proas import envs, tasksets
from proas.errors import ProasError
from proas.ranges import integer, seed
from proas.termtext import printable


def cmd_make(args: argparse.Namespace) -> int:
    env = envs.make(args.env)
    source = str(getattr(env, "taskset_source", f"{args.env}.task_ids"))
    val_ids = list(env.task_ids("valid"))
    train_ids = list(env.task_ids("train"))
    per_step = args.per_step if args.per_step is not None else (128 if args.ppo else 16)
    # the validation set is written by make_schedule, once every input is checked and the
    # schedule drawn: a refused option leaves nothing behind (by default in the shipped data)
    out_dir = tasksets.make_schedule(
        args.env,
        train_ids,
        seed=args.seed,
        steps=args.steps,
        per_step=per_step,
        ppo=args.ppo,
        root=args.out,
        val_ids=val_ids,
        source=source,
        made_by=_command_line(args),
    )
    val_path = tasksets.val_set_path(args.env, args.out)
    sched = tasksets.load_schedule(out_dir)
    print(f"validation set: {val_path} ({len(val_ids)} tasks)")
    print(f"schedule: {out_dir} ({len(sched.steps)} steps x {sched.per_step} tasks, seed {args.seed}); verified")
    return 0


def tuning_splits() -> dict[str, str]:
    """Each registered env's tuning split (``proas.envs.EnvSpec.tuning_split``): a split that
    neither the training schedules nor the evaluation validation set (``valid``) draws from."""
    return {spec.name: spec.tuning_split for spec in envs.ENVS.values() if spec.tuning_split}


def cmd_make_tuning_val(args: argparse.Namespace) -> int:
    """The tuning validation set: ``--size`` tasks of the env's tuning split, drawn with
    ``--draw-seed`` (all of them when the split is smaller), disjoint from the training pool and
    from the evaluation validation set, both checked here."""
    tuning = tuning_splits()
    if args.env not in tuning:
        raise ProasError(f"no tuning split for env {args.env!r}; known: {sorted(tuning)}")
    if args.size <= 0:
        raise ProasError(f"--size must be positive, got {args.size}")
    env = envs.make(args.env)
    split = tuning[args.env]
    pool = sorted(set(env.task_ids(split)))
    shared = (set(pool) & set(env.task_ids("train"))) | (set(pool) & set(env.task_ids("valid")))
    if shared:
        raise ProasError(f"{args.env} split {split!r} shares task {sorted(shared)[0]!r} with train or valid")
    ids = sorted(random.Random(f"proas-tuning:{args.draw_seed}").sample(pool, k=min(args.size, len(pool))))
    source = (f"{getattr(env, 'taskset_source', args.env)}; tuning = {len(ids)} of the {len(pool)} tasks of "
              f"split {split!r}, drawn with random.Random('proas-tuning:{args.draw_seed}'), sorted")
    out = Path(args.out) if args.out else tasksets.tuning_val_set_path(args.env)
    path = tasksets.make_val_set(args.env, ids, source=source, path=out, kind="tuning_val_set")
    print(f"tuning validation set: {path} ({len(ids)} tasks of split {split!r})")
    return 0


def _command_line(args: argparse.Namespace) -> str:
    parts = ["proas schedule make", f"--env {args.env}", f"--seed {args.seed}"]
    if args.ppo:
        parts.append("--ppo")
    if args.steps != 150:
        parts.append(f"--steps {args.steps}")
    if args.per_step is not None:
        parts.append(f"--per-step {args.per_step}")
    return " ".join(parts)


def cmd_verify(args: argparse.Namespace) -> int:
    path = Path(args.path)
    # by name, not by is_file: a missing or FIFO validation set is named as one, not as a schedule
    if path.name.endswith(".jsonl") and path.name != tasksets.SCHEDULE_FILE and not path.is_dir():
        val = tasksets.load_val_set(path=path)
        print(f"ok: validation set {printable(val.path, newlines=False)}: {len(val.task_ids)} unique tasks, "
              f"sha256 {val.sha256}")
        return 0
    sched = tasksets.load_schedule(path)
    m = sched.manifest
    print(
        printable(f"ok: schedule {sched.path}: env {sched.env}, seed {sched.seed}, {len(sched.steps)} steps x "
                  f"{sched.per_step} tasks; hashes match; disjoint from {m['val_set']['path']}", newlines=False)
    )
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("schedule", help="make or verify fixed training schedules and validation sets")
    ssub = p.add_subparsers(dest="schedule_command", metavar="COMMAND")
    ssub.required = True
    mk = ssub.add_parser("make", help="write the validation set and a training schedule for one env and seed")
    mk.add_argument("--env", required=True, metavar="ENV", help=f"environment: {', '.join(envs.names())}")
    mk.add_argument("--seed", type=seed(), required=True, help="schedule seed (the paper uses 0, 1, 2)")
    mk.add_argument("--ppo", action="store_true", help="PPO schedule: 128 task slots a step, under fix_train_set_ppo/")
    mk.add_argument("--steps", type=integer("[1, 2**20]"), default=150, help="RL steps (default 150)")
    mk.add_argument("--per-step", type=integer("[1, 2**16]"),
                    default=None, help="tasks a step (default 16, or 128 with --ppo)")
    mk.add_argument("--out", default=None, metavar="DIR",
                    help="data root to write under (default: the package's shipped data)")
    mk.set_defaults(func=cmd_make)
    tv = ssub.add_parser("make-tuning-val", help="write a tuning validation set (tasks no study evaluates on)")
    tv.add_argument("--env", required=True, metavar="ENV", help=f"environment: {', '.join(tuning_splits())}")
    tv.add_argument("--size", type=integer("[1, 2**20]"),
                    default=128, help="tasks (default 128; all of a smaller split)")
    tv.add_argument("--draw-seed", type=seed(), default=0, help="seed of the draw from the split (default 0)")
    tv.add_argument("--out", default=None, metavar="FILE",
                    help="the .jsonl to write (default: the package's tuning_val_set/ENV.jsonl)")
    tv.set_defaults(func=cmd_make_tuning_val)
    vf = ssub.add_parser("verify", help="check a schedule directory or a validation .jsonl (hashes, disjointness)")
    vf.add_argument("path", metavar="PATH", help="a schedule directory or a validation set's .jsonl")
    vf.set_defaults(func=cmd_verify)
