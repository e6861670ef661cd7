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

__all__ = ["SECONDS_PER_STEP", "Estimate", "GridResult", "estimate", "plan", "run_grid", "run_status"]

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


#: rough wall seconds of one RL step of one run (one CPU thread; 16 tasks x 8 episodes, the
#: validation every 10 steps and the start included), by (env, policy kind), for a time estimate
#: before anything ran: household from the main job on this project's 2-core machine with other
#: jobs running (docs/training.md: 7.4-8.7 min per 150-step run); shop a quarter of that, as the
#: tuning runs' median cost per run was (results/heldout/README.md: household GRPO 239 s, shop
#: GiGPO 60 s). docs/experiments.md, "How long a study takes"
SECONDS_PER_STEP = {("household", "scorer"): 3.2, ("shop", "scorer"): 0.8}


@dataclass
class Estimate:
    """A grid's expected wall time before it starts (``estimate``)."""

    runs: int
    #: seconds of run time, all runs one after another (None: no figure for some run)
    run_seconds: float | None
    #: seconds of wall time at ``jobs`` runs at a time
    wall_seconds: float | None
    #: where each figure came from, one phrase per (env, policy)
    basis: list[str]
    #: SFT runs to go, not counted in the figures
    sft: int = 0

    def line(self, jobs: int) -> str:
        if self.runs + self.sft == 0:
            return "nothing to run"
        runs = f"{self.runs + self.sft} runs to go" + (f" ({self.sft} SFT runs, minutes each, not counted)"
                                                      if self.sft else "")
        if self.wall_seconds is None:
            return f"{runs}; no time estimate ({'; '.join(self.basis)})"
        return (f"{runs}, about {_duration(self.run_seconds)} of run time, "
                f"{_duration(self.wall_seconds)} at {jobs} at a time ({'; '.join(self.basis)})")


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


def estimate(study: Study, specs: list[RunSpec], out: Path, status: dict[str, str], jobs: int) -> Estimate:
    """The wall time the runs not yet done will take: each run's steps to go times the seconds
    a step of its env and policy takes, as measured in the results directory (the median of the
    steps its runs logged, ``time/step``) where it holds any, else ``SECONDS_PER_STEP``;
    spread over ``min(jobs, CPU cores)`` runs at a time. SFT runs (minutes) are not counted."""
    import statistics

    from proas.train.config import build_config

    todo = [s for s in specs if status.get(s.key) != DONE and s.command == "train"]
    sft = sum(status.get(s.key) != DONE and s.command != "train" for s in specs)
    kinds: dict[tuple[str, str], list[RunSpec]] = {}
    steps_left: dict[str, int] = {}
    for spec in todo:
        cfg = build_config(list(spec.overrides))
        kinds.setdefault((cfg.env.name, cfg.policy.kind), []).append(spec)
        logged = [int(r["step"]) for r in _logged(spec.run_dir(out)) if isinstance(r.get("step"), int)]
        steps_left[spec.key] = max(0, study.steps - max(logged, default=0))
    total, basis = 0.0, []
    for (env, kind), group in kinds.items():
        measured = [float(r["time/step"]) for s in specs if s.command == "train" and s.env == env
                    for r in _logged(s.run_dir(out)) if isinstance(r.get("time/step"), (int, float))]
        if len(measured) >= 5:
            per_step = statistics.median(measured)
            basis.append(f"{env} {kind}: {per_step:.1f} s a step, the median of {len(measured)} steps logged in {out}")
        elif (env, kind) in SECONDS_PER_STEP:
            per_step = SECONDS_PER_STEP[(env, kind)]
            basis.append(f"{env} {kind}: about {per_step:g} s a step, the documented figure")
        else:
            basis.append(f"{env} {kind}: no figure (no step of it logged in {out} yet)")
            return Estimate(len(todo), None, None, basis, sft)
        total += per_step * sum(steps_left[s.key] for s in group)
    parallel = max(1, min(jobs, os.cpu_count() or 1, len(todo) or 1))
    return Estimate(len(todo), total, total / parallel, basis, sft)


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
