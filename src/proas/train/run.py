"""Driving a run: the run directory, metrics (JSONL + TensorBoard), progress bar, curve, summary."""

from __future__ import annotations

import gc
import io
import math
import os
import subprocess
import time
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from proas.errors import ProasError
from proas.fileio import atomic_write_bytes, atomic_write_json
from proas.train.config import Config, relocate_shipped_paths, same_setting
from proas.train.loop import Trainer, load_run_config, metrics_line, write_run_config
from proas.train.rundir import ResumePoint, absolute_paths, check_resume

__all__ = ["curve_figure", "curve_top", "default_run_name", "plot_curve", "train", "wall_so_far"]

#: without a progress bar, the longest silence between two progress lines (seconds)
PLAIN_LINE_EVERY_S = 60.0


def default_run_name(cfg: Config) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    a = cfg.algo
    return f"{cfg.env.name.replace(':', '_')}-{cfg.policy.kind}-{a.estimator}-{a.shaping}-s{cfg.seed}-{stamp}"


class _MetricsSink:
    """Appends records to metrics.jsonl (flushed and fsynced per record) and TensorBoard."""

    def __init__(self, run_dir: Path, purge_step: int | None):
        self.path = run_dir / "metrics.jsonl"
        self.fh = open(self.path, "a", encoding="utf-8")
        self.tb = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(log_dir=str(run_dir / "tb"), purge_step=purge_step)
        except ImportError:  # tensorboard is a dependency; stay usable without it
            self.tb = None

    def write(self, rec: dict[str, Any]) -> None:
        self.fh.write(metrics_line(rec) + "\n")
        self.fh.flush()
        os.fsync(self.fh.fileno())
        if self.tb is not None:
            step = int(rec["step"])
            for k, v in rec.items():
                if k != "step" and isinstance(v, (int, float)) and math.isfinite(v):
                    self.tb.add_scalar(k, v, step)
            self.tb.flush()

    def close(self) -> None:
        self.fh.close()
        if self.tb is not None:
            self.tb.close()


def curve_top(values: list[float]) -> float:
    """The y-axis top (percent) for curves whose highest point is ``max(values)``: a quarter
    above it, rounded up to a multiple of 5, at least 10 and at most 100. Early runs stay under
    20%, and a fixed 0-100 axis flattened them to the floor."""
    peak = max(values, default=0.0)
    return float(min(100, max(10, 5 * math.ceil(1.25 * peak / 5))))


def curve_figure(history: list[dict[str, Any]], title: str):
    """The learning-curve figure (matplotlib, Agg): training SR per step, its running mean and
    validation SR, y scaled to the data, the legend under the axes where it covers no point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.4), dpi=110, layout="constrained")
    tr = [(r["step"], r["train/sr"]) for r in history if r.get("train/sr") is not None]
    va = [(r["step"], r["val/sr"]) for r in history if r.get("val/sr") is not None]
    plotted: list[float] = []
    if tr:
        xs, ys = zip(*tr)
        raw = [100 * y for y in ys]
        ax.plot(xs, raw, color="tab:blue", alpha=0.35, lw=1, label="train SR")
        w = max(1, len(ys) // 15)
        sm = [100 * sum(ys[max(0, i - w + 1): i + 1]) / len(ys[max(0, i - w + 1): i + 1]) for i in range(len(ys))]
        ax.plot(xs, sm, color="tab:blue", lw=2, label=f"train SR (mean of {w})")
        plotted += raw
    if va:
        xs, ys = zip(*va)
        pts = [100 * y for y in ys]
        ax.plot(xs, pts, "o-", color="tab:red", lw=2, label="validation SR")
        plotted += pts
    top = curve_top(plotted)
    ax.set_xlabel("RL step")
    ax.set_ylabel("success rate (%)")
    ax.set_ylim(-0.02 * top, 1.02 * top)  # the margins keep 0% and the top visible
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    if tr or va:
        fig.legend(loc="outside lower center", ncol=3, fontsize=8, frameon=False)
    return fig


def plot_curve(history: list[dict[str, Any]], path: Path, title: str) -> None:
    """The learning curve (``curve_figure``) as a PNG (written atomically)."""
    import matplotlib.pyplot as plt

    fig = curve_figure(history, title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


@contextmanager
def gc_paused():
    """Hold Python's cycle collector off for one RL step (or the trainer's start).

    A step allocates millions of small objects that stay alive until its update (contexts,
    feature arrays, steps), and each time enough of them pile up the collector walks every live
    object again: over half of a scorer run's wall time went there. Paused, reference counting
    still frees what is not in a cycle at once; the collector takes what is left once the step is
    over, in one young-generation pass. It changes no number a run computes.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


LOCK_FILE = ".lock"


