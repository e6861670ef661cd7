"""The grid runner: a study's runs as parallel ``proas train`` processes, restartable at any time.

Each run lives at ``OUT/<env>/<row>/seed<N>/`` (a trainer run directory plus ``train.log``). The
runner looks at what is on disk before it starts anything:

- ``summary.json`` with at least the study's step budget: finished, skipped;
- ``config.yaml`` without that: interrupted (killed, machine gone, or a shorter budget), continued
  with ``proas train --resume`` (``train.steps`` raised to the budget where needed);
- nothing: started fresh.

A run directory whose ``config.yaml`` differs from what the study asks for (other than the step
budget) is an error before anything is launched, so two studies sharing a results directory can
share rows (GRPO, GRPO+ProAS) but never silently mix different settings under one name.

Runs are separate processes (one CPU thread each: the scorer policy is fastest single-threaded),
so ``--jobs`` can use every core of a large machine. A row that ``needs`` another (the distilled
ARG needs its teacher's graph) starts once that run has finished on the same env and seed.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from proas.errors import ProasError
from proas.experiments.datafiles import output_file
from proas.experiments.spec import RunSpec, Study, env_dir
from proas.fileio import atomic_write_text

__all__ = ["Estimate", "GridResult", "estimate", "measured_step_times", "plan", "run_grid", "run_status"]

NEW, PARTIAL, DONE = "new", "partial", "done"


def _finished_steps(run_dir: Path) -> int | None:
    import json

    path = run_dir / "summary.json"
    if not path.exists():
        return None
    try:
        return int(json.loads(path.read_text())["steps"])
    except (ValueError, KeyError, TypeError, OSError):
        return None


def _finished(spec: RunSpec, out: Path) -> bool:
    run_dir = spec.run_dir(out)
    if spec.command == "sft":
        return (run_dir / "summary.json").exists()
    return _finished_steps(run_dir) is not None


def _clear_partial_sft(run_dir: Path) -> None:
    """An interrupted SFT run starts over (it is short and has no checkpoint to resume from);
    its log is kept."""
    import shutil

    for p in run_dir.iterdir():
        if p.name == "train.log":
            continue
        shutil.rmtree(p) if p.is_dir() else p.unlink()


def run_status(spec: RunSpec, out: Path, steps: int) -> str:
    """``done``, ``partial`` or ``new``; raises when the directory holds a different config."""
    from proas.train.config import build_config, same_setting
    from proas.train.loop import load_run_config

    run_dir = spec.run_dir(out)
    if not (run_dir / "config.yaml").exists():
        return NEW
    on_disk = load_run_config(run_dir)
    wanted = build_config(list(spec.overrides))
    if not same_setting(on_disk, wanted):
        raise ProasError(f"{run_dir}: holds a run with another config than study {spec.study!r} asks for "
                         f"(row {spec.row!r}); move it away or use another --out")
    if spec.command == "sft":  # SFT has no step budget and no resume: finished or restarted
        return DONE if _finished(spec, out) else PARTIAL
    done = _finished_steps(run_dir)
    return DONE if done is not None and done >= steps else PARTIAL


#: a run's step time counts once it has logged this many steps (a validation, every 10, included)
MIN_STEPS_MEASURED = 10


@dataclass
class Estimate:
    """A grid's expected wall time before it starts (``estimate``)."""

    runs: int
    #: seconds of run time, all runs one after another (None: no measured figure for some run)
    run_seconds: float | None
    #: seconds of wall time at ``parallel`` runs at a time
    wall_seconds: float | None
    #: where each figure came from, one phrase per (env, policy)
    basis: list[str]
    #: SFT runs to go, not counted in the figures
    sft: int = 0
    #: runs at a time: ``--jobs``, at most the CPU cores and the runs to go
    parallel: int = 1

    def line(self) -> str:
        if self.runs + self.sft == 0:
            return "nothing to run"
        runs = f"{self.runs + self.sft} runs to go" + (f" ({self.sft} SFT runs, minutes each, not counted)"
                                                      if self.sft else "")
        if self.wall_seconds is None:
            return f"{runs}; no time estimate ({'; '.join(self.basis)})"
        return (f"{runs}, about {_duration(self.run_seconds)} of run time, "
                f"{_duration(self.wall_seconds)} at {self.parallel} at a time ({'; '.join(self.basis)})")


def _duration(seconds: float | None) -> str:
    seconds = float(seconds or 0.0)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _logged(run_dir: Path) -> list[dict]:
    from proas.train.checkpoint import read_metrics

    try:
        return read_metrics(run_dir / "metrics.jsonl")
    except ProasError:  # a damaged file gives no figure; resuming that run will say what is wrong
        return []


def _run_kind(run_dir: Path) -> tuple[str, str] | None:
    """(env, policy kind) of the run its ``config.yaml`` records, read as plain YAML (the full
    config check costs tens of milliseconds a run); None when it cannot be read."""
    import yaml

    try:
        data = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
        return str(data["env"]["name"]), str(data["policy"]["kind"])
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError):
        return None


