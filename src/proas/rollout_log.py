"""The per-step rollout log: the format of ``RUN_DIR/rollouts/step_N.jsonl.gz``, writer and reader.

The trainer (``proas.train``) writes it and ``proas inspect`` and the probes read it, so it stands
on the floor below both, next to the data model it serialises (``proas.types``).

The trainer calls ``write_rollouts`` once per RL step, after ``compute_credit``; it writes
``RUN_DIR/rollouts/step_{N:06d}.jsonl.gz`` atomically (a run killed mid-write leaves the
previous files intact and no partial one). One line per trajectory: ``Trajectory.to_json()``
(so ``Trajectory.from_json`` still reads it), plus ``task_id``, ``step``, the trajectory's
``A_i`` (``traj_advantage``) and, in each step, the credit it got: ``rea``, ``pa``, ``fd``,
``base_advantage``, ``advantage``, ``uniform`` and the ``observation`` the action was taken on.

``read_rollouts`` loads one step's file back into ``LoggedTrajectory`` objects that also say,
per step, what the shaping did: MUI zeroed it (``masked``), APR up- or down-weighted it, or
it kept its base credit.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proas.errors import ProasError
from proas.fileio import atomic_open, open_regular
from proas.types import MAX_ABS_NUMBER, Trajectory, TrajectoryFormatError

__all__ = [
    "MAX_ROLLOUT_BYTES",
    "ROLLOUTS_DIR",
    "LoggedStep",
    "LoggedTrajectory",
    "RolloutLog",
    "list_rollout_steps",
    "read_rollouts",
    "rollout_path",
    "write_rollouts",
]

ROLLOUTS_DIR = "rollouts"
#: the most JSONL one step's rollout log may inflate to (a household step of 128 episodes is
#: about 3 MiB; an lm run's, with its prompts, more); a bigger one is refused before it is held
MAX_ROLLOUT_BYTES = 256 << 20
_NAME = re.compile(r"^step_(\d{6,})\.jsonl\.gz$")
_CREDIT_FIELDS = ("rea", "pa", "fd", "base_advantage", "advantage", "uniform")
#: relative tolerance when classifying a step's shaping (Ã_{i,t} against A_i)
_TOL = 1e-6


def rollout_path(run_dir: str | os.PathLike, step: int) -> Path:
    return Path(run_dir) / ROLLOUTS_DIR / f"step_{int(step):06d}.jsonl.gz"


def _observation(step, override: str | None) -> str | None:
    """What the policy saw when it chose the action: the caller's list, the env's own
    ``extra["observation"]``, the trainer's ``Context``, else the anchor (the raw observation)."""
    if override is not None:
        return str(override)
    extra = step.extra or {}
    if extra.get("observation") is not None:
        return str(extra["observation"])
    ctx_obs = getattr(extra.get("context"), "observation", None)
    if ctx_obs is not None:
        return str(ctx_obs)
    return step.anchor


