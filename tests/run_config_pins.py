"""What every shipped study config's rows, and every run config kept under results/, resolve to:
the run config each row gives ``proas train`` (or ``proas sft``), every key with its effective
value (an unset key that resolves to a value, such as ``algo.clip_high``, as that value).

``tests/test_shipped_run_configs.py`` compares the current code's resolution with a snapshot
taken at commit e007177, before the trainer's defaults became the held-out study's tuned
setting (issue #45), so that a study that ran on the old defaults keeps running as it ran.

The snapshot was written against the code of that commit::

    git worktree add /tmp/old e007177
    PYTHONPATH=/tmp/old/src python3 tests/run_config_pins.py --root /tmp/old tests/shipped_run_configs.json

Only APIs that commit already had are used here, so it runs against both.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

#: unset keys that resolve to a value for the run (``unset_resolved``); compared as that value
RESOLVED_KEYS = ("algo.clip_high", "algo.kl_coef", "algo.dynamic_sampling", "algo.gigpo_mode",
                 "policy.scorer.optimizer", "policy.scorer.lr")
#: where the study configs that ran a study are kept, besides the shipped ones
STUDY_GLOBS = ("results/**/*.yaml", "scripts/heldout_grids/*.yaml")


def _flat(obj: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out.update(_flat(value, f"{prefix}{f.name}."))
        else:
            out[prefix + f.name] = value
    return out


def effective(cfg) -> dict[str, Any]:
    """``cfg`` as one flat mapping of every key to the value the run uses; shipped task sets as
    ``{data}/<path below proas/data>`` (the checkout's location is no part of the setting)."""
    from proas.train.config import shipped_relative, unset_resolved

    flat = _flat(cfg)
    resolved = unset_resolved(cfg)
    for key in RESOLVED_KEYS:
        if flat.get(key) is None and key in resolved:
            flat[key] = resolved[key]
    for key in ("env.fixed_train_set.path", "env.fixed_val_set.path"):
        rel = shipped_relative(flat.get(key))
        if rel is not None:
            flat[key] = "{data}/" + rel
    return json.loads(json.dumps(flat))  # tuples as lists, as the snapshot holds them


def _study_runs(study, where: str) -> dict[str, dict[str, Any]]:
    """Each runnable row of ``study`` on each of its envs, at its first seed."""
    from proas.tasksets import default_root
    from proas.train.config import build_config

    out = {}
    seed = study.seeds[0]
    for env in study.envs:
        for row in study.rows:
            if row.not_run or row.untrained_of or (row.envs is not None and env not in row.envs):
                continue
            items = study.resolve(row, env, seed, Path("/results"), default_root())
            out[f"{where}::{row.id}::{env}"] = effective(build_config(list(items)))
    return out


def snapshot(root: Path) -> dict[str, dict[str, Any]]:
    """Every row's and every kept run's effective config, keyed ``<source>::<row>::<env>``
    (a shipped study by name, a study file by file name) or ``run:<path under results/>``."""
    from proas.experiments import spec
    from proas.experiments.spec import load_study, shipped_studies
    from proas.train.config import config_from_yaml

    # load_study builds every row's config to check it, and _study_runs builds it again: the
    # check is skipped here (a row that does not build fails below just the same), halving the time
    checked, spec._check_overrides = spec._check_overrides, lambda study: None
    try:
        return _snapshot(root, load_study, shipped_studies, config_from_yaml)
    finally:
        spec._check_overrides = checked


def _snapshot(root, load_study, shipped_studies, config_from_yaml) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in shipped_studies():
        out.update(_study_runs(load_study(name), f"shipped:{name}"))
    for pattern in STUDY_GLOBS:
        for path in sorted(root.glob(pattern)):
            if path.name == "config.yaml":
                rel = path.relative_to(root / "results").as_posix()
                out[f"run:{rel}"] = effective(config_from_yaml(path.read_text(encoding="utf-8"), str(path)))
                continue
            key = f"file:{path.name}"
            runs = _study_runs(load_study(path), key)
            if any(k in out for k in runs):
                raise SystemExit(f"{path}: two study files share the name {path.name}")
            out.update(runs)
    return out


def default_effective() -> dict[str, Any]:
    from proas.train.config import build_config

    return effective(build_config([]))


def write(root: Path, path: Path) -> None:
    """The snapshot as ``{"base": <the default config>, "runs": {key: <keys that differ from it>}}``."""
    base = default_effective()
    runs = {key: {k: v for k, v in flat.items() if base.get(k) != v or k not in base}
            for key, flat in snapshot(root).items()}
    text = json.dumps({"base": base, "runs": runs}, indent=1, sort_keys=True) + "\n"
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}: {len(runs)} run configs", file=sys.stderr)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1], help="the checkout")
    args = ap.parse_args()
    write(args.root.resolve(), args.out)
