"""What a run writes beside its checkpoints: ``config.yaml``, ``metrics.jsonl`` (and TensorBoard),
the learning curve, ``summary.json``, the run directory's lock; and the default run name.

The loop that writes them is ``proas.train.loop.train`` (docs/training.md, "The loop").
"""

from __future__ import annotations

import gc
import io
import json
import math
import os
import subprocess
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from proas.errors import ProasError
from proas.fileio import atomic_write_bytes, atomic_write_text, read_utf8
from proas.train.config import Config, config_from_yaml, config_to_yaml

__all__ = ["MetricsSink", "curve_figure", "curve_top", "default_run_name", "gc_paused", "load_run_config",
           "metrics_line", "plot_curve", "read_summary", "run_lock", "source_commit", "summarise", "wall_so_far",
           "write_run_config"]

def default_run_name(cfg: Config) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    a = cfg.algo
    return f"{cfg.env.name.replace(':', '_')}-{cfg.policy.kind}-{a.estimator}-{a.shaping}-s{cfg.seed}-{stamp}"


class MetricsSink:
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
def gc_paused(freeze: bool = False, collect: bool = True):
    """Hold Python's cycle collector off for one RL step (or the trainer's start).

    A step allocates millions of small objects that stay alive until its update (contexts,
    feature arrays, steps), and each time enough of them pile up the collector walks every live
    object again: over half of a scorer run's wall time went there. Paused, reference counting
    still frees what is not in a cycle at once; the collector takes what is left once the step is
    over, in one young-generation pass. It changes no number a run computes.

    ``freeze``: what survives that pass is then moved out of the collector's generations
    (``gc.freeze``): it is what the step added to the run's caches and records, alive for the
    run, and the older-generation passes between steps walked all of it again (about a tenth
    of a run's time). Reference counting still frees it; only a cycle of it that dies stays
    until the run gives everything back (``gc.unfreeze``, ``train`` does at its end).

    ``collect=False`` freezes without the pass: for the trainer's start, which runs once. Its
    pass walked every object the start made (the games and oracle trajectories) to free the
    cycles of modules imported on first use, which now stay until the run ends.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            if collect:
                gc.collect(0)
            gc.freeze()
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


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


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


def summarise(cfg: Config, run_dir: Path, history: list[dict[str, Any]], wall: float, trainer) -> dict[str, Any]:
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


def load_run_config(run_dir: Path) -> Config:
    path = run_dir / "config.yaml"
    if not path.exists():
        raise ProasError(f"{run_dir}: not a run directory (no config.yaml)")
    return config_from_yaml(read_utf8(path, "a run's config.yaml is UTF-8"), where=str(path))


def write_run_config(run_dir: Path, cfg: Config) -> None:
    atomic_write_text(run_dir / "config.yaml", config_to_yaml(cfg))


def metrics_line(rec: dict[str, Any]) -> str:
    """One JSON line; a non-finite figure (a diverged loss) is written as null, never as NaN."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in rec.items()}
    return json.dumps(clean, separators=(",", ":"), allow_nan=False)
