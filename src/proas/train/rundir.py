"""A run directory's parts checked against each other before ``--resume`` continues it, and the
paths a new run records.

A run directory holds four records of the same run: ``config.yaml``, ``metrics.jsonl``, the
resumable checkpoints and ``best/``. A crash leaves them in a known relation (a kill can come
between any two writes), and ``check_resume`` accepts exactly that relation:

- ``metrics.jsonl`` holds one record per step, steps ``0, 1, ..., S`` in this order up to the
  step S of the checkpoint resumed from (each record is written before its step's checkpoint);
  after them only records of later steps, which a kill left behind the checkpoint and which the
  resumed run writes again: dropping them is the one repair, made atomically, with a notice;
- the best validation SR that those records log is the one the checkpoint records;
- ``config.yaml`` describes the same run as the checkpoint's recorded config (``same_setting``:
  the step budget, the progress bar and where the shipped task sets lie may differ);
- ``best/`` verifies and belongs to the same run; when it is missing and ``best.old`` is there
  (a kill between the two renames of ``checkpoint.replace_checkpoint``), ``best.old`` is the
  best so far and is renamed back, if it verifies.

Anything else (records missing, repeated or out of order before the checkpoint's step, a file
edited or deleted, a ``config.yaml`` changed after the run started, a ``state.pt`` of another
structure) is refused with one line naming the file and the problem, before anything is
written. Such a run would continue with steps missing from its history, a summary whose best
disagrees with ``best/``, or two configs mixed in one run.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from proas.errors import ProasError
from proas.fileio import atomic_write_jsonl
from proas.policies.base import HF_FILES, POLICY_FILES
from proas.train import checkpoint as ckpt
from proas.train.config import Config, config_from_yaml, pin_tuned_defaults, same_setting, shipped_relative

__all__ = ["ResumePoint", "absolute_paths", "apply_repairs", "check_resume", "check_state"]

METRICS_FILE = "metrics.jsonl"


@dataclass
class ResumePoint:
    """What ``check_resume`` found: the checkpoint to resume from and the repairs to make."""

    #: the checkpoint resumed from; None when the run was killed before its first one
    checkpoint: Path | None
    #: its state (tensors included), its structure checked (``check_state``)
    state: dict[str, Any] | None
    #: its step; -1 without a checkpoint
    step: int
    #: the metrics records kept: steps 0..step
    history: list[dict[str, Any]] = field(default_factory=list)
    #: the steps of the records dropped (logged after the checkpoint)
    dropped: list[int] = field(default_factory=list)
    #: rename ``best.old`` back to ``best/``
    restore_best: bool = False


def check_resume(run_dir: Path, cfg: Config, warn=None) -> ResumePoint:
    """Check that ``run_dir``'s metrics, config (``cfg``, read from its ``config.yaml``) and
    checkpoints agree; return where to resume. Reads only: a disagreement is a one-line
    ``ProasError`` and nothing is written (``apply_repairs`` makes the repairs)."""
    metrics_path = run_dir / METRICS_FILE
    rows = ckpt.read_metrics(metrics_path)
    latest = ckpt.latest_checkpoint(run_dir, warn)
    if latest is None:
        # killed before the first checkpoint: start over, unless steps were logged (and their
        # checkpoints since lost): starting over would silently discard them
        logged = [r["step"] for r in rows]
        if any(k > 0 for k in logged):
            raise ProasError(f"{run_dir}: metrics reach step {max(logged)} but no checkpoint is left to resume from "
                             f"({ckpt.CHECKPOINTS}/ is empty)")
        return ResumePoint(None, None, -1, [], logged)
    state = ckpt.load_state(latest)
    where = latest / ckpt.STATE_FILE
    check_state(state, where)
    step = state["step"]
    history, dropped = _check_metrics(metrics_path, rows, step, latest.name)
    _check_config(run_dir, cfg, state, f"checkpoint {latest.name}")
    logged_best = max((r["val/sr"] for r in history if _is_number(r.get("val/sr"))), default=-1.0)
    if "best_sr" in state and float(state["best_sr"]) != float(logged_best):
        raise ProasError(f"{metrics_path}: its best validation SR up to step {step} is {_sr(logged_best)}, but "
                         f"checkpoint {latest.name} records {_sr(state['best_sr'])}: the file was changed after "
                         "it was written; restore it or start a new run")
    restore = _check_best(run_dir, cfg, state, history)
    return ResumePoint(latest, state, step, history, dropped, restore)


def apply_repairs(run_dir: Path, point: ResumePoint, log) -> list[dict[str, Any]]:
    """Make ``point``'s repairs (``best.old`` back to ``best/``; the metrics records logged after
    the checkpoint dropped, atomically), each with a one-line notice to ``log``; return the
    metrics records kept."""
    if point.restore_best:
        os.replace(run_dir / ckpt.BEST_OLD, run_dir / ckpt.BEST)
        log(f"{run_dir / ckpt.BEST}: restored from {ckpt.BEST_OLD} (a kill while the best checkpoint was replaced "
            "had left best/ missing)")
    path = run_dir / METRICS_FILE
    if point.dropped or path.exists():
        atomic_write_jsonl(path, point.history)
    if point.dropped:
        after = (f"after checkpoint step {point.step}" if point.checkpoint is not None
                 else "before the run's first checkpoint")
        log(f"{path}: dropped the records of {_steps(point.dropped)}, logged {after}; they are run again")
    return point.history


# --------------------------------------------------------------------------- the parts


def _check_metrics(path: Path, rows: list[dict[str, Any]], step: int,
                   name: str) -> tuple[list[dict[str, Any]], list[int]]:
    """``(records kept, steps dropped)``: records 0..step must be steps 0..step in order; every
    later one must be of a later step."""
    if not path.exists():
        raise ProasError(f"{path} is missing, but checkpoint {name} is at step {step}: the run's history is "
                         "lost; restore the file or start a new run")
    steps = [r["step"] for r in rows]
    for i, k in enumerate(steps[: step + 1]):
        if k == i:
            continue
        if k < i:
            first = steps.index(k) + 1
            problem = f"step {k} is logged twice (lines {first} and {i + 1})"
        else:
            problem = f"line {i + 1} holds step {k}, so step{'s' if k > i + 1 else ''} {_range(i, k - 1)} " \
                      f"{'are' if k > i + 1 else 'is'} missing"
        raise ProasError(f"{path}: {problem}, before checkpoint {name} at step {step}; the file was damaged after "
                         "it was written (resuming would lose or repeat steps); restore it or start a new run")
    if len(rows) <= step:
        last = f"ends at step {steps[-1]}" if rows else "is empty"
        raise ProasError(f"{path}: {last}, but checkpoint {name} is at step {step}: the records of "
                         f"{_steps(list(range(len(rows), step + 1)))} are missing (the file was truncated); restore "
                         "it or start a new run")
    later = rows[step + 1:]
    for n, r in enumerate(later, step + 2):
        if r["step"] <= step:
            raise ProasError(f"{path}: step {r['step']} is logged twice (lines {r['step'] + 1} and {n}); the file "
                             "was damaged after it was written; restore it or start a new run")
    return rows[: step + 1], [r["step"] for r in later]


def _check_config(run_dir: Path, cfg: Config, state: dict[str, Any], what: str) -> None:
    text = state.get("config")
    if not isinstance(text, str):
        return  # a checkpoint that records no config (none the trainer writes): nothing to compare
    recorded = config_from_yaml(text, where=f"{what} (its recorded config)")
    if not same_setting(cfg, recorded):
        raise ProasError(f"{run_dir / 'config.yaml'}: differs from the config recorded in {what} "
                         f"({_first_difference(recorded, cfg)}): it was changed after the run started; "
                         "restore it (only train.steps may change, as an override of --resume) or start a new run")


def _check_best(run_dir: Path, cfg: Config, state: dict[str, Any], history: list[dict[str, Any]]) -> bool:
    """Whether ``best.old`` is to be renamed back; a ``best/`` that fails verification, belongs to
    another config or disagrees with the checkpoint is refused."""
    best, old = run_dir / ckpt.BEST, run_dir / ckpt.BEST_OLD
    restore = False
    if not best.exists():
        if not old.is_dir():
            return False  # no best yet, or removed by hand: the next validation that beats the best writes one
        problem = ckpt.verify_checkpoint(old)
        if problem is not None:
            raise ProasError(f"{best} is missing and {old.name}, left by a kill while best/ was replaced, fails "
                             f"verification ({problem}): the run's best checkpoint is lost; move {old.name} away "
                             "to resume without it (the next validation that beats the best writes a new one)")
        best, restore = old, True
    else:
        problem = ckpt.verify_checkpoint(best)
        if problem is not None:
            raise ProasError(f"{best}: fails verification ({problem}): the run's best checkpoint is damaged; move it "
                             "away to resume without it (the next validation that beats the best writes a new one)")
    plain = ckpt.load_plain_state(best)
    _check_config(run_dir, cfg, plain, f"{best.name}/")
    b, sr = plain.get("step"), plain.get("best_sr")
    step, ckpt_sr = state["step"], state.get("best_sr")
    if not (_is_step(b) and _is_number(sr) and _is_number(ckpt_sr)) or b > step:
        return restore  # from after the checkpoint: the resumed run writes it again as it reaches that step
    logged = history[b].get("val/sr")
    if float(sr) != float(ckpt_sr) or not _is_number(logged) or float(logged) != float(sr):
        raise ProasError(f"{best}: holds step {b} at validation SR {_sr(sr)}, but {METRICS_FILE} logs "
                         f"{_sr(logged)} at that step and the checkpoint resumed from records a best of "
                         f"{_sr(ckpt_sr)}: {best.name}/ is not this run's best; restore it or move it away")
    return restore


# --------------------------------------------------------------------------- state.pt


def check_state(state: Any, where: Path | str) -> None:
    """Refuse (one line) a trainer checkpoint state of another structure than ``Trainer.state``
    writes, before any of it is applied: the run would otherwise end in a traceback part-way
    through restoring it, or restore garbage."""

    def bad(key: str, expected: str) -> ProasError:
        return ProasError(f"{where}: not a trainer checkpoint: {key} is not {expected}")

    if not isinstance(state, dict):
        raise ProasError(f"{where}: not a trainer checkpoint (its state is not a mapping)")
    if not _is_step(state.get("step")):
        raise bad("'step'", "an integer >= 0")
    if not isinstance(state.get("config"), str):
        raise bad("'config'", "the run's config (YAML text)")
    if state.get(POLICY_FILES) == HF_FILES:
        pass  # an lm's weights: the Hugging Face files beside state.pt (checksummed with it)
    elif not _tensor_dict(state.get("policy")):
        raise bad("'policy'", "a mapping of names to tensors")
    opt = state.get("optimizer")
    if not (isinstance(opt, dict) and isinstance(opt.get("state"), dict) and isinstance(opt.get("param_groups"), list)):
        raise bad("'optimizer'", "an optimiser state")
    if state.get("critic") is not None and not _tensor_dict(state["critic"]):
        raise bad("'critic'", "a mapping of names to tensors")
    copt = state.get("critic_optimizer")
    if copt is not None and not (isinstance(copt, dict) and isinstance(copt.get("param_groups"), list)):
        raise bad("'critic_optimizer'", "an optimiser state")
    rng = state.get("rng_numpy")
    if not (isinstance(rng, dict) and isinstance(rng.get("bit_generator"), str) and isinstance(rng.get("state"), dict)):
        raise bad("'rng_numpy'", "a numpy generator state")
    t = state.get("rng_torch")
    if not (isinstance(t, torch.Tensor) and t.dtype == torch.uint8 and t.dim() == 1):
        raise bad("'rng_torch'", "torch's generator state (a byte tensor)")
    py = state.get("rng_python")
    if not (isinstance(py, tuple) and len(py) == 3 and isinstance(py[1], tuple)
            and all(isinstance(x, int) for x in py[1])):
        raise bad("'rng_python'", "Python's random state")
    if not _is_number(state.get("best_sr")):
        raise bad("'best_sr'", "a number")
    if "reference" in state and not _tensor_dict(state["reference"]):
        raise bad("'reference'", "a mapping of names to tensors")


def _tensor_dict(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items())


# --------------------------------------------------------------------------- paths


#: ``(section path, field)`` of every config field that names a file or directory read after
#: the start (task sets, a saved graph, the run or model a policy starts from)
_PATH_FIELDS = (("env.fixed_train_set", "path"), ("env.fixed_val_set", "path"), ("algo.graph", "path"),
                ("policy.scorer", "init_from"), ("policy.lm", "init_from"), ("policy.lm", "model_path"),
                ("policy.lm", "tokenizer_path"))
_DATA_FIELDS = {("env.fixed_train_set", "path"), ("env.fixed_val_set", "path")}


def absolute_paths(cfg: Config) -> Config:
    """A copy of ``cfg`` whose relative paths are absolute, as a new run records them: a path
    that exists from here becomes absolute; a task set's path that does not is looked up under
    the shipped data (``tasksets.resolve_data_path``). A path found neither way is left as given
    (loading it gives the error), and so is a model name that is not a directory here. So
    ``--resume``, ``eval`` and ``serve`` work from any directory, and a warm start's source is
    named by where it was when the run started."""
    from proas.tasksets import default_root

    out = copy.deepcopy(cfg)
    for section_path, name in _PATH_FIELDS:
        section: Any = out
        for part in section_path.split("."):
            section = getattr(section, part)
        value = getattr(section, name)
        if not value:
            continue
        p = Path(value)
        if p.exists():
            setattr(section, name, os.path.abspath(p))
        elif (section_path, name) in _DATA_FIELDS and not p.is_absolute() and (default_root() / p).exists():
            setattr(section, name, str(default_root() / p))
    return out


# --------------------------------------------------------------------------- wording


def _first_difference(a: Config, b: Config) -> str:
    """The first key whose value differs between two configs, as ``key: a here, b there``."""

    def flat(obj: Any, prefix: str = "") -> dict[str, Any]:
        if dataclasses.is_dataclass(obj):
            out: dict[str, Any] = {}
            for f in dataclasses.fields(obj):
                out.update(flat(getattr(obj, f.name), f"{prefix}{f.name}."))
            return out
        if isinstance(obj, dict) and obj and all(isinstance(k, str) for k in obj):
            return {k: v for key, value in obj.items() for k, v in flat(value, f"{prefix}{key}.").items()}
        return {prefix[:-1]: obj}

    fa, fb = flat(pin_tuned_defaults(a)), flat(pin_tuned_defaults(b))  # an unset key as what it resolves to
    for key in list(fa) + [k for k in fb if k not in fa]:
        if key in ("train.steps", "train.progress") or fa.get(key) == fb.get(key):
            continue
        if (isinstance(fa.get(key), str) and isinstance(fb.get(key), str) and shipped_relative(fa[key]) is not None
                and shipped_relative(fa[key]) == shipped_relative(fb[key])):
            continue
        return f"{key}: {fa.get(key)!r} in the checkpoint, {fb.get(key)!r} in config.yaml"
    return "a value differs"


def _is_step(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _sr(value: Any) -> str:
    if not _is_number(value):
        return "nothing"
    return "none (no validation yet)" if value < 0 else f"{100 * float(value):.4g}%"


def _range(a: int, b: int) -> str:
    return str(a) if a == b else f"{a}-{b}"


def _steps(steps: list[int]) -> str:
    if not steps:
        return "no step"
    if steps == list(range(steps[0], steps[-1] + 1)):
        return f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"
    return "steps " + ", ".join(map(str, steps))
