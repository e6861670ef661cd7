"""ReferenceGraph: cleaning, merging acyclic, pruning, distances, files."""

import gzip
import json
import math

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from credit_helpers import STATE, path_traj
from proas.credit import GraphFileError, ReferenceGraph, clean_path
from proas.credit.graph.order import TopologicalOrder
from proas.types import Step


def test_clean_path_drops_error_steps():
    steps = [Step("A", "a", "B"), Step("B", "bad", "B", error=True), Step("B", "b", "C")]
    assert clean_path(steps) == (["A", "B", "C"], ["a", "b"])


def test_clean_path_cuts_loops_back_to_first_visit():
    # A -> B -> C -> B -> D: the detour B -> C -> B is removed
    steps = [Step("A", "a", "B"), Step("B", "c", "C"), Step("C", "back", "B"), Step("B", "d", "D")]
    assert clean_path(steps) == (["A", "B", "D"], ["a", "d"])


def test_clean_path_loop_to_start_and_self_loop():
    steps = [Step("A", "x", "A"), Step("A", "a", "B"), Step("B", "r", "A"), Step("A", "b", "C")]
    assert clean_path(steps) == (["A", "C"], ["b"])


def test_clean_path_jump_makes_no_edge():
    steps = [Step("A", "a", "B"), Step("X", "x", "Y")]
    assert clean_path(steps) == (["A", "B", "X", "Y"], ["a", None, "x"])


def test_build_uses_only_successful_trajectories():
    good = path_traj("g", "1", 1.0, ["A", "B", "G"])
    bad = path_traj("g", "2", 0.0, ["A", "Z", "Q"])
    g = ReferenceGraph.from_trajectories([good, bad])
    assert sorted(g.nodes()) == ["A", "B", "G"]
    assert "Z" not in g and g.num_edges == 2
    assert g.goals() == ["G"]


def test_distance_and_support():
    g = ReferenceGraph.from_trajectories(
        [
            path_traj("g", "1", 1, ["A", "B", "C", "G"]),
            path_traj("g", "2", 1, ["A", "D", "G"]),
            path_traj("g", "3", 1, ["E", "F"]),
        ]
    )
    assert g.distance("A") == 2  # via D
    assert g.distance("B") == 2
    assert g.distance("G") == 0 and g.distance("F") == 0
    assert g.distance("nowhere") == float("inf")
    assert g.support("A") == 2 and g.support("G") == 2 and g.support("B") == 1
    assert g.support("nowhere") == 0


def test_edge_closing_a_cycle_is_not_added():
    g = ReferenceGraph.from_trajectories([path_traj("g", "1", 1, ["A", "B", "C"])])
    g.add_trajectories([path_traj("g", "2", 1, ["C", "A", "X"])])
    assert ("C", "C->A", "A", 1) not in set(g.edges())
    assert ("A", "A->X", "X", 1) in set(g.edges())
    assert g.rejected_edges == 1
    assert g.is_acyclic()


def test_repeated_edges_add_support_not_edges():
    t = path_traj("g", "1", 1, ["A", "B"])
    g = ReferenceGraph.from_trajectories([t, t, t])
    assert list(g.edges()) == [("A", "A->B", "B", 3)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(STATE, min_size=1, max_size=10), min_size=1, max_size=12))
def test_graph_stays_acyclic_under_any_merges(paths):
    g = ReferenceGraph()
    for k, states in enumerate(paths):
        g.add_trajectories([path_traj("g", str(k), 1, states)])
        assert g.is_acyclic()
    other = ReferenceGraph.from_trajectories([path_traj("g", "r", 1, list(reversed(paths[0])))])
    g.merge(other)
    assert g.is_acyclic()
    assert nx.is_directed_acyclic_graph(g.to_networkx())


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(STATE, min_size=2, max_size=10), min_size=1, max_size=10),
    st.floats(0, 1),
    st.integers(0, 10),
)
def test_prune_removes_the_asked_fraction(paths, fraction, seed):
    g = ReferenceGraph.from_trajectories([path_traj("g", str(k), 1, p) for k, p in enumerate(paths)])
    before = g.num_state_actions
    isolated_before = set(g.nodes()) - {u for u, _, _, _ in g.edges()} - {v for _, _, v, _ in g.edges()}
    removed = g.prune(fraction, seed=seed)
    assert removed == round(fraction * before)
    assert g.num_state_actions == before - removed
    assert g.num_state_actions == len({(u, a) for u, a, _, _ in g.edges()})
    # pruning leaves no node without edges (a single-state path never had any)
    touched = {u for u, _, v, _ in g.edges()} | {v for _, _, v, _ in g.edges()}
    if removed:
        assert set(g.nodes()) == touched
    else:
        assert set(g.nodes()) == touched | isolated_before