def _seconds_per_step(records: list[dict]) -> float | None:
    """A run's wall seconds per RL step so far: the run's wall time (start-up and validations
    included, ``time/wall``) over the steps it logged; the sum of ``time/step`` where an older
    run has no wall time. None before ``MIN_STEPS_MEASURED`` steps."""
    steps = [r for r in records if isinstance(r.get("step"), int) and r["step"] > 0]
    if not steps or steps[-1]["step"] < MIN_STEPS_MEASURED:
        return None
    last = steps[-1]
    wall = last.get("time/wall")
    if isinstance(wall, (int, float)) and wall > 0:
        return float(wall) / last["step"]
    times = [float(r["time/step"]) for r in steps if isinstance(r.get("time/step"), (int, float))]
    return sum(times) / len(times) if times else None


def measured_step_times(out: Path) -> dict[tuple[str, str], tuple[list[float], int]]:
    """Per (env, policy kind), the seconds per step of every run under ``out``
    (``OUT/<env>/<row>/seed<N>/``, whatever study made it) that has logged enough steps, and how
    many of those runs have finished."""
    found: dict[tuple[str, str], tuple[list[float], int]] = {}
    for metrics in sorted(Path(out).glob("*/*/seed*/metrics.jsonl")):
        run_dir = metrics.parent
        kind = _run_kind(run_dir)
        per_step = _seconds_per_step(_logged(run_dir)) if kind is not None else None
        if per_step is None:
            continue
        times, finished = found.get(kind, ([], 0))
        times.append(per_step)
        found[kind] = (times, finished + (_finished_steps(run_dir) is not None))
    return found


@functools.lru_cache(maxsize=None)
def _spec_kind(overrides: tuple[str, ...]) -> tuple[str, str]:
    """(env, policy kind) of a run's overrides (cached: the runner asks again as runs finish)."""
    from proas.train.config import build_config

    cfg = build_config(list(overrides))
    return cfg.env.name, cfg.policy.kind


def estimate(study: Study, specs: list[RunSpec], out: Path, status: dict[str, str], jobs: int) -> Estimate:
    """The wall time the runs not yet done will take: each run's steps to go times the seconds
    a step of its env and policy takes, the median over the runs of that env and policy
    measured in the results directory (``measured_step_times``); spread over ``min(jobs, CPU
    cores, runs to go)`` runs at a time. With no measured run of some env and policy there is no
    figure, and the line says so; the runner gives one once a run has finished. SFT runs
    (minutes) are not counted."""
    import statistics

    todo = [s for s in specs if status.get(s.key) != DONE and s.command == "train"]
    sft = sum(status.get(s.key) != DONE and s.command != "train" for s in specs)
    parallel = max(1, min(jobs, os.cpu_count() or 1, len(todo) or 1))
    kinds: dict[tuple[str, str], list[RunSpec]] = {}
    steps_left: dict[str, int] = {}
    for spec in todo:
        kinds.setdefault(_spec_kind(spec.overrides), []).append(spec)
        logged = [int(r["step"]) for r in _logged(spec.run_dir(out)) if isinstance(r.get("step"), int)]
        steps_left[spec.key] = max(0, study.steps - max(logged, default=0))
    measured = measured_step_times(out) if kinds else {}
    total, basis, missing = 0.0, [], []
    for (env, kind), group in kinds.items():
        times, finished = measured.get((env, kind), ([], 0))
        if not times:
            missing.append(f"{env} {kind}")
            continue
        per_step = statistics.median(times)
        basis.append(f"{env} {kind}: {per_step:.2g} s a step, the median of {len(times)} runs' step times "
                     f"in {out} ({finished} finished)")
        total += per_step * sum(steps_left[s.key] for s in group)
    if missing:
        basis.append(f"no measured step times yet for {', '.join(missing)} in {out}: an estimate follows "
                     f"once a run has logged {MIN_STEPS_MEASURED} steps")
        return Estimate(len(todo), None, None, basis, sft, parallel)
    return Estimate(len(todo), total, total / parallel, basis, sft, parallel)


def plan(study: Study, specs: list[RunSpec], out: Path) -> dict[str, str]:
    """The status of every run, checked before anything starts."""
    return {s.key: run_status(s, out, study.steps) for s in specs}


@dataclass
class GridResult:
    done: list[str]
    skipped: list[str]
    failed: list[str]
    #: runs stopped at the time limit (or not started by then); the next invocation resumes them
    stopped: list[str] = field(default_factory=list)


def _command(spec: RunSpec, out: Path, status: str, steps: int) -> list[str]:
    run_dir = spec.run_dir(out)
    if spec.command == "sft":
        return [sys.executable, "-m", "proas", "sft", *spec.overrides, *spec.args, "--run-dir", str(run_dir)]
    base = [sys.executable, "-m", "proas", "train"]
    if status == NEW:
        return base + list(spec.overrides) + ["--run-dir", str(run_dir)]
    return base + ["--resume", str(run_dir), f"train.steps={steps}"]


