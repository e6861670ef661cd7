"""Exports of a reference graph for viewing: networkx, GraphML and Graphviz DOT.

They read the graph only through its public queries. Distance ``-1`` marks a node from which
no goal is reachable.

Exports never fail on the text of states and actions: in DOT every string is quoted with
backslashes, quotes and newlines escaped, and control characters and lone surrogates written
as ``\\xNN`` / ``\\uNNNN``; GraphML (XML 1.0) cannot carry most control characters or lone
surrogates at all, so when any state or action holds one, every text of the export is escaped
the same way (backslashes doubled, such characters as ``\\xNN`` / ``\\uNNNN``) and the graph
carries the attribute ``text_escaped=true``; otherwise the texts are written as they are.
"""

from __future__ import annotations

import io
import math
import os
import re
from pathlib import Path
from typing import Any

from proas.errors import ProasError

__all__ = ["export_bytes", "export_format", "to_dot", "to_networkx"]

# characters XML 1.0 cannot hold (C0 controls but tab, newline, carriage return; surrogates;
# U+FFFE, U+FFFF), and those DOT output escapes (C0 and C1 controls, DEL, surrogates)
_XML_UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_DOT_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _nodes(graph: Any) -> list[tuple[str, int, bool, int]]:
    """``(state, support, is_goal, distance or -1)`` per node."""
    out = []
    for state in graph.nodes():
        d = graph.distance(state)
        out.append((state, graph.support(state), graph.is_goal(state), -1 if d == math.inf else d))
    return out


def to_networkx(graph: Any):
    """A ``networkx.MultiDiGraph`` with node attributes support / goal / distance."""
    import networkx as nx

    g = nx.MultiDiGraph()
    for state, support, goal, d in _nodes(graph):
        g.add_node(state, support=support, goal=goal, distance=d)
    for u, a, v, sup in graph.edges():
        g.add_edge(u, v, action=a, support=sup)
    return g


def export_format(path: str | os.PathLike, fmt: str | None = None) -> str:
    """``graphml`` or ``dot`` for an export to ``path``; an unknown format is a ``ProasError``."""
    fmt = (fmt or Path(path).suffix.lstrip(".")).lower()
    if fmt == "gv":
        fmt = "dot"
    if fmt not in ("graphml", "dot"):
        raise ProasError(f"unknown export format {fmt!r}: choose graphml or dot")
    return fmt


def export_bytes(graph: Any, path: str | os.PathLike, fmt: str | None = None) -> bytes:
    """The content of an export of ``graph`` to ``path`` (format from ``fmt`` or the suffix)."""
    if export_format(path, fmt) == "graphml":
        import networkx as nx

        g = to_networkx(graph)
        texts = [*graph.nodes(), *(a for _, a, _, _ in graph.edges())]
        if any(_XML_UNSAFE.search(t) for t in texts):
            # XML 1.0 cannot carry these characters: escape every text, injectively
            g = nx.relabel_nodes(g, {state: _escape_text(state, _XML_UNSAFE) for state in g}, copy=True)
            for _, _, data in g.edges(data=True):
                data["action"] = _escape_text(data["action"], _XML_UNSAFE)
            g.graph["text_escaped"] = True
        buf = io.BytesIO()
        nx.write_graphml(g, buf)
        return buf.getvalue()
    return to_dot(graph).encode("utf-8")


def to_dot(graph: Any) -> str:
    """The graph in Graphviz DOT; goals are drawn with a double border."""

    def q(text: str) -> str:
        text = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return '"' + _DOT_UNSAFE.sub(lambda m: _escape_char(m.group()), text) + '"'

    lines = ["digraph ARG {", "  rankdir=LR;", "  node [shape=box];"]
    for state, support, goal, d in _nodes(graph):
        style = ", peripheries=2" if goal else ""
        lines.append(f"  {q(state)} [support={support}, distance={d}{style}];")
    for u, a, v, sup in graph.edges():
        lines.append(f"  {q(u)} -> {q(v)} [label={q(a)}, support={sup}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _escape_char(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _escape_text(text: str, unsafe: re.Pattern) -> str:
    """``text`` with backslashes doubled and each ``unsafe`` character as ``\\xNN`` / ``\\uNNNN``
    (injective: distinct texts stay distinct)."""
    return unsafe.sub(lambda m: _escape_char(m.group()), text.replace("\\", "\\\\"))
