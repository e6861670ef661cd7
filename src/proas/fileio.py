"""Atomic file writes and hashing: nothing proas writes is ever left half-written.

A write goes to a hidden temporary ``.NAME.PID.RANDOM.tmp`` beside its target (PID: the
writer's process id) and is renamed over the target once complete. A writer killed with
SIGKILL leaves its temporary behind; the next write into that folder removes such leftovers
when they are *stale*: untouched for ``STALE_TMP_AGE_S`` (15 minutes) and, when the name carries a
process id, that process no longer runs on this machine. A live writer's temporary is therefore
never removed on its machine; a writer on another machine sharing the folder is protected by the
age alone. Temporaries without a process id (older versions of proas) go by age.

A directory of files (an exported model, a tokenizer) is written the same way, whole:
``atomic_dir`` stages it in a hidden ``.NAME.PID.RANDOM.tmp`` directory and moves it into place
once every file is written and fsynced.

Files proas *reads* as data (checkpoints, model and tokenizer files) are opened with
``open_regular``: a regular file only, never a FIFO or a device (opening a FIFO blocks for ever,
reading ``/dev/zero`` never ends), by default not through a symbolic link, and, where the whole
file is read into memory, no larger than a bound.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import stat
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
    if path.is_dir():  # else the rename at the end fails, naming the temporary
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    make_folder(path.parent)
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


def make_folder(folder: str | os.PathLike) -> None:
    """``mkdir -p folder``, where a file in the way is ``NotADirectoryError`` naming it, as when the
    file is higher up (``Path.mkdir`` raises "File exists" when the folder itself is a file)."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(folder)) from None


def remove_stale_temporaries(directory: str | os.PathLike, now: float | None = None) -> list[Path]:
    """Remove the stale temporaries of killed atomic writes in ``directory``: files of
    ``atomic_write_*`` and staging folders of ``atomic_dir`` (a SIGKILLed ``lm export``, say),
    each older than ``STALE_TMP_AGE_S`` and named by a process that is gone; return them."""
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
            is_dir = entry.is_dir(follow_symlinks=False)
            if not (is_dir or entry.is_file(follow_symlinks=False)):
                continue
            if now - entry.stat(follow_symlinks=False).st_mtime < STALE_TMP_AGE_S:
                continue
        except OSError:
            continue
        if m.group("pid") is not None and _pid_alive(int(m.group("pid"))):
            continue
        if is_dir:
            if m.group("pid") is None:  # every staging folder names its process; this one is not ours
                continue
            shutil.rmtree(entry.path, ignore_errors=True)
            if not os.path.lexists(entry.path):
                removed.append(Path(entry.path))
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
    _writable_folder(path.parent, path, what)
    return path


def _writable_folder(start: Path, path: Path, what: str) -> Path:
    """The nearest existing folder at or above ``start``, in which ``path`` (the ``what`` to
    write) would be created; a one-line ``ProasError`` if it is not a folder, the walk meets a
    dangling link or the root, or this process may not write in it."""
    folder = start
    while not folder.exists():
        if folder.is_symlink() or folder == folder.parent:  # a dangling link or a missing root
            raise ProasError(f"{what} {path}: {folder} cannot be created")
        folder = folder.parent
    if not folder.is_dir():
        raise ProasError(f"{what} {path}: {folder} is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ProasError(f"{what} {path}: no permission to write in {folder}")
    return folder


def atomic_write_all(files: Sequence[tuple[str | os.PathLike, bytes]]) -> None:
    """Write several files all or none: every one is staged (written and fsynced) beside its
    target before any is renamed into place, so a failure while writing leaves every target as
    it was. A failure is a one-line ``ProasError``."""
    staged: list[tuple[str, Path]] = []
    try:
        for target, data in files:
            target = Path(target)
            try:
                make_folder(target.parent)
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

    ``hint`` ends the not-UTF-8 message: what the file should be (``"a run's config.yaml is UTF-8"``).
    A FIFO or a device is refused (``open_regular``), never waited on."""
    try:
        with open_regular(path, follow_symlinks=True) as fh:
            return fh.read().decode("utf-8")
    except FileNotFoundError:
        raise ProasError(f"{path}: cannot read (No such file or directory)") from None
    except OSError as exc:
        raise ProasError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ProasError(f"{path}: not UTF-8 text (byte {exc.start}); {hint}") from None


def sha256_file(path: str | os.PathLike, follow_symlinks: bool = True) -> str:
    """The sha256 of a regular file (``open_regular``: a FIFO or a device is a ``ProasError``)."""
    h = hashlib.sha256()
    with open_regular(path, follow_symlinks=follow_symlinks) as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


#: the largest metadata file (JSON, a tokenizer) read whole into memory: a tokenizer.json of a
#: large vocabulary is tens of MiB
MAX_METADATA_BYTES = 256 << 20

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def file_kind(mode: int) -> str:
    """What a ``st_mode`` is, in words (``"a FIFO"``)."""
    return next((word for test, word in _KINDS if test(mode)), "not a regular file")


def regular_file_problem(path: str | os.PathLike, *, follow_symlinks: bool = False,
                         max_bytes: int | None = None) -> str | None:
    """``None`` when ``path`` is a regular file (at most ``max_bytes`` long), else what it is
    instead (``"is a FIFO, not a regular file"``). Only ``stat``: nothing is opened."""
    try:
        st = os.stat(path, follow_symlinks=follow_symlinks)
    except FileNotFoundError:
        return "is missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return f"is {file_kind(st.st_mode)}, not a regular file"
    if max_bytes is not None and st.st_size > max_bytes:
        return f"is {st.st_size} bytes, more than the {max_bytes} a file of its kind may be"
    return None


def open_regular(path: str | os.PathLike, *, follow_symlinks: bool = False, max_bytes: int | None = None) -> IO[bytes]:
    """Open ``path`` for reading in binary, as data: a regular file only (a FIFO, a device, a
    socket or a directory is a one-line ``ProasError``, and opening never blocks), through a
    symbolic link only with ``follow_symlinks``, and at most ``max_bytes`` long. A missing
    file is ``FileNotFoundError``; other failures to open are ``ProasError``."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise ProasError(f"{path}: is a symbolic link; a file read as data must be a regular file") from None
        raise ProasError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ProasError(f"{path}: is {file_kind(st.st_mode)}; a file read as data must be a regular file")
        if max_bytes is not None and st.st_size > max_bytes:
            raise ProasError(f"{path}: is {st.st_size} bytes, more than the {max_bytes} a file of its kind may be")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike, *, follow_symlinks: bool = False,
                 max_bytes: int | None = MAX_METADATA_BYTES) -> bytes:
    """The bytes of a regular file (``open_regular``), read whole; never more than ``max_bytes``
    even when the file grows while it is read."""
    with open_regular(path, follow_symlinks=follow_symlinks, max_bytes=max_bytes) as fh:
        data = fh.read() if max_bytes is None else fh.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise ProasError(f"{path}: more than the {max_bytes} bytes a file of its kind may be")
    return data