def test_prune_removes_state_action_pairs_and_a_transition_with_its_last_action():
    from proas.types import Step, Trajectory

    g = ReferenceGraph.from_trajectories([
        Trajectory("o", "1", 1.0, [Step("A", "go", "B"), Step("B", "x", "G")]),
        Trajectory("o", "2", 1.0, [Step("A", "walk", "B"), Step("B", "x", "G")]),
    ])
    assert g.num_state_actions == 3 and g.num_transitions == 2 and g.num_edges == 3
    # find a seed that prunes exactly (A, go): A -> B survives through "walk"
    for seed in range(50):
        h = g.copy()
        h.prune(1 / 3, seed=seed)
        if not h.has_state_action("A", "go"):
            break
    assert not h.has_state_action("A", "go") and h.has_state_action("A", "walk")
    assert h.has_transition("A", "B") and h.num_transitions == 2
    # pruning both actions of A -> B removes the transition, and A with it
    for seed in range(50):
        h = g.copy()
        h.prune(2 / 3, seed=seed)
        if h.has_state_action("B", "x"):
            break
    assert not h.has_transition("A", "B") and "A" not in h
    assert h.has_transition("B", "G") and h.num_state_actions == 1


def test_prune_is_seeded():
    paths = [["A", "B", "C", "D", "E"], ["A", "X", "Y", "E"], ["B", "Y"]]
    edges = []
    for _ in range(2):
        g = ReferenceGraph.from_trajectories([path_traj("g", str(k), 1, p) for k, p in enumerate(paths)])
        g.prune(0.4, seed=3)
        edges.append(sorted(g.edges()))
    assert edges[0] == edges[1]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(STATE, min_size=1, max_size=8), min_size=0, max_size=8), st.booleans())
def test_save_load_round_trip(tmp_path_factory, paths, gz):
    g = ReferenceGraph.from_trajectories([path_traj("g", str(k), 1, p) for k, p in enumerate(paths)])
    g.meta["note"] = "x"
    path = tmp_path_factory.mktemp("g") / ("graph.json.gz" if gz else "graph.json")
    g.save(path)
    h = ReferenceGraph.load(path)
    assert sorted(h.edges()) == sorted(g.edges())
    assert sorted(h.nodes()) == sorted(g.nodes())
    assert sorted(h.goals()) == sorted(g.goals())
    assert all(h.support(s) == g.support(s) and h.distance(s) == g.distance(s) for s in g.nodes())
    assert h.meta == {"note": "x"}


def test_load_missing_file_is_clear_error(tmp_path):
    with pytest.raises(GraphFileError, match="not found"):
        ReferenceGraph.load(tmp_path / "nope.json")


