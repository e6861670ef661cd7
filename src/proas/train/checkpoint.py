"""Run directories and atomic, resumable checkpoints.

Layout of a run directory::

    config.yaml               the resolved config (``--resume`` reads it back)
    metrics.jsonl             one JSON object per RL step (and step 0: the untrained policy)
    tb/                       TensorBoard event files of the same metrics
    checkpoints/latest.json   points at the newest complete checkpoint
    checkpoints/step_000010/  state.pt (policy, optimiser, critic, RNG states, step) + graph.json
    best/                     the checkpoint with the best validation success rate so far
    curve.png                 the learning curve
    summary.json              final figures

A checkpoint directory is written completely (every file atomically) before ``latest.json``
is switched to it, so a run killed at any moment, even by SIGKILL, leaves the previous
checkpoint intact. Older checkpoint directories are deleted only after the switch.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from proas.errors import ProasError
from proas.fileio import atomic_write_bytes, atomic_write_json

__all__ = [
    "CHECKPOINTS",
    "find_checkpoint",
    "latest_checkpoint",
    "load_state",
    "read_metrics",
    "replace_checkpoint",
    "save_checkpoint",
    "truncate_metrics",
]

CHECKPOINTS = "checkpoints"
STATE_FILE = "state.pt"
GRAPH_FILE = "graph.json"
FORMAT_VERSION = 1


def save_checkpoint(directory: Path, state: dict[str, Any], graph=None) -> None:
    """Write ``state`` (torch-serialisable) and the reference graph into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save(dict(state, format_version=FORMAT_VERSION), buf)
    atomic_write_bytes(directory / STATE_FILE, buf.getvalue())
    if graph is not None:
        graph.save(directory / GRAPH_FILE)


def replace_checkpoint(directory: Path, state: dict[str, Any], meta: dict[str, Any], graph=None) -> None:
    """Write a complete checkpoint (state, graph, ``meta.json``) and only then swap it in for
    ``directory``, so a kill at any moment leaves the old or the new one whole."""
    tmp = directory.with_name(directory.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    save_checkpoint(tmp, state, graph)
    atomic_write_json(tmp / "meta.json", meta)
    old = directory.with_name(directory.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if directory.exists():
        directory.rename(old)
    tmp.rename(directory)
    shutil.rmtree(old, ignore_errors=True)


def save_resumable(run_dir: Path, step: int, state: dict[str, Any], graph=None, keep: int = 1) -> Path:
    """Write checkpoint ``step`` and switch ``latest.json`` to it; keep the ``keep`` newest."""
    root = run_dir / CHECKPOINTS
    target = root / f"step_{step:06d}"
    if target.exists():  # a half-written leftover of a killed run: never the one latest points at
        shutil.rmtree(target)
    save_checkpoint(target, state, graph)
    atomic_write_json(root / "latest.json", {"step": step, "dir": target.name})
    old = sorted(p for p in root.glob("step_*") if p.is_dir() and p.name != target.name)
    for p in old[: max(0, len(old) - (keep - 1))]:
        shutil.rmtree(p, ignore_errors=True)
    return target


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of a run, or None if it has none yet."""
    pointer = run_dir / CHECKPOINTS / "latest.json"
    if not pointer.exists():
        return None
    try:
        info = json.loads(pointer.read_text())
        target = run_dir / CHECKPOINTS / str(info["dir"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ProasError(f"{pointer}: corrupt checkpoint pointer ({type(exc).__name__})") from None
    if not (target / STATE_FILE).exists():
        raise ProasError(f"{pointer}: points at {target.name}, which has no {STATE_FILE}")
    return target


def find_checkpoint(path: str | os.PathLike) -> Path:
    """Resolve ``proas eval``'s argument: a run directory (its best checkpoint, else the latest),
    a checkpoint directory, or a ``state.pt`` file."""
    p = Path(path)
    if not p.exists():
        raise ProasError(f"{p}: no such run directory or checkpoint")
    if p.is_file():
        if p.name != STATE_FILE:
            raise ProasError(f"{p}: expected a run directory, a checkpoint directory or {STATE_FILE}")
        return p.parent
    if (p / STATE_FILE).exists():
        return p
    if (p / "best" / STATE_FILE).exists():
        return p / "best"
    latest = latest_checkpoint(p)
    if latest is None:
        raise ProasError(f"{p}: not a run directory with a checkpoint")
    return latest


def load_state(directory: Path) -> dict[str, Any]:
    """Read a checkpoint's ``state.pt``; a corrupt or foreign file is a ``ProasError``."""
    path = directory / STATE_FILE
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except FileNotFoundError:
        raise ProasError(f"{path}: missing checkpoint file") from None
    except Exception as exc:  # noqa: BLE001 - torch raises many types for garbage
        raise ProasError(f"{path}: corrupt checkpoint ({type(exc).__name__})") from None
    if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION:
        raise ProasError(f"{path}: not a proas checkpoint (format {FORMAT_VERSION} expected)")
    return state


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The complete records of a metrics file (a torn last line from a kill is skipped)."""
    rows = []
    if not path.exists():
        return rows
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            if i == len(lines) - 1:
                break  # torn by a kill mid-write
            raise ProasError(f"{path}: line {i + 1} is not JSON") from None
    return rows


def truncate_metrics(path: Path, last_step: int) -> list[dict[str, Any]]:
    """Keep the records up to ``last_step`` (the resumed checkpoint); rewrite atomically."""
    from proas.fileio import atomic_write_jsonl

    rows = [r for r in read_metrics(path) if int(r.get("step", -1)) <= last_step]
    atomic_write_jsonl(path, rows)
    return rows