@contextmanager
def run_lock(run_dir: Path):
    """Hold the run directory for this process: an OS lock on ``run_dir/.lock`` (released when
    the process ends, however it ends), holding the holder's pid. A second writer (a ``--resume``
    of a run that is still training) is refused with one line naming the holder."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no POSIX locks (Windows): unguarded, as before
        yield
        return
    path = Path(run_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ProasError(f"{run_dir}: cannot lock the run directory ({exc.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip() or "unknown"
            raise ProasError(f"{run_dir}: another process (pid {holder}) is writing this run; "
                             "wait for it to end or stop it first") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(fd)


def train(cfg: Config | None, *, run_dir: Path | None = None, resume: Path | None = None,
          console: Console | None = None, stop_after: int | None = None) -> dict[str, Any]:
    """Run (or resume) a training run; return its summary.

    ``stop_after`` ends this call after that many RL steps, without forcing a checkpoint,
    exactly as a kill would (the experiments runner and tests use it to interrupt a run). The
    run directory is locked while this runs (``run_lock``).
    """
    with ExitStack() as held:
        if resume is not None:
            if not Path(resume).is_dir():
                raise ProasError(f"{resume}: no such run directory")
            held.enter_context(run_lock(Path(resume)))
        return _train(cfg, run_dir=run_dir, resume=resume, console=console, stop_after=stop_after, held=held)


def _train(cfg: Config | None, *, run_dir: Path | None, resume: Path | None, console: Console | None,
           stop_after: int | None, held: ExitStack) -> dict[str, Any]:
    console = console or Console(stderr=False)
    if resume is not None:
        run_dir = Path(resume)
        recorded = load_run_config(run_dir)
        # a run made from another checkout: its shipped task sets are read from this one's
        cfg_on_disk = relocate_shipped_paths(recorded)
        if cfg is None:
            cfg = cfg_on_disk
        elif not same_setting(cfg, cfg_on_disk):
            raise ProasError(f"{run_dir}: --resume continues the run's own config; only train.steps "
                             "and train.progress may be overridden")
        else:
            cfg = relocate_shipped_paths(cfg)
        # metrics, config and checkpoints must agree (rundir.check_resume) before anything is
        # built or written; what a kill left behind the checkpoint is repaired once the trainer stands
        point: ResumePoint | bool = check_resume(run_dir, cfg_on_disk)
    else:
        assert cfg is not None
        point = False
        cfg = absolute_paths(cfg)  # --resume, eval and serve then work from any directory
        if run_dir is None:
            run_dir = Path(cfg.train.out_dir) / (cfg.train.run_name or default_run_name(cfg))
        if (run_dir / "config.yaml").exists():
            raise ProasError(f"{run_dir}: a run already lives here; use --resume {run_dir} or another "
                             "train.run_name")

    # a resumed run is named at once; a new one once its directory exists, after the trainer
    # has named what it loads (env, task sets, the oracle graph): a run that cannot start has
    # no directory to name
    if resume is not None:
        console.print(f"resuming run: {escape(str(run_dir))}", soft_wrap=True)
    t_start = time.perf_counter()
    # the trainer resolves the env, task sets, policy and graph before the run directory exists,
    # so a run that cannot start leaves no config-only directory that blocks the next attempt
    with gc_paused():
        trainer = Trainer(cfg, run_dir, resume=point, console=console)
    if resume is not None and cfg != recorded:
        write_run_config(run_dir, cfg)  # a new step budget, or this checkout's task sets
    if resume is None:
        if (run_dir / "config.yaml").exists():  # another run took the directory meanwhile
            raise ProasError(f"{run_dir}: a run already lives here; use --resume {run_dir} or another "
                             "train.run_name")
        run_dir.mkdir(parents=True, exist_ok=True)
        held.enter_context(run_lock(run_dir))
        if (run_dir / "config.yaml").exists():  # taken between the check above and the lock
            raise ProasError(f"{run_dir}: a run already lives here; use --resume {run_dir} or another "
                             "train.run_name")
        write_run_config(run_dir, cfg)
        console.print(f"run directory: {escape(str(run_dir))}", soft_wrap=True)
    history = trainer.history
    # the run's wall time over all its parts (each start's loading included): what the parts
    # before this one took, as the last record kept says, plus this part's
    wall_before = wall_so_far(history)

    def wall() -> float:
        return wall_before + time.perf_counter() - t_start

    finished_before = trainer.step >= cfg.train.steps and (run_dir / "summary.json").exists()
    sink = _MetricsSink(run_dir, purge_step=trainer.step + 1 if resume is not None else None)
    total = cfg.train.steps
    show_bar = cfg.train.progress and console.is_terminal
    progress = Progress(
        TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(), console=console, disable=not show_bar,
    )
    done_this_call = 0
    last_line = time.monotonic()
    try:
        with progress:
            bar = progress.add_task("train", total=total, completed=trainer.step, info="")
            if trainer.step == 0 and not history:
                rec: dict[str, Any] = {"step": 0}
                if cfg.train.val_before_train and cfg.train.val_every and trainer.val_ids:
                    console.print(f"validating the untrained policy on {len(trainer.val_ids)} tasks ...")
                    rec.update(trainer.run_validation(0))
                rec["time/wall"] = wall()
                sink.write(rec)
                history.append(rec)
                trainer.save()
            while trainer.step < total:
                if stop_after is not None and done_this_call >= stop_after:
                    break
                t0 = time.perf_counter()
                with gc_paused():
                    rec = trainer.train_step()
                    k = trainer.step
                    if cfg.train.val_every and (k % cfg.train.val_every == 0 or k == total):
                        rec.update(trainer.run_validation(k))
                rec["time/step"] = time.perf_counter() - t0
                rec["time/wall"] = wall()
                sink.write(rec)
                history.append(rec)
                if cfg.train.save_every and (k % cfg.train.save_every == 0 or k == total):
                    trainer.save()
                info = (f"SR {100 * rec['train/sr']:5.1f}%  reward {rec['train/reward']:6.2f}  "
                        f"{rec['time/step']:.2f}s/step")
                if "val/sr" in rec:
                    info += f"  val SR {100 * rec['val/sr']:5.1f}%"
                done_this_call += 1
                progress.update(bar, completed=k, info=info)
                # without a bar (a log file, a pipe): the first step at once, so that a start is
                # seen to have worked, then validations, the last step and a line a minute
                if not show_bar and (done_this_call == 1 or "val/sr" in rec or k == total
                                     or time.monotonic() - last_line >= PLAIN_LINE_EVERY_S):
                    console.print(f"step {k}/{total}  {info}", soft_wrap=True)
                    last_line = time.monotonic()
    finally:
        sink.close()

    if finished_before and done_this_call == 0:
        # a --resume of a finished run: nothing ran, so its summary and curve stay as they are
        kept = _read_summary(run_dir)
        if kept is not None:
            console.print(f"finished already: {trainer.step} of {total} steps; {run_dir / 'summary.json'} "
                          f"kept (continue with: proas train --resume {run_dir} train.steps=N)", soft_wrap=True)
            return kept
    summary = _summarise(cfg, run_dir, history, wall(), trainer)
    if trainer.step >= total:
        plot_curve(history, run_dir / "curve.png",
                   f"{cfg.env.name} / {cfg.policy.kind} / {cfg.algo.estimator}+{cfg.algo.shaping} / seed {cfg.seed}")
        atomic_write_json(run_dir / "summary.json", summary)
        console.print(
            f"[bold green]done[/]: {trainer.step} steps in {summary['wall_s']:.0f}s; best validation SR "
            f"{_pct(summary['best_val_sr'])} (step {summary['best_val_step']}), last {_pct(summary['last_val_sr'])}\n"
            f"run:            {run_dir}\n"
            f"learning curve: {run_dir / 'curve.png'}\n"
            f"best checkpoint: {run_dir / 'best'}  (proas eval {run_dir})",
            soft_wrap=True,
        )
    return summary


def wall_so_far(history: list[dict[str, Any]]) -> float:
    """The wall time (s) of the run up to its last record: that record's ``time/wall``; for a
    run written before that key existed, the sum of its steps' ``time/step`` and of the untrained
    policy's validation. Work lost to a kill after the last checkpoint is not in it (its records
    were dropped); the steps are counted when they are run again."""
    for rec in reversed(history):
        value = rec.get("time/wall")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    total = 0.0
    for rec in history:
        for key in ("time/step", "time/val") if rec.get("step") == 0 else ("time/step",):
            value = rec.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                total += float(value)
    return total


def _read_summary(run_dir: Path) -> dict[str, Any] | None:
    import json

    try:
        data = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def source_commit() -> str | None:
    """The commit of the code that runs: ``PROAS_COMMIT`` when set (a copy of a checkout without
    its ``.git``, as on the device machine), else ``git rev-parse HEAD`` of the checkout this
    package lives in, with ``-dirty`` when it has uncommitted changes; None when neither is known."""
    env = os.environ.get("PROAS_COMMIT")
    if env:
        return env.strip()
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def _summarise(cfg: Config, run_dir: Path, history: list[dict[str, Any]], wall: float, trainer) -> dict[str, Any]:
    vals = [(r["step"], r["val/sr"]) for r in history if r.get("val/sr") is not None]
    best = max(vals, key=lambda x: (x[1], -x[0])) if vals else (None, None)
    return {
        "run_dir": str(run_dir),
        "steps": trainer.step,
        "wall_s": wall,
        "best_val_sr": best[1],
        "best_val_step": best[0],
        "last_val_sr": vals[-1][1] if vals else None,
        "first_val_sr": vals[0][1] if vals else None,
        "last_train_sr": next((r["train/sr"] for r in reversed(history) if "train/sr" in r), None),
        # the code that finished the run (docs/study-protocol.md: each per-seed row names it)
        "commit": source_commit(),
    }