def run_grid(study: Study, specs: list[RunSpec], out: Path, *, jobs: int = 1,
             log: Callable[[str], None] = print, poll_s: float = 0.5,
             time_limit: float | None = None) -> GridResult:
    """Run every spec not yet finished, ``jobs`` at a time; return what finished and what failed.

    With ``time_limit`` (seconds), runs still going then are terminated (each keeps its last
    checkpoint, every ``train.save_every`` steps) and nothing new starts: a fixed slot of machine
    time is used to the end, and the next invocation resumes where this one stopped.
    """
    deadline = None if time_limit is None else time.monotonic() + time_limit
    stopped: list[str] = []
    out = Path(out).resolve()
    status = plan(study, specs, out)
    (out / "studies").mkdir(parents=True, exist_ok=True)
    if study.source and Path(study.source).is_file():
        atomic_write_text(output_file(out / "studies", f"{study.name}.yaml"),
                          Path(study.source).read_text(encoding="utf-8"))
    skipped = [s.key for s in specs if status[s.key] == DONE]
    pending = [s for s in specs if status[s.key] != DONE]
    by_key = {s.key: s for s in specs}
    finished: set[str] = set(skipped)
    failed: list[str] = []
    done: list[str] = []
    running: dict[str, tuple[subprocess.Popen, object]] = {}
    log(f"{study.name}: {len(specs)} runs, {len(skipped)} finished already, "
        f"{sum(status[s.key] == PARTIAL for s in pending)} to resume, "
        f"{sum(status[s.key] == NEW for s in pending)} to start; {jobs} at a time")
    child_env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")

    def dep_keys(s: RunSpec) -> list[str]:
        return [f"{env_dir(s.env)}/{d}/seed{s.seed}" for d in s.needs]

    # a `kill` (SIGTERM) or a closed terminal (SIGHUP) must not leave children training unseen
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, _on_stop_signal) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        while pending or running:
            if deadline is not None and time.monotonic() >= deadline:
                _stop_all(running)
                stopped = sorted(running) + [s.key for s in pending]
                log(f"  time limit: stopped {len(running)} running, {len(pending)} not started; run again to resume")
                running.clear()
                pending.clear()
                break
            # a run whose dependency failed (or is not part of this grid and not finished) fails too
            for s in list(pending):
                deps = dep_keys(s)
                if any(d in failed or (d not in by_key and not _dep_done(out, d, study.steps)) for d in deps):
                    pending.remove(s)
                    failed.append(s.key)
                    log(f"  failed {s.key}: a run it needs did not finish")
            for s in list(pending):
                if len(running) >= jobs:
                    break
                if not all(d in finished or (d not in by_key and _dep_done(out, d, study.steps))
                           for d in dep_keys(s)):
                    continue
                pending.remove(s)
                run_dir = s.run_dir(out)
                run_dir.mkdir(parents=True, exist_ok=True)
                st = run_status(s, out, study.steps)
                if s.command == "sft" and st == PARTIAL:
                    _clear_partial_sft(run_dir)
                fh = open(run_dir / "train.log", "a", encoding="utf-8")
                proc = subprocess.Popen(_command(s, out, st, study.steps), stdout=fh, stderr=subprocess.STDOUT,
                                        env=child_env, cwd=str(out))
                running[s.key] = (proc, fh)
                log(f"  {'resume' if st == PARTIAL else 'start '} {s.key}")
            for key, (proc, fh) in list(running.items()):
                rc = proc.poll()
                if rc is None:
                    continue
                fh.close()
                del running[key]
                if rc == 0 and _finished(by_key[key], out):
                    finished.add(key)
                    done.append(key)
                    log(f"  done   {key}")
                    rest = [by_key[k] for k in running] + pending
                    if rest:  # the figure, from the step times measured so far
                        log(f"  to go: {estimate(study, rest, out, {}, jobs).line()}")
                else:
                    failed.append(key)
                    log(f"  failed {key} (exit {rc}; see {by_key[key].run_dir(out) / 'train.log'})")
            if running:
                time.sleep(poll_s)
            elif pending and not any(all(d in finished for d in dep_keys(s)) for s in pending):
                for s in pending:  # nothing runnable is left: unmet dependencies
                    failed.append(s.key)
                    log(f"  failed {s.key}: a run it needs did not finish")
                pending.clear()
    except BaseException:
        _stop_all(running)
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return GridResult(done=done, skipped=skipped, failed=failed, stopped=stopped)


class Stopped(ProasError):
    """The runner was told to stop (SIGTERM, SIGHUP); its running children were stopped first."""


def _on_stop_signal(signum, frame):  # noqa: ARG001 - signal handler signature
    raise Stopped(f"stopped by {signal.Signals(signum).name}: the running runs were stopped with their "
                  "checkpoints; run the same command again to resume")


def _dep_done(out: Path, key: str, steps: int) -> bool:
    env, row, seed = key.split("/")
    done = _finished_steps(out / env / row / seed)
    return done is not None and done >= steps


def _stop_all(running: dict) -> None:
    """Terminate every running child (SIGTERM, then SIGKILL after 30 s) and close its log."""
    for proc, _ in running.values():
        proc.terminate()
    for proc, fh in running.values():
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        fh.close()
