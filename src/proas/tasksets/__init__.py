"""Fixed, hash-checked task sets: training schedules and validation sets (env-agnostic).

The paper fixes, before training, which tasks each RL step sees and which 128 tasks validation
uses, so that runs of different methods and seeds are comparable. This package writes and reads
those files for any environment; the library, here, only ever sees lists of task ids (strings),
and its command line (``cli``: ``proas schedule``) builds the envs that list them.

Layout under a data root (``proas/data`` for the shipped sets)::

    fixed_val_set/{env}.jsonl                 one {"task_id": ...} per line
    fixed_val_set/{env}.manifest.json         how it was made + sha256 of the jsonl
    fixed_train_set/seed{N}/{env}/schedule.jsonl   one {"step": k, "tasks": [...]} per step
    fixed_train_set/seed{N}/{env}/manifest.json    how it was made, sha256 of every file,
                                                   the disjointness check against the val set
    fix_train_set_ppo/seed{N}/{env}/...            the same for PPO (128 task slots a step)

Every file is written atomically. Loading verifies the hashes, the structure and the
disjointness of a schedule from its validation set, that a step holds distinct tasks (unless the
training pool is smaller than a step), and the type of every manifest field; anything wrong is a
``ProasError`` with one line saying what and where.
"""

from __future__ import annotations

import json
import os
import random
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from proas.errors import ProasError
from proas.fileio import (
    atomic_write_json,
    atomic_write_jsonl,
    file_kind,
    read_regular,
    regular_file_problem,
    sha256_file,
)

__all__ = [
    "GENERATOR_VERSION",
    "SHIPPED_VAL_ENVS",
    "Schedule",
    "ValSet",
    "check_schedule_args",
    "default_root",
    "draw_schedule",
    "load_schedule",
    "load_val_set",
    "make_schedule",
    "make_val_set",
    "resolve_data_path",
    "schedule_from_config",
    "val_set_from_config",
    "schedule_dir",
    "tuning_val_set_path",
    "val_set_path",
]

#: bump when the way schedules are drawn changes (recorded in every manifest)
GENERATOR_VERSION = 1
GRPO_DIR = "fixed_train_set"
PPO_DIR = "fix_train_set_ppo"
VAL_DIR = "fixed_val_set"
#: validation sets for tuning only (other tasks than ``fixed_val_set``; docs/study-protocol.md)
TUNE_DIR = "tuning_val_set"
#: the envs whose validation set ships inside the package (``VAL_DIR/<env>.jsonl``): a run on one
#: of them never falls back to the env's ``valid`` split, since a missing file means a broken install
SHIPPED_VAL_ENVS = ("household", "shop")
SCHEDULE_FILE = "schedule.jsonl"
MANIFEST_FILE = "manifest.json"


def default_root() -> Path:
    """The data root shipped inside the package (``proas/data``)."""
    return Path(__file__).resolve().parents[1] / "data"


def _env_name(env: str) -> str:
    """``env`` as a file or folder name under the data root: a plain name, never a path."""
    if (not isinstance(env, str) or not env or env in (".", "..") or "/" in env or "\\" in env
            or any(ord(c) < 32 for c in env)):
        raise ProasError(f"env name {env!r} cannot name a task set file: it must be a plain name")
    return env


def val_set_path(env: str, root: str | Path | None = None) -> Path:
    return Path(root if root is not None else default_root()) / VAL_DIR / f"{_env_name(env)}.jsonl"


def tuning_val_set_path(env: str, root: str | Path | None = None) -> Path:
    return Path(root if root is not None else default_root()) / TUNE_DIR / f"{_env_name(env)}.jsonl"


def _val_manifest_path(val_path: Path) -> Path:
    return val_path.with_name(val_path.name[: -len(".jsonl")] + ".manifest.json")


def schedule_dir(env: str, seed: int, root: str | Path | None = None, ppo: bool = False) -> Path:
    base = Path(root if root is not None else default_root())
    return base / (PPO_DIR if ppo else GRPO_DIR) / f"seed{seed}" / _env_name(env)