def test_load_corrupt_file_is_clear_error(tmp_path):
    g = ReferenceGraph.from_trajectories([path_traj("g", "1", 1, ["A", "B"])])
    g.save(tmp_path / "g.json")
    data = (tmp_path / "g.json").read_bytes()
    (tmp_path / "g.json").write_bytes(data[: len(data) // 2])
    with pytest.raises(GraphFileError, match="corrupt"):
        ReferenceGraph.load(tmp_path / "g.json")
    (tmp_path / "g.gz").write_bytes(gzip.compress(b"{")[:-3])
    with pytest.raises(GraphFileError, match="corrupt"):
        ReferenceGraph.load(tmp_path / "g.gz")


def test_load_wrong_version_or_format_is_clear_error(tmp_path):
    g = ReferenceGraph.from_trajectories([path_traj("g", "1", 1, ["A", "B"])])
    obj = g.to_json()
    obj["version"] = 99
    (tmp_path / "v.json").write_text(json.dumps(obj))
    with pytest.raises(GraphFileError, match="version 99"):
        ReferenceGraph.load(tmp_path / "v.json")
    (tmp_path / "f.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(GraphFileError, match="not a proas reference graph"):
        ReferenceGraph.load(tmp_path / "f.json")


def test_load_rejects_cyclic_file(tmp_path):
    obj = {"format": "proas-arg", "version": 1, "nodes": [["A", 1, False], ["B", 1, True]],
           "edges": [[0, "a", 1, 1], [1, "b", 0, 1]], "meta": {}}
    (tmp_path / "c.json").write_text(json.dumps(obj))
    with pytest.raises(GraphFileError, match="cycle"):
        ReferenceGraph.load(tmp_path / "c.json")


def test_failed_save_leaves_old_file(tmp_path, monkeypatch):
    g = ReferenceGraph.from_trajectories([path_traj("g", "1", 1, ["A", "B"])])
    g.save(tmp_path / "g.json")
    before = (tmp_path / "g.json").read_bytes()
    bigger = ReferenceGraph.from_trajectories([path_traj("g", "1", 1, ["A", "B", "C"])])

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr("proas.credit.graph.files.json.dumps", lambda *a, **k: "{" * 10)
    monkeypatch.setattr("os.replace", boom)
    with pytest.raises(RuntimeError):
        bigger.save(tmp_path / "g.json")
    assert (tmp_path / "g.json").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["g.json"]


def test_export_graphml_and_dot(tmp_path):
    g = ReferenceGraph.from_trajectories([path_traj("g", "1", 1, ["A", 'B "q"', "G"])])
    g.export(tmp_path / "g.graphml")
    back = nx.read_graphml(tmp_path / "g.graphml")
    assert set(back.nodes) == {"A", 'B "q"', "G"}
    assert back.nodes["A"]["distance"] == 2 and back.nodes["G"]["goal"] is True
    g.export(tmp_path / "g.dot")
    dot = (tmp_path / "g.dot").read_text()
    assert dot.startswith("digraph ARG {") and '"B \\"q\\""' in dot and "peripheries=2" in dot


def naive_edges(paths):
    """Reference: add each clean-path edge unless v already reaches u (plain search)."""
    succ, edges = {}, set()

    def reaches(a, b):
        stack, seen = [a], {a}
        while stack:
            x = stack.pop()
            if x == b:
                return True
            for y in succ.get(x, ()):
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        return False

    for states in paths:
        nodes, actions = clean_path(path_traj("g", "x", 1, states).steps)
        for u, a, v in zip(nodes, actions, nodes[1:]):
            if a is None or (u, a, v) in edges:
                continue
            if v in succ.get(u, ()) or not reaches(v, u):
                edges.add((u, a, v))
                succ.setdefault(u, set()).add(v)
    return edges


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from([f"s{k}" for k in range(12)]), min_size=1, max_size=12), min_size=1, max_size=15)
)
def test_incremental_order_accepts_exactly_the_edges_a_plain_search_accepts(paths):
    g = ReferenceGraph()
    for k, states in enumerate(paths):
        g.add_trajectories([path_traj("g", str(k), 1, states)])
    assert {(u, a, v) for u, a, v, _ in g.edges()} == naive_edges(paths)


def scratch_distances(g: ReferenceGraph) -> dict[str, int]:
    """Reference: goal distances by one backward breadth-first search over the public edges."""
    pred: dict[str, set[str]] = {}
    for u, _, v, _ in g.edges():
        pred.setdefault(v, set()).add(u)
    dist = {s: 0 for s in g.goals()}
    frontier = list(dist)
    while frontier:
        nxt = []
        for v in frontier:
            for u in pred.get(v, ()):
                if u not in dist:
                    dist[u] = dist[v] + 1
                    nxt.append(u)
        frontier = nxt
    return dist


