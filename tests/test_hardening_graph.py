"""Graph files and exports under hostile content (issue #27, item 11).

A graph file is loaded exactly as its records say or refused in one line (no index aliases a
node, no support is negative); what a file inflates to is capped and read in chunks; the DOT and
GraphML exports hold any state text, the GraphML as well-formed XML.
"""

from __future__ import annotations

import gzip
import json
import re
import tracemalloc
import xml.etree.ElementTree as ET
from collections import deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proas import cli
from proas.credit import GraphFileError, ReferenceGraph
from proas.credit.graph import export as graph_export
from proas.credit.graph import files as graph_files

# ------------------------------------------------------------------ loading: the records


def _count(x) -> bool:
    return type(x) is int and x >= 0


def _index(x, n) -> bool:
    return type(x) is int and 0 <= x < n


def _acyclic(n, pairs) -> bool:
    succ = {i: set() for i in range(n)}
    for u, v in pairs:
        if u == v:
            return False
        succ[u].add(v)
    indeg = {i: 0 for i in range(n)}
    for u in succ:
        for v in succ[u]:
            indeg[v] += 1
    queue = deque(i for i in range(n) if indeg[i] == 0)
    seen = 0
    while queue:
        x = queue.popleft()
        seen += 1
        for y in succ[x]:
            indeg[y] -= 1
            if indeg[y] == 0:
                queue.append(y)
    return seen == n


#: what a support or an index may be in a hostile file
_NUMBERISH = st.one_of(st.integers(-4, 6), st.booleans(), st.floats(-3, 3), st.none(), st.text(max_size=1),
                       st.integers(-(2**70), 2**70))


@st.composite
def graph_records(draw):
    n = draw(st.integers(1, 6))
    states = draw(st.lists(st.text(max_size=3), min_size=n, max_size=n, unique=True))
    nodes = [[s, draw(_NUMBERISH), draw(st.booleans())] for s in states]
    edges = draw(st.lists(st.tuples(_NUMBERISH, st.sampled_from(["a", "b"]), _NUMBERISH, _NUMBERISH), max_size=8))
    return n, nodes, [list(e) for e in edges]


@settings(max_examples=400, deadline=None)
@given(graph_records())
def test_a_graph_file_loads_exactly_its_records_or_is_refused(records):
    n, nodes, edges = records
    obj = {"format": "proas-arg", "version": 1, "nodes": nodes, "edges": edges, "meta": {}}
    keys = [(u, a, v) for u, a, v, _ in edges]
    valid = (
        all(_count(sup) for _, sup, _ in nodes)
        and all(_index(u, n) and _index(v, n) and _count(sup) for u, _, v, sup in edges)
        and len(set(keys)) == len(keys)
        and _acyclic(n, [(u, v) for u, _, v, _ in edges])
    )
    if not valid:
        with pytest.raises(GraphFileError, match="corrupt graph file"):
            ReferenceGraph.from_json(obj)
        return
    g = ReferenceGraph.from_json(obj)
    states = [s for s, _, _ in nodes]
    assert sorted(g.nodes()) == sorted(states)
    assert {s: g.support(s) for s in states} == {s: sup for s, sup, _ in nodes}
    assert sorted(g.edges()) == sorted((states[u], a, states[v], sup) for u, a, v, sup in edges)
    assert sorted(g.goals()) == sorted(s for s, _, goal in nodes if goal)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(nodes=_JSON, edges=_JSON, meta=_JSON)
def test_any_json_in_a_graph_file_loads_or_is_one_graph_file_error(nodes, edges, meta):
    obj = {"format": "proas-arg", "version": 1, "nodes": nodes, "edges": edges, "meta": meta}
    try:
        g = ReferenceGraph.from_json(obj)
    except GraphFileError as exc:
        assert "\n" not in str(exc)
    else:
        assert all(g.support(s) >= 0 for s in g.nodes())
        assert all(sup >= 0 for *_, sup in g.edges())


