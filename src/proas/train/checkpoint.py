"""Run directories and atomic, resumable checkpoints.

Layout of a run directory::

    config.yaml               the resolved config (``--resume`` reads it back)
    metrics.jsonl             one JSON object per RL step (and step 0: the untrained policy)
    tb/                       TensorBoard event files of the same metrics
    checkpoints/latest.json   points at the newest complete checkpoint
    checkpoints/step_000010/  state.pt (the tensors: policy, optimiser, critic, torch RNG state)
                              + state.json (the rest: step, config, numpy / Python RNG states, ...)
                              + graph.json + checksums.json (sha256 of every other file, written last)
                              + for the lm policy, its weights as a Hugging Face directory
                              (save_pretrained: config.json, model.safetensors or the LoRA
                              adapter_*, the tokenizer), not in state.pt (docs/lm.md)
    best/                     the checkpoint with the best validation success rate so far (a kill
                              between the two renames of ``replace_checkpoint`` leaves ``best.old``,
                              the previous best, and no ``best/``: ``find_checkpoint`` then takes
                              ``best.old``, and ``--resume`` renames it back, ``rundir.check_resume``)
    curve.png                 the learning curve
    summary.json              final figures

A checkpoint directory is written completely (every file atomically, ``checksums.json`` last)
before ``latest.json`` is switched to it, so a run killed at any moment, even by SIGKILL, leaves
the previous checkpoint intact. The previous checkpoint is kept as well: on resume a checkpoint
is used only if every file matches its recorded sha256; when the one ``latest.json`` names does
not (or the pointer is missing or corrupt) the newest one that does is used, with a warning, and
when none does resuming is refused. Checkpoints from before checksums (format 1) are accepted
unverified.

Loading runs no code from the checkpoint. ``checksums.json`` lies beside the files it checks, so
it proves completeness, not origin: whoever can rewrite ``state.pt`` can rewrite it too (or
delete it and pass the file off as format 1). So ``state.pt`` is read with
``torch.load(weights_only=True)``, torch's unpickler that builds tensors and plain containers
(dict, list, tuple, str, numbers, None) and refuses any other object, and everything that is
not a tensor lives in ``state.json`` (format 3). A ``state.pt`` that names any other object
(``os.system``, a class of some package) is refused with one line (``ProasError``) and nothing
in it runs. Formats 1 and 2 (everything in ``state.pt``: tensors, ints, strings, the numpy RNG
state's dict of ints, Python's RNG state's tuple of ints) load the same way; one of them that
would need any other object is refused like a forged one.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import re
import shutil
import sys
import warnings
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from proas.errors import ProasError
from proas.fileio import (
    atomic_write_bytes,
    atomic_write_json,
    open_regular,
    read_regular,
    read_utf8,
    regular_file_problem,
    sha256_file,
)

__all__ = [
    "CHECKPOINTS",
    "checksummed_files",
    "find_checkpoint",
    "is_plain_name",
    "latest_checkpoint",
    "load_plain_state",
    "load_state",
    "read_metrics",
    "replace_checkpoint",
    "save_checkpoint",
    "truncate_metrics",
    "verify_checkpoint",
]

CHECKPOINTS = "checkpoints"
STATE_FILE = "state.pt"
STATE_JSON = "state.json"
GRAPH_FILE = "graph.json"
CHECKSUMS_FILE = "checksums.json"
#: a run's best checkpoint, and what ``replace_checkpoint`` leaves of the previous one when killed
#: between its two renames
BEST, BEST_OLD = "best", "best.old"
#: 3: tensors in ``state.pt``, the rest in ``state.json``; 2: everything in ``state.pt``, with
#: ``checksums.json``; 1: everything in ``state.pt``, no checksums
FORMAT_VERSION = 3
_READABLE_VERSIONS = (1, 2, 3)
_STEP_DIR = re.compile(r"step_[0-9]{6,}")
# what torch's weights-only unpickler builds besides tensors (checked before saving)
_PLAIN_LEAVES = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)
# a JSON object standing for a tuple, or for a dict whose only key is one of these two
_TUPLE, _DICT = "__tuple__", "__dict__"
# torch's message when its weights-only unpickler meets an object it does not build
_FORBIDDEN_GLOBAL = re.compile(r"GLOBAL ([\w.]{1,200})")


def save_checkpoint(directory: Path, state: dict[str, Any], graph=None,
                    extra: dict[str, Any] | None = None,
                    write_files: Callable[[Path], None] | None = None) -> None:
    """Write ``state`` (the entries holding tensors into ``state.pt``, the others, JSON data and
    tuples, into ``state.json``), the reference graph and the ``extra`` JSON files into
    ``directory``, then ``checksums.json`` with the sha256 of each. ``write_files(directory)``
    adds files of its own beside them (the lm's Hugging Face model directory), plain files only;
    they are checksummed too."""
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {k: v for k, v in state.items() if _holds_tensor(v)}
    for key, value in tensors.items():
        _check_plain(value, key)
    plain = {k: _to_json(v, k) for k, v in state.items() if k not in tensors and k != "format_version"}
    buf = io.BytesIO()
    torch.save(tensors, buf)
    files = {STATE_FILE: buf.getvalue(),
             STATE_JSON: (json.dumps({"format_version": FORMAT_VERSION, "tensor_entries": sorted(tensors),
                                      "state": plain}, indent=1) + "\n").encode("utf-8")}
    if graph is not None:
        files[GRAPH_FILE] = graph.to_bytes(GRAPH_FILE)
    for name, obj in (extra or {}).items():
        files[name] = (json.dumps(obj, indent=2) + "\n").encode("utf-8")
    for name, data in files.items():
        atomic_write_bytes(directory / name, data)
    sums = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    if write_files is not None:
        write_files(directory)
        for path in sorted(directory.iterdir()):
            if path.name in sums or path.name == CHECKSUMS_FILE:
                continue
            if not path.is_file() or path.is_symlink():
                raise ProasError(f"{path}: a checkpoint holds plain files only")
            sums[path.name] = sha256_file(path)
    # last: a directory without it is incomplete (a kill mid-save) and never resumed from
    atomic_write_json(directory / CHECKSUMS_FILE, {"format_version": FORMAT_VERSION, "sha256": sums})


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, dict):
        return any(_holds_tensor(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v) for v in value)
    return False


def _check_plain(value: Any, where: str) -> None:
    """Refuse (``TypeError``) to save what ``torch.load(weights_only=True)`` would refuse to
    load: anything but tensors, plain containers and scalars."""
    if isinstance(value, torch.Tensor) or type(value) in _PLAIN_LEAVES:
        return
    if type(value) in (dict, OrderedDict):
        for k, v in value.items():
            _check_plain(k, f"{where} (a key)")
            _check_plain(v, f"{where}.{k}")
    elif type(value) in (list, tuple, torch.Size):
        for i, v in enumerate(value):
            _check_plain(v, f"{where}[{i}]")
    else:
        raise TypeError(f"checkpoint entry {where}: a {type(value).__module__}.{type(value).__qualname__} is not "
                        "a tensor or plain data (weights-only loading would refuse it)")


def _to_json(value: Any, where: str) -> Any:
    """``value`` as JSON: tuples become ``{"__tuple__": [...]}`` (``_from_json`` reverses it)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [_to_json(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, tuple):
        return {_TUPLE: [_to_json(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        out = {k: _to_json(v, f"{where}.{k}") for k, v in value.items()}
        return {_DICT: out} if len(out) == 1 and next(iter(out)) in (_TUPLE, _DICT) else out
    raise TypeError(f"checkpoint entry {where}: a {type(value).__module__}.{type(value).__qualname__} is neither "
                    "a tensor nor JSON data")


def _from_json(value: Any) -> Any:
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if isinstance(value, dict):
        if len(value) == 1 and _TUPLE in value:
            if not isinstance(value[_TUPLE], list):
                raise TypeError("a tuple that is not a list")
            return tuple(_from_json(v) for v in value[_TUPLE])
        if len(value) == 1 and _DICT in value:
            if not isinstance(value[_DICT], dict):
                raise TypeError("a dict that is not an object")
            return {k: _from_json(v) for k, v in value[_DICT].items()}
        return {k: _from_json(v) for k, v in value.items()}
    return value


def verify_checkpoint(directory: Path) -> str | None:
    """``None`` when ``directory`` is a complete checkpoint whose files match their recorded
    sha256, else what is wrong with it.

    A checkpoint holds regular files only (``save_checkpoint`` writes nothing else): an entry
    that is a symbolic link, a FIFO, a device or a directory fails verification before any file
    is opened, so a ``model.safetensors`` linked to ``/dev/zero`` or a ``tokenizer.json``
    replaced by a FIFO is refused instead of read for ever; the files are opened without
    following links and never blocking (``open_regular``)."""
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    for entry in entries:
        problem = regular_file_problem(entry.path)
        if problem is not None:
            return f"{entry.name} {problem} (a checkpoint holds regular files only)"
    sums_path = directory / CHECKSUMS_FILE
    if not sums_path.exists():
        if (directory / STATE_JSON).exists():  # format 3 or later: always with checksums
            return f"no {CHECKSUMS_FILE} (written incompletely)"
        if not (directory / STATE_FILE).exists():
            return f"no {STATE_FILE}"
        try:
            raw = _load_tensors(directory / STATE_FILE)  # weights only: runs nothing
        except ProasError as exc:
            return str(exc).removeprefix(f"{directory}{os.sep}")  # "state.pt: ..." (the caller names the directory)
        # format 1 predates checksums; a later format without them was cut short (format 3: before
        # its state.json was written)
        version = raw.get("format_version") if isinstance(raw, dict) else None
        return None if version == 1 else f"no {CHECKSUMS_FILE} (written incompletely)"
    try:
        sums = json.loads(read_regular(sums_path))["sha256"]
        if not isinstance(sums, dict) or STATE_FILE not in sums:
            raise TypeError("no state.pt entry")
    except (OSError, ProasError, ValueError, KeyError, TypeError) as exc:
        return f"corrupt {CHECKSUMS_FILE} ({type(exc).__name__})"
    for name, digest in sums.items():
        if not is_plain_name(name):
            return f"{CHECKSUMS_FILE} names {name!r}, not a file of the checkpoint"
        try:
            actual = sha256_file(directory / name, follow_symlinks=False)
        except FileNotFoundError:
            return f"{name} is missing"
        except OSError as exc:
            return f"cannot read {name} ({exc.strerror})"
        except ProasError as exc:
            return str(exc).removeprefix(f"{directory}{os.sep}")
        if actual != digest:
            return f"{name} does not match its sha256"
    return None


def is_plain_name(name: Any) -> bool:
    """Whether ``name`` names a file directly inside a directory (no separator, not ``.`` or
    ``..``, no NUL): a name that cannot lead out of it."""
    return (isinstance(name, str) and name not in ("", ".", "..") and Path(name).name == name
            and "/" not in name and os.sep not in name and "\x00" not in name)


def checksummed_files(directory: Path) -> dict[str, str]:
    """The files of a verified checkpoint that its ``checksums.json`` covers, with their sha256
    (``proas lm export`` copies exactly these); empty for a format-1 checkpoint."""
    try:
        sums = json.loads(read_regular(directory / CHECKSUMS_FILE))["sha256"]
    except FileNotFoundError:
        return {}
    except (OSError, ProasError, ValueError, KeyError, TypeError) as exc:
        raise ProasError(f"{directory / CHECKSUMS_FILE}: corrupt ({type(exc).__name__})") from None
    if not isinstance(sums, dict) or not all(is_plain_name(k) and isinstance(v, str) for k, v in sums.items()):
        raise ProasError(f"{directory / CHECKSUMS_FILE}: corrupt (names that are not files of the checkpoint)")
    return dict(sums)


def _warn(message: str) -> None:
    print(f"proas: warning: {message}", file=sys.stderr)


def replace_checkpoint(directory: Path, state: dict[str, Any], meta: dict[str, Any], graph=None,
                       write_files: Callable[[Path], None] | None = None) -> None:
    """Write a complete checkpoint (state, graph, ``meta.json``) and only then swap it in for
    ``directory``, so a kill at any moment leaves the old or the new one whole."""
    tmp = directory.with_name(directory.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    save_checkpoint(tmp, state, graph, extra={"meta.json": meta}, write_files=write_files)
    old = directory.with_name(directory.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if directory.exists():
        directory.rename(old)
    tmp.rename(directory)
    shutil.rmtree(old, ignore_errors=True)


def save_resumable(run_dir: Path, step: int, state: dict[str, Any], graph=None, keep: int = 2,
                   write_files: Callable[[Path], None] | None = None) -> Path:
    """Write checkpoint ``step`` and switch ``latest.json`` to it; keep the ``keep`` newest
    (the previous one is the fallback should the newest fail verification)."""
    root = run_dir / CHECKPOINTS
    target = root / f"step_{step:06d}"
    if target.exists():  # a half-written leftover of a killed run: never the one latest points at
        shutil.rmtree(target)
    save_checkpoint(target, state, graph, write_files=write_files)
    atomic_write_json(root / "latest.json", {"step": step, "dir": target.name})
    old = sorted(p for p in root.glob("step_*") if p.is_dir() and p.name != target.name)
    for p in old[: max(0, len(old) - (keep - 1))]:
        shutil.rmtree(p, ignore_errors=True)
    return target


def latest_checkpoint(run_dir: Path, warn: Callable[[str], None] | None = None) -> Path | None:
    """The newest complete, verified checkpoint of a run, or None if it has none yet.

    The checkpoint ``latest.json`` names comes first; if it fails verification, or the pointer
    is missing, corrupt or names anything but a checkpoint directory of this run, the newest
    other checkpoint that verifies is returned and ``warn`` (default: a line on stderr) is
    told why. When none verifies this is a ``ProasError``.
    """
    root = run_dir / CHECKPOINTS
    pointer = root / "latest.json"
    problems: list[str] = []
    named = None
    if pointer.exists():
        try:
            name = json.loads(read_regular(pointer))["dir"]
        except (OSError, ProasError, ValueError, KeyError, TypeError) as exc:
            problems.append(f"{pointer}: corrupt checkpoint pointer ({type(exc).__name__})")
        else:
            # only a plain step_N name: the pointer never leads out of this run's checkpoints
            if isinstance(name, str) and _STEP_DIR.fullmatch(name):
                named = root / name
            else:
                problems.append(f"{pointer}: corrupt checkpoint pointer (dir {name!r} is not a "
                                "checkpoint of this run)")
    others = sorted((p for p in root.glob("step_*") if p != named and _STEP_DIR.fullmatch(p.name) and p.is_dir()),
                    reverse=True)
    if not pointer.exists() and others:
        problems.append(f"{pointer} is missing")
    candidates = ([named] if named is not None else []) + others
    if not candidates and not problems:
        return None
    for directory in candidates:
        problem = verify_checkpoint(directory)
        if problem is None:
            if problems:
                (warn or _warn)(f"{'; '.join(problems)}; resuming from {directory.name} instead")
            return directory
        problems.append(f"{directory.name}: {problem}")
    raise ProasError(f"{run_dir}: no checkpoint verifies ({'; '.join(problems)})")


def find_checkpoint(path: str | os.PathLike) -> Path:
    """Resolve ``proas eval``'s argument: a run directory (its best checkpoint, else the latest),
    a checkpoint directory, or a ``state.pt`` file. A named checkpoint must verify; a run's
    best one that does not gives way to the latest, with a warning."""
    p = Path(path)
    if not p.exists():
        raise ProasError(f"{p}: no such run directory or checkpoint")
    if p.is_file():
        if p.name != STATE_FILE:
            raise ProasError(f"{p}: expected a run directory, a checkpoint directory or {STATE_FILE}")
        p = p.parent
    if (p / STATE_FILE).exists():
        problem = verify_checkpoint(p)
        if problem is not None:
            raise ProasError(f"{p}: checkpoint fails verification ({problem})")
        return p
    best = p / BEST
    if (best / STATE_FILE).exists():
        problem = verify_checkpoint(best)
        if problem is None:
            return best
        _warn(f"{best}: {problem}; using the latest checkpoint instead")
    elif (p / BEST_OLD).is_dir():
        # a kill while ``replace_checkpoint`` swapped a new best in: best/ is gone and best.old is
        # the best before it; the latest checkpoint is not the run's best, so never fall back to it
        old = p / BEST_OLD
        problem = verify_checkpoint(old)
        if problem is not None:
            raise ProasError(f"{best} is missing and {old.name}, left by a crash while best/ was replaced, fails "
                             f"verification ({problem}); evaluate a checkpoint by name "
                             f"({p / CHECKPOINTS}/step_N)")
        _warn(f"{best} is missing (a crash while it was replaced); using {old.name}, the best checkpoint before "
              "that (proas train --resume restores it as best/)")
        return old
    latest = latest_checkpoint(p)
    if latest is None:
        raise ProasError(f"{p}: not a run directory with a checkpoint")
    return latest


def load_state(directory: Path) -> dict[str, Any]:
    """Read a checkpoint's state: ``state.json`` and the tensors of ``state.pt`` (or, formats 1
    and 2, ``state.pt`` alone). ``state.pt`` is loaded with ``weights_only=True``: a file that
    would need any object but tensors and plain data is refused, and nothing in it runs. A
    corrupt, foreign or refused file is a one-line ``ProasError``."""
    json_path = directory / STATE_JSON
    if not json_path.exists():  # formats 1 and 2
        state = _load_tensors(directory / STATE_FILE)
        if not isinstance(state, dict) or state.get("format_version") not in (1, 2):
            raise ProasError(f"{directory / STATE_FILE}: not a proas checkpoint (format {FORMAT_VERSION} expected, "
                             f"with {STATE_JSON})")
        return state
    try:
        meta = json.loads(read_regular(json_path))
        if not isinstance(meta, dict) or not isinstance(meta.get("state"), dict):
            raise TypeError("no state object")
        version, entries = meta.get("format_version"), meta.get("tensor_entries")
        plain = _from_json(meta["state"])
    except ProasError:
        raise
    except (OSError, ValueError, TypeError, AttributeError, RecursionError) as exc:
        raise ProasError(f"{json_path}: corrupt checkpoint ({type(exc).__name__})") from None
    if version not in _READABLE_VERSIONS or version < 3 or not isinstance(entries, list):
        raise ProasError(f"{json_path}: not a proas checkpoint (format {FORMAT_VERSION} expected)")
    tensors = _load_tensors(directory / STATE_FILE)
    if not isinstance(tensors, dict) or sorted(tensors) != sorted(entries) or set(tensors) & set(plain):
        raise ProasError(f"{directory / STATE_FILE}: not a proas checkpoint (not the entries {STATE_JSON} names)")
    return {**plain, **tensors, "format_version": version}


def load_plain_state(directory: Path) -> dict[str, Any]:
    """The entries of a checkpoint's state that are not tensors (step, config, RNG states, ...):
    ``state.json`` alone for format 3, without reading ``state.pt``; formats 1 and 2 read
    ``state.pt`` (weights only) and drop its tensors."""
    json_path = directory / STATE_JSON
    if not json_path.exists():
        return {k: v for k, v in load_state(directory).items() if not _holds_tensor(v)}
    try:
        meta = json.loads(read_regular(json_path))
        if not isinstance(meta, dict) or not isinstance(meta.get("state"), dict):
            raise TypeError("no state object")
        version = meta.get("format_version")
        plain = _from_json(meta["state"])
    except ProasError:
        raise
    except (OSError, ValueError, TypeError, AttributeError, RecursionError) as exc:
        raise ProasError(f"{json_path}: corrupt checkpoint ({type(exc).__name__})") from None
    if version not in _READABLE_VERSIONS or version < 3:
        raise ProasError(f"{json_path}: not a proas checkpoint (format {FORMAT_VERSION} expected)")
    return {**plain, "format_version": version}


def _load_tensors(path: Path) -> Any:
    """``torch.load(path, weights_only=True)``: tensors and plain containers, never other objects."""
    try:
        with warnings.catch_warnings():  # its notes on pickle protocols would break the one-line error
            warnings.simplefilter("ignore")
            with open_regular(path) as fh:  # a regular file, not through a link: never a FIFO or a device
                return torch.load(fh, map_location="cpu", weights_only=True)
    except ProasError:
        raise
    except FileNotFoundError:
        raise ProasError(f"{path}: missing checkpoint file") from None
    except pickle.UnpicklingError as exc:
        forbidden = _FORBIDDEN_GLOBAL.search(str(exc))
        if forbidden:
            raise ProasError(f"{path}: refused: loading it would build {forbidden.group(1)}, and a proas "
                             "checkpoint holds only tensors and plain data; nothing in it was run") from None
        raise ProasError(f"{path}: corrupt checkpoint ({type(exc).__name__})") from None
    except Exception as exc:  # noqa: BLE001 - torch raises many types for garbage
        raise ProasError(f"{path}: corrupt checkpoint ({type(exc).__name__})") from None


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The complete records of a metrics file (a torn last line from a kill is skipped).

    Every record must be a JSON object with an integer ``step``; a file that is not UTF-8, a line
    that is not JSON (but the last), or a record of another shape is a one-line ``ProasError``."""
    rows: list[dict[str, Any]] = []
    if not path.exists():
        return rows
    text = read_utf8(path, "not a metrics file")
    lines = text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except RecursionError:
            raise ProasError(f"{path}: line {i + 1} is nested too deeply for a metrics record") from None
        except ValueError:
            if i == len(lines) - 1:
                break  # torn by a kill mid-write
            raise ProasError(f"{path}: line {i + 1} is not JSON") from None
        if not isinstance(rec, dict) or not _is_step(rec.get("step")):
            raise ProasError(f"{path}: line {i + 1} is not a metrics record (a JSON object with an integer "
                             "'step' >= 0)")
        rows.append(rec)
    return rows


def _is_step(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def truncate_metrics(path: Path, last_step: int) -> list[dict[str, Any]]:
    """Keep the records up to ``last_step`` (the resumed checkpoint); rewrite atomically."""
    from proas.fileio import atomic_write_jsonl

    rows = [r for r in read_metrics(path) if r["step"] <= last_step]
    atomic_write_jsonl(path, rows)
    return rows