def check_schedule_args(env: str, seed: int, steps: int, per_step: int) -> None:
    """Refuse, before anything is drawn or written, a schedule's env name that is not a plain
    name, a seed < 0 (it names the ``seed{N}`` folder), and steps or tasks a step < 1."""
    _env_name(env)
    for name, value, least in (("seed", seed, 0), ("steps", steps, 1), ("per_step", per_step, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ProasError(f"schedule of {env}: {name} must be an integer >= {least}, got {value!r}")


@dataclass(frozen=True)
class ValSet:
    """A loaded, verified validation set."""

    env: str
    task_ids: list[str]
    path: Path
    sha256: str
    manifest: dict[str, Any]


@dataclass(frozen=True)
class Schedule:
    """A loaded, verified training schedule: ``steps[k]`` is the task list of RL step ``k``."""

    env: str
    seed: int
    steps: list[list[str]]
    path: Path
    manifest: dict[str, Any]

    @property
    def per_step(self) -> int:
        return len(self.steps[0]) if self.steps else 0

    def tasks_at(self, step: int) -> list[str]:
        """The tasks of RL step ``step``; past the end the schedule wraps around."""
        return list(self.steps[step % len(self.steps)])


# --------------------------------------------------------------------------- validation sets


def _check_ids(ids: Sequence[str], what: str) -> list[str]:
    ids = list(ids)
    bad = [t for t in ids if not isinstance(t, str) or not t]
    if bad:
        raise ProasError(f"{what}: task ids must be non-empty strings, got {bad[0]!r}")
    return ids


def _val_ids(env: str, task_ids: Sequence[str]) -> list[str]:
    ids = _check_ids(task_ids, f"validation set of {env}")
    if not ids:
        raise ProasError(f"validation set of {env}: no task ids given")
    dup = _first_duplicate(ids)
    if dup is not None:
        raise ProasError(f"validation set of {env}: task {dup!r} appears twice; tasks must be unique")
    return ids


def make_val_set(
    env: str,
    task_ids: Sequence[str],
    root: str | Path | None = None,
    source: str = "",
    path: str | Path | None = None,
    kind: str = "fixed_val_set",
) -> Path:
    """Write the validation set ``task_ids`` (unique, in this order) for ``env``; return its path.

    It goes to ``fixed_val_set/{env}.jsonl`` under ``root``, or to ``path`` (a ``.jsonl`` file,
    its manifest beside it) when given; ``kind`` is recorded in the manifest (``tuning_val_set``
    for the tuning sets of the held-out study, docs/study-protocol.md).
    """
    ids = _val_ids(env, task_ids)
    path = Path(path) if path is not None else val_set_path(env, root)
    if not path.name.endswith(".jsonl"):
        raise ProasError(f"{path}: a validation set is a .jsonl file")
    atomic_write_jsonl(path, ({"task_id": t} for t in ids))
    manifest = {
        "kind": kind,
        "env": env,
        "size": len(ids),
        "generator_version": GENERATOR_VERSION,
        "source": source,
        "files": {path.name: sha256_file(path)},
    }
    atomic_write_json(_val_manifest_path(path), manifest)
    return path


def load_val_set(env: str | None = None, root: str | Path | None = None, path: str | Path | None = None) -> ValSet:
    """Load and verify a validation set, by ``env`` (under ``root``) or by explicit ``path``."""
    if path is None:
        if env is None:
            raise ProasError("load_val_set: give an env name or a path")
        path = val_set_path(env, root)
    path = Path(path)
    if path.is_dir():
        if env is None:
            raise ProasError(f"{path}: is a directory; give the env name or the .jsonl file")
        path = path / f"{env}.jsonl"
    if not path.name.endswith(".jsonl"):
        raise ProasError(f"{path}: a validation set is a .jsonl file")
    problem = regular_file_problem(path, follow_symlinks=True)
    if problem is not None:
        raise ProasError(f"{path}: validation set {problem}")
    manifest = _read_manifest(_val_manifest_path(path))
    digest = _verify_files(path.parent, manifest, [path.name])
    rows = _read_jsonl(path)
    ids = []
    for n, row in enumerate(rows, 1):
        if not isinstance(row, dict) or not isinstance(row.get("task_id"), str):
            raise ProasError(f"{path}:{n}: expected an object with a string 'task_id'")
        ids.append(row["task_id"])
    dup = _first_duplicate(ids)
    if dup is not None:
        raise ProasError(f"{path}: task {dup!r} appears twice; a validation set holds unique tasks")
    if manifest.get("size") != len(ids):
        raise ProasError(f"{path}: holds {len(ids)} tasks but its manifest says {manifest.get('size')}")
    return ValSet(
        env=str(manifest.get("env", env)),
        task_ids=ids,
        path=path,
        sha256=digest[path.name],
        manifest=manifest,
    )


# --------------------------------------------------------------------------- schedules


def draw_schedule(train_ids: Sequence[str], steps: int, per_step: int, seed: int) -> list[list[str]]:
    """Draw ``steps`` batches of ``per_step`` tasks from ``train_ids``, deterministic in ``seed``.

    Like a shuffling data loader: the pool is shuffled, consumed in order, and reshuffled when it
    runs out, so every task is seen once before any is seen twice. A batch never holds the same
    task twice while the pool is at least ``per_step`` large (a task split across an epoch
    boundary is swapped for a fresh one from the next epoch).
    """
    pool = sorted(set(_check_ids(train_ids, "training pool")))
    if not pool:
        raise ProasError("training pool is empty")
    if steps <= 0 or per_step <= 0:
        raise ProasError(f"steps and per_step must be positive, got {steps} and {per_step}")
    rng = random.Random(f"proas-schedule:{seed}")

    def epoch() -> list[str]:
        fresh = pool[:]
        rng.shuffle(fresh)
        return fresh

    order: list[str] = []  # a stack: the next task is order[-1]
    out: list[list[str]] = []
    for _ in range(steps):
        batch: list[str] = []
        in_batch: set[str] = set()
        while len(batch) < per_step:
            if not order:
                order = epoch()
            task = order.pop()
            if task in in_batch and len(pool) >= per_step:
                idx = next((i for i in range(len(order) - 1, -1, -1) if order[i] not in in_batch), None)
                if idx is None:
                    order = epoch() + order  # the next epoch, drawn after what is left
                    idx = next(i for i in range(len(order) - 1, -1, -1) if order[i] not in in_batch)
                swap = order.pop(idx)
                order.append(task)  # the repeated task opens the next batch instead
                task = swap
            batch.append(task)
            in_batch.add(task)
        out.append(batch)
    return out


def make_schedule(
    env: str,
    train_ids: Sequence[str],
    seed: int,
    steps: int = 150,
    per_step: int = 16,
    ppo: bool = False,
    root: str | Path | None = None,
    val_ids: Sequence[str] | None = None,
    source: str = "",
    made_by: str = "",
) -> Path:
    """Draw and write a training schedule; return its directory.

    The validation set of ``env`` must already exist under ``root`` (``make_val_set``) unless
    ``val_ids`` is given, in which case it is written first. The schedule is drawn from
    ``train_ids`` minus the validation tasks; the manifest records the validation set's hash and
    the (empty) overlap, and ``load_schedule`` checks both again. Every input is checked, and the
    schedule drawn, before anything is written.
    """
    check_schedule_args(env, seed, steps, per_step)
    val_set = set(_val_ids(env, val_ids) if val_ids is not None else load_val_set(env, root).task_ids)
    pool = [t for t in _check_ids(train_ids, f"training pool of {env}") if t not in val_set]
    if not pool:
        raise ProasError(f"training pool of {env}: no task left once the validation tasks are taken out")
    batches = draw_schedule(pool, steps, per_step, seed)
    overlap = sorted({t for b in batches for t in b} & val_set)
    if overlap:  # pragma: no cover - the pool excludes them; kept as a guard for future draws
        raise ProasError(f"schedule for {env} seed {seed} shares task {overlap[0]!r} with the validation set")
    if val_ids is not None:
        make_val_set(env, val_ids, root, source=source)
    val = load_val_set(env, root)
    out_dir = schedule_dir(env, seed, root, ppo)
    sched_path = out_dir / SCHEDULE_FILE
    atomic_write_jsonl(sched_path, ({"step": k, "tasks": b} for k, b in enumerate(batches)))
    base = Path(root if root is not None else default_root())
    manifest = {
        "kind": "fix_train_set_ppo" if ppo else "fixed_train_set",
        "env": env,
        "seed": seed,
        "steps": steps,
        "per_step": per_step,
        "generator_version": GENERATOR_VERSION,
        "draw": "shuffled epochs over the training pool, python random.Random('proas-schedule:<seed>')",
        "source": source,
        "made_by": made_by or "proas.tasksets.make_schedule",
        "pool_size": len(set(pool)),
        "files": {SCHEDULE_FILE: sha256_file(sched_path)},
        "val_set": {
            "path": val.path.relative_to(base).as_posix(),  # relative: loading refuses any other
            "sha256": val.sha256,
            "size": len(val.task_ids),
        },
        "disjoint_from_val": {"checked": True, "overlap": len(overlap)},
    }
    atomic_write_json(out_dir / MANIFEST_FILE, manifest)
    return out_dir


def load_schedule(path: str | Path, val_path: str | Path | None = None) -> Schedule:
    """Load and verify a schedule directory (or its ``schedule.jsonl``).

    Checks the sha256 of every file listed in the manifest, the structure (steps 0..n-1 in
    order, ``per_step`` tasks each), and that no task is in the validation set: the one at
    ``val_path`` if given, else the one the manifest names, found relative to the data root the
    schedule lies in. The validation set's hash must match the one recorded at make time.
    """
    path = Path(path)
    sched_dir = path.parent if path.name == SCHEDULE_FILE else path
    if not sched_dir.is_dir():
        try:
            mode = os.stat(sched_dir).st_mode
        except OSError:
            raise ProasError(f"{sched_dir}: no such schedule directory") from None
        kind = "a regular file" if stat.S_ISREG(mode) else file_kind(mode)
        raise ProasError(f"{sched_dir}: is {kind}, not a schedule directory")
    manifest = _read_manifest(sched_dir / MANIFEST_FILE)
    _verify_files(sched_dir, manifest, [SCHEDULE_FILE])
    env = manifest.get("env")
    if not isinstance(env, str):
        raise ProasError(f"{sched_dir / MANIFEST_FILE}: manifest lacks the env name")
    rows = _read_jsonl(sched_dir / SCHEDULE_FILE)
    steps: list[list[str]] = []
    for n, row in enumerate(rows, 1):
        where = f"{sched_dir / SCHEDULE_FILE}:{n}"
        if not isinstance(row, dict) or row.get("step") != n - 1:
            raise ProasError(f"{where}: expected {{\"step\": {n - 1}, \"tasks\": [...]}}")
        tasks = row.get("tasks")
        if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) and t for t in tasks):
            raise ProasError(f"{where}: 'tasks' must be a non-empty list of task-id strings")
        steps.append(tasks)
    if not steps:
        raise ProasError(f"{sched_dir / SCHEDULE_FILE}: the schedule holds no steps")
    if manifest.get("steps") != len(steps):
        raise ProasError(f"{sched_dir}: {len(steps)} steps in the file, {manifest.get('steps')} in the manifest")
    per_step = manifest.get("per_step")
    if per_step is None:
        raise ProasError(f"{sched_dir / MANIFEST_FILE}: manifest lacks 'per_step'")
    bad = next((k for k, b in enumerate(steps) if len(b) != per_step), None)
    if bad is not None:
        raise ProasError(f"{sched_dir}: step {bad} has {len(steps[bad])} tasks, the manifest says {per_step}")
    pool_size = manifest.get("pool_size")
    if pool_size is None or pool_size >= per_step:  # only a pool smaller than a step repeats a task in it
        for k, batch in enumerate(steps):
            dup = _first_duplicate(batch)
            if dup is not None:
                why = ("its manifest records no pool_size" if pool_size is None
                       else f"its pool of {pool_size} tasks is not smaller than a step")
                raise ProasError(f"{sched_dir}: step {k} holds task {dup!r} more than once; a step of this "
                                 f"schedule holds distinct tasks ({why})")
    val_info = manifest.get("val_set")
    if not isinstance(val_info, dict):
        raise ProasError(f"{sched_dir / MANIFEST_FILE}: manifest lacks the validation-set record")
    if val_path is None:
        rel = Path(str(val_info.get("path", "")))
        val_path = rel if rel.is_absolute() else _root_of(sched_dir) / rel
    val = load_val_set(env, path=val_path)
    if val.sha256 != val_info.get("sha256"):
        raise ProasError(
            f"{sched_dir}: validation set {val.path} changed since the schedule was made "
            f"(sha256 {val.sha256[:12]}..., manifest records {str(val_info.get('sha256'))[:12]}...)"
        )
    val_ids = set(val.task_ids)
    shared = next((t for b in steps for t in b if t in val_ids), None)
    if shared is not None:
        raise ProasError(f"{sched_dir}: task {shared!r} is in both the schedule and the validation set")
    return Schedule(env=env, seed=int(manifest.get("seed", -1)), steps=steps, path=sched_dir, manifest=manifest)