def assert_consistent(g: ReferenceGraph) -> None:
    """Incremental distances equal a from-scratch search; the order is a strict topological one."""
    want = scratch_distances(g)
    assert {s: g.distance(s) for s in g.nodes()} == {s: want.get(s, math.inf) for s in g.nodes()}
    assert g.is_acyclic()
    order = g._order.ord
    orders = [order[g._id[s]] for s in g.nodes()]
    assert len(set(orders)) == len(orders)
    for u, _, v, _ in g.edges():
        assert order[g._id[u]] < order[g._id[v]]


_POOL = st.sampled_from([f"s{k}" for k in range(14)])
_OPS = st.one_of(
    st.tuples(st.just("path"), st.lists(_POOL, min_size=1, max_size=12), st.booleans()),
    st.tuples(st.just("merge"), st.lists(st.lists(_POOL, min_size=1, max_size=8), min_size=1, max_size=4)),
    st.tuples(st.just("prune"), st.floats(0, 0.6), st.integers(0, 5)),
    st.tuples(st.just("copy")),
    st.tuples(st.just("reload")),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_OPS, min_size=1, max_size=14))
def test_incremental_distances_equal_a_scratch_search_after_any_merges_and_prunes(ops):
    g = ReferenceGraph()
    for k, op in enumerate(ops):
        if op[0] == "path":  # with errors on some steps when asked: a jump, no edge
            _, states, jumps = op
            g.add_trajectories([path_traj("g", str(k), 1, states, errors={1, 4} if jumps else ())])
        elif op[0] == "merge":
            g.merge(ReferenceGraph.from_trajectories([path_traj("o", str(j), 1, p) for j, p in enumerate(op[1])]))
        elif op[0] == "prune":
            g.prune(op[1], seed=op[2])
        elif op[0] == "copy":
            g = g.copy()
        else:
            g = ReferenceGraph.from_json(json.loads(json.dumps(g.to_json())))
        assert_consistent(g)


def test_a_detour_through_known_states_moves_the_smaller_side():
    """A forward edge against the order: the side that runs dry moves; no global renumbering."""
    g = ReferenceGraph()
    g.add_path(["a", "b", "c", "d", "goal"], ["1", "2", "3", "4"])
    g.add_path(["x", "y", "goal"], ["5", "6"])  # x, y come after goal in the order
    assert [g.distance(s) for s in "abcdxy"] == [4, 3, 2, 1, 2, 1]
    g.add_path(["c", "x"], ["7"])  # c -> x: against the order, no cycle; x becomes a goal
    assert [g.distance(s) for s in "abcdxy"] == [3, 2, 1, 1, 0, 1]
    g.add_path(["y", "b"], ["8"])  # y -> b would close b -> c -> x -> y -> b: refused; b a goal
    assert g.has_transition("c", "x") and not g.has_transition("y", "b")
    assert g.rejected_edges == 1
    assert [g.distance(s) for s in "abcdxy"] == [1, 0, 1, 1, 0, 1]
    assert_consistent(g)


class _CrampedOrder(TopologicalOrder):
    """Every other gap counts as too narrow for floats: the fallbacks (slot swap, renumbering)."""

    calls = 0

    def _spread(self, lo, hi, n):
        self.calls += 1
        return None if self.calls % 2 else super()._spread(lo, hi, n)


def _cramped() -> ReferenceGraph:
    g = ReferenceGraph()
    g._order = _CrampedOrder()
    return g


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(_POOL, min_size=1, max_size=12), min_size=1, max_size=15))
def test_narrow_gaps_fall_back_to_slot_swaps_and_renumbering(paths):
    g, plain = _cramped(), ReferenceGraph()
    for k, states in enumerate(paths):
        for graph in (g, plain):
            graph.add_trajectories([path_traj("g", str(k), 1, states)])
        assert_consistent(g)
    assert set(g.edges()) == set(plain.edges())