@pytest.mark.parametrize("index", [-1, -2])
def test_proas_credit_refuses_a_negative_index_in_one_line_and_writes_nothing(tmp_path, capsys, index):
    traj = {"group": "g", "trajectory": "1", "reward": 1.0,
            "steps": [{"state": "A", "action": "a", "next_state": "B", "error": False}]}
    (tmp_path / "in.jsonl").write_text(json.dumps(traj) + "\n")
    graph = {"format": "proas-arg", "version": 1, "nodes": [["A", 1, False], ["B", 1, True]],
             "edges": [[0, "a", index, 1]], "meta": {}}
    (tmp_path / "g.json").write_text(json.dumps(graph))
    rc = cli.main(["credit", "--trajectories", str(tmp_path / "in.jsonl"), "--graph", str(tmp_path / "g.json"),
                   "--out", str(tmp_path / "out.jsonl")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "not a node index" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.json", "in.jsonl"]


# ------------------------------------------------------------------ loading: the size cap


def _graph_json() -> bytes:
    g = ReferenceGraph()
    g.add_path(["A", "B", "C"], ["a", "b"])
    return json.dumps(g.to_json()).encode()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pad=st.integers(0, 3000), slack=st.integers(-2, 2), gzipped=st.booleans())
def test_the_cap_counts_the_inflated_json_to_the_byte(tmp_path, pad, slack, gzipped):
    data = _graph_json() + b" " * pad  # trailing whitespace: still a valid graph file
    path = tmp_path / ("g.json.gz" if gzipped else "g.json")
    path.write_bytes(gzip.compress(data) if gzipped else data)
    limit = len(data) + slack
    if slack >= 0:
        assert ReferenceGraph.load(path, max_bytes=limit).num_nodes == 3
    else:
        with pytest.raises(GraphFileError, match=f"more than {limit} bytes"):
            ReferenceGraph.load(path, max_bytes=limit)


def test_a_gzip_bomb_is_refused_after_inflating_at_most_the_cap(tmp_path, monkeypatch):
    path = tmp_path / "bomb.json.gz"
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(_graph_json())
        for _ in range(48):  # 48 MiB of whitespace from a file of a few dozen KiB
            fh.write(b" " * 2**20)
    assert path.stat().st_size < 2**20
    monkeypatch.setattr(graph_files, "MAX_GRAPH_BYTES", 2**20)  # the default cap is the module's
    tracemalloc.start()
    try:
        with pytest.raises(GraphFileError, match="more than 1048576 bytes") as info:
            ReferenceGraph.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "\n" not in str(info.value)
    assert peak < 6 * 2**20  # read in chunks, never whole


def test_the_default_cap_is_documented_and_generous():
    assert graph_files.MAX_GRAPH_BYTES == 128 * 2**20
    assert "MAX_GRAPH_BYTES" in graph_files.__doc__


# ------------------------------------------------------------------ exports

_ANY_TEXT = st.text(alphabet=st.characters(blacklist_categories=()), max_size=6)  # surrogates included
_ESC = re.compile(r"\\(\\|\"|n|x[0-9a-f]{2}|u[0-9a-f]{4})")


def _unescape(text: str) -> str:
    def one(m):
        tok = m.group(1)
        return {"\\": "\\", '"': '"', "n": "\n"}.get(tok) or chr(int(tok[1:], 16))
    return _ESC.sub(one, text)


def _graph(paths) -> ReferenceGraph:
    g = ReferenceGraph()
    for nodes, actions in paths:
        g.add_path(nodes, actions[: len(nodes) - 1])
    return g


_PATHS = st.lists(
    st.tuples(st.lists(_ANY_TEXT, min_size=1, max_size=4, unique=True),
              st.lists(_ANY_TEXT, min_size=3, max_size=3)),
    min_size=1, max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(_PATHS)
def test_graphml_export_is_well_formed_xml_for_any_text(paths):
    g = _graph(paths)
    root = ET.fromstring(g.export_bytes("g.graphml"))
    ns = {"g": "http://graphml.graphdrawing.org/xmlns"}
    ids = [n.get("id") for n in root.iterfind(".//g:node", ns)]
    escaped = any(d.text == "True" for d in root.iterfind("./g:graph/g:data", ns))
    states = [_unescape(i) for i in ids] if escaped else ids
    assert sorted(states) == sorted(g.nodes())  # every node, none merged with another
    assert len(root.findall(".//g:edge", ns)) == g.num_edges
    clean = all(not graph_export._XML_UNSAFE.search(t) for t in g.nodes() + [a for _, a, _, _ in g.edges()])
    assert escaped == (not clean)


@settings(max_examples=200, deadline=None)
@given(_PATHS)
def test_dot_export_holds_any_text_and_gives_it_back(paths):
    g = _graph(paths)
    text = g.export_bytes("g.dot").decode("utf-8")
    assert not graph_export._DOT_UNSAFE.search(text.replace("\n", ""))
    quoted = r'"((?:[^"\\]|\\.)*)"'
    names = re.findall(rf"^  {quoted} \[support=", text, re.M)
    assert sorted(_unescape(n) for n in names) == sorted(g.nodes())
    edges = re.findall(rf"^  {quoted} -> {quoted} \[label={quoted}, support=(\d+)\];$", text, re.M)
    assert sorted((_unescape(u), _unescape(a), _unescape(v), int(s)) for u, v, a, s in edges) == sorted(g.edges())


def test_exports_of_a_loaded_graph_with_lone_surrogates_and_controls(tmp_path):
    # JSON carries lone surrogates (\ud800) and control characters: a saved graph may hold them
    raw = ('{"format": "proas-arg", "version": 1, "nodes": [["a\\ud800", 1, false], ["b\\u0001\\u001b", 1, true]],'
           ' "edges": [[0, "go\\u0000", 1, 1]], "meta": {}}')
    (tmp_path / "g.json").write_text(raw)
    g = ReferenceGraph.load(tmp_path / "g.json")
    g.export(tmp_path / "g.dot")
    g.export(tmp_path / "g.graphml")
    assert '"a\\ud800" -> "b\\x01\\x1b" [label="go\\x00", support=1];' in (tmp_path / "g.dot").read_text()
    ET.parse(tmp_path / "g.graphml")