# --------------------------------------------------------------------------- config


def resolve_data_path(path: str | Path) -> Path:
    """``path`` as given if it exists, else relative to the shipped data root (the seed's
    ``recipe/graph_guide/data``), so ``fixed_train_set/seed0/household`` works anywhere."""
    p = Path(path)
    if p.exists():
        return p
    q = default_root() / p
    if not p.is_absolute() and q.exists():
        return q
    raise ProasError(f"{path}: not found (looked here and under the shipped data {default_root()})")


def _section(cfg: Any, key: str) -> Any:
    if cfg is None:
        return None
    try:
        return cfg.get(key)
    except AttributeError:
        raise ProasError(f"env config must be a mapping, got {type(cfg).__name__}") from None


def schedule_from_config(env_cfg: Any) -> Schedule | None:
    """The schedule named by ``env.fixed_train_set.path``; ``None`` when unset (sample online)."""
    sec = _section(env_cfg, "fixed_train_set")
    path = _section(sec, "path") if sec is not None else None
    if not path:
        return None
    return load_schedule(resolve_data_path(str(path)))


def val_set_from_config(env_cfg: Any, env: str) -> ValSet | None:
    """The fixed validation set when ``env.fixed_val_set.enabled`` is true (else ``None``):
    ``env.fixed_val_set.path`` when set (as the trainer), else the one shipped for ``env``."""
    sec = _section(env_cfg, "fixed_val_set")
    if sec is None or not _section(sec, "enabled"):
        return None
    path = _section(sec, "path")
    if path:
        return load_val_set(env, path=resolve_data_path(str(path)))
    return load_val_set(env)