def write_rollouts(
    run_dir: str | os.PathLike,
    step: int,
    trajectories: Sequence[Trajectory],
    credit,
    observations: Sequence[Sequence[str]] | None = None,
) -> Path:
    """Write the batch of RL step ``step`` and its credit; return the file written.

    Args:
        run_dir: the run directory; the file goes to ``rollouts/step_{step:06d}.jsonl.gz``.
        trajectories: the batch exactly as passed to ``compute_credit`` (same order).
        credit: the ``CreditResult`` of that call; the ``V(s_t)`` GAE used (``credit.values``) are
            logged as each step's ``value``.
        observations: optional per-trajectory, per-step observation texts; by default a step's
            ``extra["observation"]`` (else the trainer context's observation, else the anchor).
    """
    offsets = [int(x) for x in credit.offsets]
    if len(offsets) != len(trajectories) + 1:
        raise ValueError(f"write_rollouts: credit covers {len(offsets) - 1} trajectories, got {len(trajectories)}")
    if observations is not None and len(observations) != len(trajectories):
        raise ValueError(f"write_rollouts: {len(observations)} observation lists for {len(trajectories)} trajectories")
    cols = {name: getattr(credit, name) for name in _CREDIT_FIELDS}
    values = getattr(credit, "values", None)
    path = rollout_path(run_dir, step)
    # mtime=0: the same batch gives the same bytes
    with atomic_open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz:
        for i, traj in enumerate(trajectories):
            lo, hi = offsets[i], offsets[i + 1]
            if hi - lo != len(traj.steps):
                raise ValueError(
                    f"write_rollouts: trajectory {traj.trajectory!r} has {len(traj.steps)} steps, credit has {hi - lo}"
                )
            obs_i = observations[i] if observations is not None else None
            if obs_i is not None and len(obs_i) != len(traj.steps):
                raise ValueError(
                    f"write_rollouts: trajectory {traj.trajectory!r}: "
                    f"{len(obs_i)} observations for {len(traj.steps)} steps"
                )
            rec = traj.to_json()
            rec["task_id"] = str(traj.extra.get("task_id", traj.group))
            rec["step"] = int(step)
            rec["traj_advantage"] = float(credit.traj_advantage[lo]) if hi > lo else 0.0
            for t, (s, out) in enumerate(zip(traj.steps, rec["steps"])):
                k = lo + t
                if values is not None and "value" not in out:
                    out["value"] = float(values[k])  # where Step.to_json writes a recorded one
                out["rea"] = int(cols["rea"][k])
                out["pa"] = int(cols["pa"][k])
                out["fd"] = float(cols["fd"][k])
                out["base_advantage"] = float(cols["base_advantage"][k])
                out["advantage"] = float(cols["advantage"][k])
                out["uniform"] = bool(cols["uniform"][k])
                obs = _observation(s, obs_i[t] if obs_i is not None else None)
                if obs is not None:
                    out["observation"] = obs
            gz.write((json.dumps(rec, separators=(",", ":")) + "\n").encode("utf-8"))
    return path


# ---------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class LoggedStep:
    """One step as logged, with the credit it got.

    ``shaped`` is ``Ã_{i,t}`` (the advantage minus the estimator's step part ``B_{i,t}``) and
    ``weight`` is ``Ã_{i,t} / A_i`` (``None`` when ``A_i = 0``). ``kind`` says what the
    shaping did: ``masked`` (MUI zeroed a positive ``A_i``), ``up`` / ``down`` (APR scaled the
    penalty above / below ``A_i``; any weight other than 1), ``zeroed`` (a negative ``A_i``
    removed, e.g. by ``mask_pm``), or ``kept``.
    """

    t: int
    state: str
    action: str
    next_state: str
    error: bool
    observation: str | None
    rea: int
    pa: int
    fd: float
    base_advantage: float
    advantage: float
    uniform: bool
    traj_advantage: float

    @property
    def step_advantage(self) -> float:
        return self.base_advantage - self.traj_advantage

    @property
    def shaped(self) -> float:
        return self.advantage - self.step_advantage

    @property
    def weight(self) -> float | None:
        if self.traj_advantage == 0:
            return None
        return self.shaped / self.traj_advantage

    @property
    def kind(self) -> str:
        w = self.weight
        if w is None or abs(w - 1.0) <= _TOL:
            return "kept"
        if abs(w) <= _TOL:
            return "masked" if self.traj_advantage > 0 else "zeroed"
        return "up" if w > 1.0 else "down"


@dataclass(frozen=True)
class LoggedTrajectory:
    group: str
    trajectory: str
    task_id: str
    task_type: str | None
    reward: float
    success: bool
    traj_advantage: float
    steps: list[LoggedStep]

    def __len__(self) -> int:
        return len(self.steps)


@dataclass(frozen=True)
class RolloutLog:
    """One RL step's logged batch."""

    step: int
    path: Path
    trajectories: list[LoggedTrajectory]

    def groups(self) -> dict[str, list[LoggedTrajectory]]:
        out: dict[str, list[LoggedTrajectory]] = {}
        for t in self.trajectories:
            out.setdefault(t.group, []).append(t)
        return out


def list_rollout_steps(run_dir: str | os.PathLike) -> list[int]:
    """The RL steps that have a rollout log, ascending."""
    d = Path(run_dir) / ROLLOUTS_DIR
    if not d.is_dir():
        return []
    return sorted(int(m.group(1)) for p in d.iterdir() if (m := _NAME.match(p.name)))


