"""The study tools' files read and written as data: YAML, CSV, and the names of output files.

- YAML (study configs, the copies the runner saves under ``studies/``, a run's ``config.yaml``
  that the report reads) is read with a safe loader that refuses aliases and duplicate keys. A few
  hundred bytes of nested aliases ("billion laughs") stand for billions of values once anything
  walks them; a duplicate key silently loses the first value. The shipped studies use neither.
  A file that is not a regular file, larger than ``MAX_YAML_BYTES``, not UTF-8 or nested beyond
  the parser's depth is a one-line ``ProasError``.
- CSV inputs (run records, per-seed tables) must be UTF-8 with unique header names, every row as
  wide as the header and every cell within the ``csv`` module's field limit (128 KiB); anything
  else is a one-line ``ProasError`` naming the file and line.
- CSV outputs neutralise formula cells (the OWASP rule): a text cell that starts with ``=``,
  ``+``, ``-``, ``@``, a tab or a carriage return, and is not a number, gets a leading single
  quote, so a spreadsheet shows it instead of running it. Numbers, also negative ones written as
  text (``-3.2000``), stay as they are.
- An output file's name must be a plain name: nothing written under an output directory leaves it.
"""

from __future__ import annotations

import csv
import io
import os
import re
import stat
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from proas.errors import ProasError

__all__ = ["MAX_YAML_BYTES", "csv_cell", "csv_text", "load_yaml", "output_file", "read_csv", "yaml_text"]

#: the largest YAML file read (the biggest shipped study is about 20 KB)
MAX_YAML_BYTES = 8 << 20

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def _regular_file(path: Path, what: str) -> os.stat_result:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ProasError(f"{path}: no such {what}") from None
    except OSError as exc:
        raise ProasError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ProasError(f"{path}: not a regular file; a {what} is one")
    return st


# --------------------------------------------------------------------------- YAML


def _loader():
    import yaml

    class Loader(yaml.SafeLoader):
        """``yaml.SafeLoader`` without aliases and without duplicate keys."""

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(
                    None, None, f"an alias (*{event.anchor}) is not allowed here", event.start_mark)
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: set[Any] = set()
                for key_node, _ in node.value:
                    key = self.construct_object(key_node, deep=True)
                    try:
                        again = key in seen
                    except TypeError:  # an unhashable key: the base class says so
                        continue
                    if again:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark)
                    seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return Loader


def yaml_text(text: str, where: str) -> Any:
    """``text`` as YAML data (no aliases, no duplicate keys); a problem is one line naming ``where``."""
    import yaml

    try:
        return yaml.load(text, Loader=_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f", line {mark.line + 1}" if mark is not None else ""
        problem = " ".join(str(exc.problem or exc.context or "").split())
        raise ProasError(f"{where}: not valid YAML{at}" + (f": {problem}" if problem else "")) from None
    except yaml.YAMLError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ProasError(f"{where}: not valid YAML ({first})") from None
    except RecursionError:
        raise ProasError(f"{where}: YAML nested too deeply") from None


def load_yaml(path: str | os.PathLike, what: str = "YAML file") -> Any:
    """A YAML file's data: a regular UTF-8 file of at most ``MAX_YAML_BYTES``, read with
    :func:`yaml_text`'s loader. ``what`` names the file in errors (``"experiment config"``)."""
    path = Path(path)
    st = _regular_file(path, what)
    if st.st_size > MAX_YAML_BYTES:
        raise ProasError(f"{path}: {st.st_size} bytes; a {what} is at most {MAX_YAML_BYTES >> 20} MiB")
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_YAML_BYTES + 1)
    except OSError as exc:
        raise ProasError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > MAX_YAML_BYTES:
        raise ProasError(f"{path}: a {what} is at most {MAX_YAML_BYTES >> 20} MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProasError(f"{path}: not UTF-8 text (byte {exc.start}); a {what} is UTF-8") from None
    return yaml_text(text, str(path))


# --------------------------------------------------------------------------- CSV


def read_csv(path: str | os.PathLike, what: str = "CSV file",
             required: Iterable[str] = ()) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """A CSV file's header and its rows as ``(line, {column: cell})``; blank lines are skipped.

    Not UTF-8, a NUL byte, a cell over the field limit, a header name given twice, a row of
    another width than the header, or a header without every ``required`` column is a one-line
    ``ProasError`` naming the line or the columns."""
    path = Path(path)
    _regular_file(path, what)
    rows: list[tuple[int, dict[str, str]]] = []
    reader = None
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise ProasError(f"{path}: empty; a {what} starts with a header line")
            twice = sorted({h for h in header if header.count(h) > 1})
            if twice:
                raise ProasError(f"{path}: column {twice[0]!r} appears twice in the header")
            for cells in reader:
                line = reader.line_num
                if not cells:
                    continue
                if len(cells) != len(header):
                    raise ProasError(f"{path}: line {line}: {len(cells)} cells, the header has {len(header)}")
                rows.append((line, dict(zip(header, cells))))
    except csv.Error as exc:
        raise ProasError(f"{path}: line {reader.line_num if reader else 1}: not CSV ({exc})") from None
    except UnicodeDecodeError as exc:
        raise ProasError(f"{path}: not UTF-8 text (byte {exc.start}); a {what} is UTF-8") from None
    except OSError as exc:
        raise ProasError(f"{path}: cannot read ({exc.strerror or exc})") from None
    missing = set(required) - set(header)
    if missing:
        raise ProasError(f"{path}: not a {what} (no column(s) {', '.join(sorted(missing))})")
    return header, rows


def csv_cell(value: Any) -> Any:
    """``value`` safe to open in a spreadsheet: a text cell that would be read as a formula gets
    a leading single quote; anything else (numbers, also as text) is returned as it is."""
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def csv_text(header: Sequence[str], rows: Iterable[Sequence[Any] | Mapping[str, Any]], *,
             lineterminator: str = "\n") -> str:
    """CSV text of ``header`` and ``rows`` (sequences, or mappings read by ``header``; keys
    outside it are left out), every cell through :func:`csv_cell`."""
    # the writer quotes a cell holding a character of its line terminator; with "\n" alone a
    # carriage return would go unquoted and split the row on reading: each row is written with
    # "\r\n" (CR and LF quoted) and ends with ``lineterminator``
    row_buf = io.StringIO()
    w = csv.writer(row_buf, lineterminator="\r\n")
    out = []
    for row in [header, *rows]:
        cells = [row.get(h) for h in header] if isinstance(row, Mapping) else list(row)
        row_buf.seek(0)
        row_buf.truncate()
        w.writerow([csv_cell(c) for c in cells])
        out.append(row_buf.getvalue()[:-2] + lineterminator)
    return "".join(out)


# --------------------------------------------------------------------------- output names


def output_file(directory: str | os.PathLike, name: str) -> Path:
    """``directory / name``, refused unless ``name`` is a plain file name (no separator, not
    ``.`` or ``..``, no leading dot, no NUL or control character), so the file stays in ``directory``."""
    bad = (not name or name in (".", "..") or name.startswith(".") or "/" in name or "\\" in name
           or os.sep in name or any(ord(c) < 32 for c in name))
    if bad:
        raise ProasError(f"{name!r} is not a plain file name; refusing to write outside {directory}")
    return Path(directory) / name