# --------------------------------------------------------------------------- helpers


def _root_of(sched_dir: Path) -> Path:
    # <root>/<fixed_train_set|fix_train_set_ppo>/seed{N}/{env}
    return sched_dir.resolve().parents[2]


def _first_duplicate(ids: Sequence[str]) -> str | None:
    seen: set[str] = set()
    for t in ids:
        if t in seen:
            return t
        seen.add(t)
    return None


#: the type of each field a manifest may hold (``int``: an integer >= 0, never a boolean); a
#: field of another type, or a file name that is not a plain name, makes the manifest invalid
_MANIFEST_FIELDS: dict[str, type] = {
    "kind": str, "env": str, "source": str, "made_by": str, "draw": str, "generator_version": int,
    "seed": int, "steps": int, "per_step": int, "pool_size": int, "size": int,
    "files": dict, "val_set": dict, "disjoint_from_val": dict,
}
_VAL_RECORD_FIELDS: dict[str, type] = {"path": str, "sha256": str, "size": int}
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _check_fields(obj: dict[str, Any], fields: dict[str, type], where: str) -> None:
    for key, kind in fields.items():
        if key not in obj:
            continue
        value = obj[key]
        if kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        else:
            ok = isinstance(value, kind)
        if not ok:
            want = {int: "an integer >= 0", str: "a string", dict: "an object"}[kind]
            got = value if kind is int and isinstance(value, int) and not isinstance(value, bool) else _kind(value)
            raise ProasError(f"{where}: field {key!r} must be {want}, got {got}")


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _read_manifest(path: Path) -> dict[str, Any]:
    problem = regular_file_problem(path, follow_symlinks=True)
    if problem is not None:  # "is missing", or what stands in its place ("is a FIFO, ...")
        raise ProasError(f"{path}: manifest {problem}")
    try:
        obj = json.loads(read_regular(path, follow_symlinks=True).decode("utf-8"))
    # ValueError: bad JSON, or an integer of more digits than Python converts;
    # RecursionError: nesting deeper than the parser goes
    except (ValueError, RecursionError) as exc:
        raise ProasError(f"{path}: manifest is not valid JSON ({exc.__class__.__name__})") from None
    except OSError as exc:
        raise ProasError(f"{path}: cannot read ({exc.strerror})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("files"), dict):
        raise ProasError(f"{path}: manifest must be an object with a 'files' map of sha256 digests")
    _check_fields(obj, _MANIFEST_FIELDS, str(path))
    for name, digest in obj["files"].items():
        if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
            raise ProasError(f"{path}: 'files' names {name!r}; a manifest lists plain file names beside it")
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise ProasError(f"{path}: 'files' gives {name!r} {_kind(digest)} {str(digest)[:20]!r}, "
                             "not a sha256 digest (64 hex digits)")
    if "val_set" in obj:
        _check_fields(obj["val_set"], _VAL_RECORD_FIELDS, f"{path}: val_set")
        rel = obj["val_set"].get("path")
        # a crafted manifest must not make proas read (and hash) a file outside the data root
        if isinstance(rel, str) and (Path(rel).is_absolute() or ".." in Path(rel).parts):
            raise ProasError(f"{path}: val_set path {rel!r} leads outside the data root; a manifest names its "
                             "validation set relative to the root, without '..'")
    return obj


def _verify_files(directory: Path, manifest: dict[str, Any], required: list[str]) -> dict[str, str]:
    files: dict[str, Any] = manifest["files"]
    for name in required:
        if name not in files:
            raise ProasError(f"{directory}: manifest records no hash for {name}")
    digests = {}
    for name, want in files.items():
        fpath = directory / name
        problem = regular_file_problem(fpath, follow_symlinks=True)
        if problem is not None:
            raise ProasError(f"{fpath}: file {problem}")
        got = sha256_file(fpath)
        if got != want:
            raise ProasError(
                f"{fpath}: sha256 mismatch (file {got[:12]}..., manifest {str(want)[:12]}...); the file was changed"
            )
        digests[name] = got
    return digests


def _read_jsonl(path: Path) -> list[Any]:
    rows = []
    try:
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ProasError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
                except (ValueError, RecursionError) as exc:  # too many digits, too deep
                    raise ProasError(f"{path}:{n}: not valid JSON ({exc.__class__.__name__})") from None
    except OSError as exc:
        raise ProasError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ProasError(f"{path}: not UTF-8 text") from None
    return rows
