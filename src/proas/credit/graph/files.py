"""Reference graph files: the JSON record, gzip, and what ``load`` refuses.

File format (``ReferenceGraph.save`` / ``load``): JSON, gzip-compressed when the name ends in
``.gz``::

    {"format": "proas-arg", "version": 1,
     "nodes": [[state, support, is_goal], ...],
     "edges": [[u_index, action, v_index, support], ...],
     "meta": {...}}

Nodes are written in topological order. ``load`` refuses, as a one-line ``GraphFileError``: an
edge index outside ``0 .. len(nodes)-1`` (a negative one would alias a node from the end), a
support that is negative or not an integer, a repeated node or edge, and a file that holds, or
inflates to, more than ``MAX_GRAPH_BYTES`` (128 MiB) of JSON; a gzip file is inflated in
chunks, so a small file that inflates to far more is refused after reading at most that much.

The functions here read and fill a ``ReferenceGraph``'s storage directly (they are its file
methods, kept apart); use them through the graph's ``to_json`` / ``from_json`` / ``to_bytes`` /
``save`` / ``load``.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from pathlib import Path
from typing import Any

from proas.errors import ProasError
from proas.fileio import atomic_open, open_regular

__all__ = ["FORMAT", "MAX_GRAPH_BYTES", "VERSION", "GraphFileError"]

FORMAT = "proas-arg"
VERSION = 1
#: the most JSON a graph file may hold, or inflate to when gzip-compressed; a bigger one is
#: refused (a household run's graph of a few thousand states is about 0.4 MiB)
MAX_GRAPH_BYTES = 128 * 2**20
_READ_CHUNK = 1 << 20


class GraphFileError(ProasError):
    """A graph file is missing, corrupt, or of another format or version."""


def to_json(graph: Any) -> dict[str, Any]:
    """The file's JSON record of ``graph`` (a ``ReferenceGraph``)."""
    order = graph._order.sorted(graph._name)
    index = {i: k for k, i in enumerate(order)}
    return {
        "format": FORMAT,
        "version": VERSION,
        "nodes": [[graph._name[i], graph._support[i], i in graph._goal] for i in order],
        "edges": [[index[u], a, index[v], sup] for (u, a, v), sup in graph._edges.items()],
        "meta": graph.meta,
    }


def fill_from_json(graph: Any, obj: Any, where: str = "graph") -> Any:
    """Fill the empty ``graph`` from a JSON record, checking every record; return it."""
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise GraphFileError(f"{where}: not a proas reference graph (format {FORMAT!r} expected)")
    if obj.get("version") != VERSION:
        raise GraphFileError(
            f"{where}: graph file version {obj.get('version')!r} is not supported (expected {VERSION})"
        )
    graph._dist = None  # computed in one search on the first query, not edge by edge
    try:
        nodes, edges = obj["nodes"], obj["edges"]
        if not isinstance(nodes, list) or not isinstance(edges, list):
            raise TypeError("nodes and edges must be lists")
        ids = []
        for state, support, goal in nodes:
            if not isinstance(state, str) or not _is_count(support) or not isinstance(goal, bool):
                raise TypeError("bad node record (state text, support integer >= 0, goal boolean)")
            i = graph._add_node(state)
            graph._support[i] = support
            if goal:
                graph._goal.add(i)
            ids.append(i)
        if len(ids) != len(graph._id):
            raise ValueError("duplicate node")
        for u, a, v, support in edges:
            if not isinstance(a, str) or not _is_count(support):
                raise TypeError("bad edge record (action text, support integer >= 0)")
            if not (_is_index(u, len(ids)) and _is_index(v, len(ids))):
                raise ValueError(f"edge index {u!r} -> {v!r} is not a node index 0..{len(ids) - 1}")
            if (ids[u], a, ids[v]) in graph._edges:
                raise ValueError("duplicate edge")
            if not graph._add_edge(ids[u], a, ids[v], support):
                raise ValueError("edges form a cycle")
        meta = obj.get("meta", {})
        if not isinstance(meta, dict):
            raise TypeError("bad meta")
    except GraphFileError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise GraphFileError(f"{where}: corrupt graph file ({exc})") from None
    graph.meta = meta
    graph.rejected_edges = 0
    return graph


def to_bytes(record: dict[str, Any], path: str | os.PathLike) -> bytes:
    """A graph's JSON record as file content (gzip when the name ends in ``.gz``)."""
    data = json.dumps(record, separators=(",", ":")).encode("utf-8")
    if str(path).endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    return data


def write(path: str | os.PathLike, data: bytes) -> None:
    """Write file content atomically."""
    with atomic_open(path, "wb") as fh:
        fh.write(data)


def read_json(path: str | os.PathLike, max_bytes: int | None = None) -> Any:
    """The JSON object of a graph file (gunzipped when gzip); anything wrong is a one-line
    ``GraphFileError``. ``max_bytes`` defaults to ``MAX_GRAPH_BYTES``."""
    path = Path(path)
    limit = MAX_GRAPH_BYTES if max_bytes is None else max_bytes
    try:
        raw = _read_capped(path, limit)
    except FileNotFoundError:
        raise GraphFileError(f"graph file not found: {path}") from None
    except ProasError as exc:  # open_regular: a FIFO, a device, a directory
        raise GraphFileError(str(exc)) from None
    except IsADirectoryError:
        raise GraphFileError(f"cannot read graph file {path}: is a directory") from None
    # BadGzipFile, EOFError, zlib.error: a damaged or truncated gzip stream
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise GraphFileError(f"{path}: corrupt graph file ({type(exc).__name__})") from None
    except OSError as exc:
        raise GraphFileError(f"cannot read graph file {path}: {exc.strerror or exc}") from None
    if raw is None:
        raise GraphFileError(
            f"{path}: graph file holds more than {limit} bytes of JSON (the limit, MAX_GRAPH_BYTES); refused"
        )
    try:
        return json.loads(raw.decode("utf-8"))
    # RecursionError: absurdly deep JSON nesting; ValueError: bad JSON, or an integer of
    # more digits than Python converts
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise GraphFileError(f"{path}: corrupt graph file ({type(exc).__name__})") from None


def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _is_index(x: Any, n: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < n


def _read_capped(path: Path, limit: int) -> bytes | None:
    """The bytes of ``path``, gunzipped when it is gzip (by its magic number), read in chunks;
    ``None`` once they pass ``limit``."""
    with open_regular(path, follow_symlinks=True) as fh:  # never a FIFO, which would block for ever
        gzipped = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        stream = gzip.GzipFile(fileobj=fh, mode="rb") if gzipped else fh
        chunks, total = [], 0
        while True:
            chunk = stream.read(min(_READ_CHUNK, limit + 1 - total))
            if not chunk:
                return b"".join(chunks)
            total += len(chunk)
            if total > limit:
                return None
            chunks.append(chunk)