def read_rollouts(run_dir: str | os.PathLike, step: int | None = None) -> RolloutLog:
    """Load the rollout log of ``step`` (default: the newest) of a run directory."""
    run = Path(run_dir)
    if not run.is_dir():
        raise ProasError(f"{run}: no such run directory")
    steps = list_rollout_steps(run)
    if not steps:
        raise ProasError(
            f"{run / ROLLOUTS_DIR}: no rollout logs (step_NNNNNN.jsonl.gz); is this a proas run directory?"
        )
    if step is None:
        step = steps[-1]
    elif step not in steps:
        raise ProasError(f"{run}: no rollout log for step {step}; logged steps: {_ranges(steps)}")
    path = rollout_path(run, step)
    try:
        # a regular file only: a FIFO in its place would block the read for ever; and never more
        # than MAX_ROLLOUT_BYTES inflated: a small gzip file can inflate to gigabytes
        with open_regular(path, follow_symlinks=True) as raw, gzip.open(raw, "rb") as fh:
            data = fh.read(MAX_ROLLOUT_BYTES + 1)
        if len(data) > MAX_ROLLOUT_BYTES:
            raise ProasError(f"{path}: inflates to more than {MAX_ROLLOUT_BYTES} bytes (the limit, "
                             "MAX_ROLLOUT_BYTES); refused")
        lines = data.decode("utf-8").splitlines()
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise ProasError(f"{path}: corrupt rollout log ({type(exc).__name__}: {exc})") from None
    trajs = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}: line {n}"
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
            raise ProasError(f"{where}: not JSON") from None
        trajs.append(_parse(obj, where))
    if not trajs:
        raise ProasError(f"{path}: empty rollout log")
    return RolloutLog(step=int(step), path=path, trajectories=trajs)


def _number(obj: dict[str, Any], key: str, where: str) -> float:
    val = obj.get(key)
    ok = not isinstance(val, bool) and isinstance(val, (int, float))
    try:
        ok = ok and math.isfinite(val) and abs(val) <= MAX_ABS_NUMBER
    except OverflowError:  # an integer too large for a float
        ok = False
    if not ok:
        shown = f"an integer of {_digits(val)} digits" if type(val) is int else repr(val)[:40]
        raise ProasError(f"{where}: field {key!r} must be a finite number of magnitude at most "
                         f"{MAX_ABS_NUMBER:g}, got {shown}")
    return float(val)


def _digits(n: int) -> int:
    """About how many decimal digits ``n`` has (``str`` refuses integers of over 4300 digits)."""
    return int(abs(n).bit_length() * 0.30103) + 1


def _parse(obj: Any, where: str) -> LoggedTrajectory:
    try:
        traj = Trajectory.from_json(obj, where)
    except TrajectoryFormatError as exc:
        raise ProasError(str(exc)) from None
    a_i = _number(obj, "traj_advantage", where)
    steps = []
    for t, (s, raw) in enumerate(zip(traj.steps, obj["steps"])):
        w = f"{where}, step {t}"
        nums = {k: _number(raw, k, w) for k in ("rea", "pa", "fd", "base_advantage", "advantage")}
        for k in ("rea", "pa"):
            if nums[k] not in (0.0, 1.0):
                raise ProasError(f"{w}: field {k!r} must be 0 or 1, got {raw[k]!r}")
        if not isinstance(raw.get("uniform"), bool):
            raise ProasError(f"{w}: field 'uniform' must be a boolean")
        observation = raw.get("observation")
        if observation is not None and not isinstance(observation, str):
            raise ProasError(f"{w}: field 'observation' must be a string")
        steps.append(
            LoggedStep(
                t=t,
                state=s.state,
                action=s.action,
                next_state=s.next_state,
                error=s.error,
                observation=observation,
                rea=int(nums["rea"]),
                pa=int(nums["pa"]),
                fd=nums["fd"],
                base_advantage=nums["base_advantage"],
                advantage=nums["advantage"],
                uniform=raw["uniform"],
                traj_advantage=a_i,
            )
        )
    task_id = obj.get("task_id", traj.group)
    if not isinstance(task_id, str):
        raise ProasError(f"{where}: field 'task_id' must be a string")
    return LoggedTrajectory(
        group=traj.group,
        trajectory=traj.trajectory,
        task_id=task_id,
        task_type=traj.task_type,
        reward=traj.reward,
        success=traj.success,
        traj_advantage=a_i,
        steps=steps,
    )


def _ranges(steps: list[int]) -> str:
    if len(steps) <= 8:
        return ", ".join(map(str, steps))
    return f"{', '.join(map(str, steps[:4]))}, ..., {', '.join(map(str, steps[-3:]))} ({len(steps)} in all)"