def refuse_non_directory(path: str | os.PathLike, what: str) -> None:
    """A one-line ``ProasError`` when ``path`` exists and is not a directory (a link to one is
    fine): checked by the commands that make a directory there, before any work."""
    path = Path(path)
    if (path.exists() or path.is_symlink()) and not path.is_dir():
        raise ProasError(f"{what} {path}: exists and is not a directory")


def check_output_dir(path: str | os.PathLike, what: str = "output directory") -> Path:
    """Refuse, with a one-line ``ProasError``, a directory to write that is not new or empty: an
    existing file, a non-empty directory, a path below a file, or one in a folder this process
    may not write in. Returns the path to write (a symbolic link to a directory resolved).
    Checked before any work, so nothing is written before the output is known to be usable."""
    path = Path(path)
    if path.is_symlink() and path.is_dir():
        path = Path(os.path.realpath(path))
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise ProasError(f"{what} {path}: exists and is not a directory")
        try:
            if any(path.iterdir()):
                raise ProasError(f"{what} {path}: exists and is not empty; choose another directory")
        except OSError as exc:
            raise ProasError(f"{what} {path}: cannot be read ({exc.strerror})") from None
    _writable_folder(path if path.is_dir() else path.parent, path, what)
    return path


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, what: str = "output directory") -> Iterator[Path]:
    """Write directory ``path`` whole or not at all: yield a hidden staging directory
    (``.NAME.PID.RANDOM.tmp``) to fill; on success fsync its files and move them into place. A
    new ``path`` is staged beside it and renamed to it; an existing empty one (the current
    folder, say) is staged inside it and its files renamed up into it, so the folder itself
    stays. On any exception the staging directory (and anything moved) is removed and ``path``
    is left as it was. ``path`` is checked first (``check_output_dir``)."""
    path = check_output_dir(path, what)
    existing = path.is_dir()
    where = path if existing else path.parent
    try:
        where.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(where)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name or 'out'}.{os.getpid()}.", suffix=".tmp", dir=where))
    except OSError as exc:
        raise ProasError(f"{what} {path}: cannot be created ({exc.strerror})") from None
    moved: list[Path] = []
    try:
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp creates 0700; give it a plain mkdir's mode
        yield tmp
        for entry in os.scandir(tmp):
            if entry.is_file(follow_symlinks=False):
                fd = os.open(entry.path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        _fsync_dir(tmp)
        if existing:
            for entry in sorted(os.scandir(tmp), key=lambda e: e.name):
                target = path / entry.name
                if target.exists() or target.is_symlink():
                    raise ProasError(f"{what} {path}: was written to meanwhile ({entry.name}); nothing was written")
                os.rename(entry.path, target)
                moved.append(target)
            os.rmdir(tmp)
            _fsync_dir(path)
        else:
            try:
                os.rename(tmp, path)
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                    raise ProasError(f"{what} {path}: was created meanwhile; nothing was written") from None
                raise
    except BaseException:
        for target in moved:
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(target)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(path.parent)
