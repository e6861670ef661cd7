"""``proas train`` (the main job) and ``proas eval``."""

from __future__ import annotations

import argparse
from pathlib import Path

from proas.fileio import refuse_non_directory
from proas.ranges import integer, number, seed

TRAIN_HELP = """\
Train a policy with multi-turn group RL and ProAS credit.

With no arguments: household env, scorer policy, GRPO + ProAS at the held-out study's tuned
setting for the env (AdamW 0.001 on household), seed 0, 150 steps.
Override any config key with dotted key=value pairs, e.g.

  proas train env=household algo.estimator=gigpo algo.shaping=proas seed=1 \\
      env.fixed_train_set.path=path/to/schedule train.steps=50

Run `proas train --show-config` for every key and its default (docs/training.md explains them).
"""


def register(sub) -> None:
    p = sub.add_parser("train", help="train a policy (the main job)", description=TRAIN_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its latest checkpoint")
    p.add_argument("--run-dir", metavar="DIR", help="exact run directory (default: train.out_dir/<name>)")
    p.add_argument("--show-config", action="store_true", help="print the resolved config and exit")
    p.set_defaults(func=_train)

    e = sub.add_parser("eval", help="evaluate a trained policy on the validation set")
    e.add_argument("target", metavar="RUN_DIR|CHECKPOINT", help="a run directory (its best checkpoint) or a "
                   "checkpoint directory / state.pt")
    e.add_argument("--tasks", type=integer("[1, INT32]"),
                   default=None, help="number of validation tasks, spread evenly over the "
                   "task types of the whole validation set (the types take turns, each its next task in set "
                   "order); default: the run's own validation tasks")
    e.add_argument("--temperature", type=number("[0, F32]"),
                   default=None, help="sampling temperature (default: the run's "
                   "policy.val_temperature; 0 = greedy)")
    e.add_argument("--seed", type=seed(), default=None, help="seed of the evaluation's sampling (default: the seed "
                   "of the run's own validation at the checkpoint's step, which gives its figure again)")
    e.add_argument("--json", action="store_true", help="print the figures as JSON")
    e.set_defaults(func=_eval)


def _train(args) -> int:
    # the config is checked before the trainer (and torch, seconds to import) loads, so that a
    # typo is reported at once
    from proas.train.config import build_config, config_to_yaml, unset_resolved

    if args.resume:
        if args.overrides:
            # a --resume takes only train.steps and train.progress, both valid on the defaults:
            # whatever fails here would be refused below as well, only after the import
            build_config(args.overrides)
        from proas.train.loop import load_run_config, train

        base = load_run_config(Path(args.resume))
        cfg = build_config(args.overrides, base=base) if args.overrides else None
        train(cfg, resume=Path(args.resume))
        return 0
    cfg = build_config(args.overrides)
    if args.show_config:
        print(config_to_yaml(cfg), end="")
        unset = unset_resolved(cfg)
        if unset:
            print("# unset keys (null above): what each resolves to, or what the run does without it")
            for key, value in unset.items():
                print(f"#   {key}: {value}")
        return 0
    from proas.train.loop import train

    if args.run_dir:
        refuse_non_directory(args.run_dir, "--run-dir")
    train(cfg, run_dir=Path(args.run_dir) if args.run_dir else None)
    return 0


def _eval(args) -> int:
    import json

    from proas.train.evaluate import evaluate_checkpoint, print_val_table

    res, info = evaluate_checkpoint(Path(args.target), tasks=args.tasks, temperature=args.temperature,
                                    seed=args.seed)
    if args.json:
        print(json.dumps({"checkpoint": str(info["checkpoint"]), "step": info["step"], "seed": info["seed"],
                          **res.metrics("")}))
        return 0
    print(f"{info['checkpoint']} (step {info['step']}): {info['env']} validation, {info['n']} tasks")
    print_val_table(res, None)
    print(sampling_note(info))
    return 0


def sampling_note(info: dict) -> str:
    """One line on the sampling seed: whether this evaluation repeats the run's own validation
    of the step (and so its figure), and why a figure from another seed differs."""
    reported = info.get("reported_sr")
    said = "" if reported is None else f", where training reported {100 * reported:.1f}%"
    if info.get("as_run"):
        return (f"sampling seed {info['seed']}: the run's own validation of step {info['step']}{said}; "
                "--seed N draws other samples")
    return (f"sampling seed {info['seed']} (the run validated step {info['step']} with seed {info['run_seed']}{said}): "
            "figures from other seeds, tasks or temperatures differ by sampling, and the best step's "
            "own figure favours the draw that made it best")
