"""Atomic file writes and hashing: nothing proas writes is ever left half-written.

A write goes to a hidden temporary ``.NAME.PID.RANDOM.tmp`` beside its target (PID: the
writer's process id) and is renamed over the target once complete. A writer killed with
SIGKILL leaves its temporary behind; the next write into that folder removes such leftovers
when they are *stale*: untouched for ``STALE_TMP_AGE_S`` (15 minutes) and, when the name carries a
process id, that process no longer runs on this machine. A live writer's temporary is therefore
never removed on its machine; a writer on another machine sharing the folder is protected by the
age alone. Temporaries without a process id (older versions of proas) go by age.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Iterable, Iterator, Sequence

from proas.errors import ProasError

#: a leftover temporary is removed only when untouched for this long (see the module docstring)
STALE_TMP_AGE_S = 15 * 60
# mkstemp's random part is 8 characters of [a-z0-9_]
_TMP_NAME = re.compile(r"^\..+?\.(?:(?P<pid>[0-9]+)\.)?[a-z0-9_]{8}\.tmp$")


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success fsync it and rename it over ``path``.

    On any exception the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent)
    binary = "b" in mode
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    # mkstemp creates 0600; give the file the mode a plain open() would (or keep the old file's)
    try:
        perm = path.stat().st_mode & 0o777
    except FileNotFoundError:
        perm = 0o666 & ~_umask()
    os.fchmod(fd, perm)
    try:
        with os.fdopen(fd, mode, encoding=None if binary else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def remove_stale_temporaries(directory: str | os.PathLike, now: float | None = None) -> list[Path]:
    """Remove the stale temporaries of killed atomic writes in ``directory``; return them."""
    now = time.time() if now is None else now
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        m = _TMP_NAME.match(entry.name)
        if m is None:
            continue
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            if now - entry.stat(follow_symlinks=False).st_mtime < STALE_TMP_AGE_S:
                continue
        except OSError:
            continue
        if m.group("pid") is not None and _pid_alive(int(m.group("pid"))):
            continue
        with contextlib.suppress(OSError):
            os.unlink(entry.path)
            removed.append(Path(entry.path))
    return removed


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process (or a pid we cannot check): treat as live
    return True


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_open(path, "w") as fh:
        fh.write(text)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_open(path, "wb") as fh:
        fh.write(data)


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> None:
    atomic_write_text(path, json.dumps(obj, indent=indent, sort_keys=False) + "\n")


def atomic_write_jsonl(path: str | os.PathLike, rows: Iterable[Any]) -> None:
    with atomic_open(path, "w") as fh:
        for row in rows:
            fh.write(json.dumps(row, separators=(",", ":")) + "\n")


def check_output_path(path: str | os.PathLike, what: str = "output") -> Path:
    """Refuse, with a one-line ``ProasError``, an output path that cannot become a file: a
    directory, a path under a file, or a folder this process may not write in. Checked before
    any work, so a bad path fails fast instead of after the computation."""
    path = Path(path)
    if str(path).endswith(os.sep) or path.is_dir():
        raise ProasError(f"{what} {path}: is a directory, not a file")
    parent = path.parent
    while not parent.exists():
        if parent.is_symlink() or parent == parent.parent:  # a dangling link or a missing root
            raise ProasError(f"{what} {path}: {parent} cannot be created")
        parent = parent.parent
    if not parent.is_dir():
        raise ProasError(f"{what} {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ProasError(f"{what} {path}: no permission to write in {parent}")
    return path


def atomic_write_all(files: Sequence[tuple[str | os.PathLike, bytes]]) -> None:
    """Write several files all or none: every one is staged (written and fsynced) beside its
    target before any is renamed into place, so a failure while writing leaves every target as
    it was. A failure is a one-line ``ProasError``."""
    staged: list[tuple[str, Path]] = []
    try:
        for target, data in files:
            target = Path(target)
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                remove_stale_temporaries(target.parent)
                fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp",
                                           dir=target.parent)
            except OSError as exc:
                raise ProasError(f"cannot write {target}: {exc.strerror or exc}") from None
            staged.append((tmp, target))
            try:
                try:
                    perm = target.stat().st_mode & 0o777
                except FileNotFoundError:
                    perm = 0o666 & ~_umask()
                with os.fdopen(fd, "wb") as fh:
                    os.fchmod(fh.fileno(), perm)
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError as exc:
                raise ProasError(f"cannot write {target}: {exc.strerror or exc}") from None
        for tmp, target in staged:
            try:
                os.replace(tmp, target)
            except OSError as exc:
                raise ProasError(f"cannot write {target}: {exc.strerror or exc}") from None
    finally:
        for tmp, _ in staged:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    for directory in {target.parent for _, target in staged}:
        _fsync_dir(directory)


def read_utf8(path: str | os.PathLike, hint: str) -> str:
    """The whole of a UTF-8 text file; unreadable or not UTF-8 is a one-line ``ProasError``.

    ``hint`` ends the not-UTF-8 message: what the file should be (``"a run's config.yaml is UTF-8"``)."""
    try:
        return Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise ProasError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ProasError(f"{path}: not UTF-8 text (byte {exc.start}); {hint}") from None


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
