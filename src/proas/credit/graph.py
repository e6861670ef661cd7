"""The Agentic Reference Graph (ARG): a DAG over abstract states built from successful trajectories.

An edge is a ``(state, action, next_state)`` triple. A successful trajectory is first *cleaned*
(error steps dropped, loops cut: when a state recurs, the steps between its two visits are
removed), leaving a simple path from its start state to its goal state; clean paths are merged
edge by edge, and an edge that would close a cycle is not added. The graph keeps, per node, how
many trajectories support it and whether it is a goal (the last state of a successful
trajectory) and its shortest distance to a goal.

Evolving the graph with a batch touches only what the batch changes, so merging a batch into a
graph of ten thousand nodes costs a few milliseconds:

- acyclicity: the Pearce–Kelly dynamic topological order. An edge ``u -> v`` with
  ``ord[u] < ord[v]`` is accepted at once; otherwise a two-way search (forward from ``v``,
  backward from ``u``, both inside the order window between them) either meets, and the edge
  would close a cycle, or one side runs dry, and the window's affected nodes are reordered;
- goal distances: kept up to date as edges and goals arrive (distances only shrink then, so
  each addition relaxes backwards from where it happened); only ``prune``, which can lengthen
  them, leaves a full breadth-first recomputation to the next query.

File format (``save``/``load``): JSON, gzip-compressed when the name ends in ``.gz``::

    {"format": "proas-arg", "version": 1,
     "nodes": [[state, support, is_goal], ...],
     "edges": [[u_index, action, v_index, support], ...],
     "meta": {...}}

``load`` refuses, as a one-line ``GraphFileError``: an edge index outside ``0 .. len(nodes)-1``
(a negative one would alias a node from the end), a support that is negative or not an integer,
a repeated node or edge, and a file that holds, or inflates to, more than ``MAX_GRAPH_BYTES``
(128 MiB) of JSON; a gzip file is inflated in chunks, so a small file that inflates to far more
is refused after reading at most that much.

Exports never fail on the text of states and actions: in DOT every string is quoted with
backslashes, quotes and newlines escaped, and control characters and lone surrogates written
as ``\\xNN`` / ``\\uNNNN``; GraphML (XML 1.0) cannot carry most control characters or lone
surrogates at all, so when any state or action holds one, every text of the export is escaped
the same way (backslashes doubled, such characters as ``\\xNN`` / ``\\uNNNN``) and the graph
carries the attribute ``text_escaped=true``; otherwise the texts are written as they are.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import re
import zlib
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from proas.errors import ProasError
from proas.fileio import atomic_open
from proas.types import Step, Trajectory, as_trajectories

__all__ = ["FORMAT", "VERSION", "GraphFileError", "ReferenceGraph", "clean_path"]

FORMAT = "proas-arg"
VERSION = 1
#: the most JSON a graph file may hold, or inflate to when gzip-compressed; a bigger one is
#: refused (a household run's graph of a few thousand states is about 0.4 MiB)
MAX_GRAPH_BYTES = 128 * 2**20
_READ_CHUNK = 1 << 20


class GraphFileError(ProasError):
    """A graph file is missing, corrupt, or of another format or version."""


def clean_path(steps: Sequence[Step]) -> tuple[list[str], list[str | None]]:
    """Clean one successful trajectory into a simple path.

    Error steps are dropped; when a state recurs, everything since its first visit is cut.
    Returns ``(nodes, actions)`` with ``len(actions) == len(nodes) - 1``; ``actions[k]`` labels
    the edge ``nodes[k] -> nodes[k+1]``, or is ``None`` where the log jumps (a kept step starts
    from a state other than where the previous kept step ended; no edge is made there).
    """
    return _clean(
        [s.state for s in steps], [s.next_state for s in steps], [s.action for s in steps], [s.error for s in steps]
    )


def _clean(
    state: Sequence[Any], next_state: Sequence[Any], action: Sequence[Any], error: Sequence[bool]
) -> tuple[list[Any], list[Any]]:
    """``clean_path`` on parallel per-step sequences of any hashable labels (texts, or codes
    that are equal exactly when the texts are, as in a ``CreditBatch``)."""
    nodes: list[Any] = []
    actions: list[Any] = []
    where: dict[Any, int] = {}

    def visit(node: Any, act: Any) -> None:
        if node in where:  # a loop: cut back to the first visit
            k = where[node]
            for dropped in nodes[k + 1 :]:
                del where[dropped]
            del nodes[k + 1 :]
            del actions[k:]
            return
        if nodes:
            actions.append(act)
        where[node] = len(nodes)
        nodes.append(node)

    for s, ns, a, err in zip(state, next_state, action, error):
        if err:
            continue
        if not nodes or s != nodes[-1]:
            visit(s, None)
        visit(ns, a)
    return nodes, actions


class ReferenceGraph:
    """A directed acyclic graph over abstract states, with support counts and goal distances."""

    def __init__(self) -> None:
        self._id: dict[str, int] = {}
        self._name: dict[int, str] = {}
        self._support: dict[int, int] = {}
        self._goal: set[int] = set()
        # edge triples and their support; successors/predecessors count the triples per pair
        self._edges: dict[tuple[int, str, int], int] = {}
        self._succ: dict[int, dict[int, int]] = {}
        self._pred: dict[int, dict[int, int]] = {}
        # how many edge triples carry each (state, action) pair: the pairs Incomplete prunes
        # and the ``state_action`` reasonableness rule looks up
        self._state_action: dict[tuple[int, str], int] = {}
        self._ord: dict[int, float] = {}
        self._next_id = 0
        self._ord_values: set[float] = set()  # orders are unique; new ones must not collide
        self._next_ord = 0.0
        self._min_ord = 0.0
        # shortest number of edges to a goal, per node that reaches one; None: recompute on the
        # next query (after ``prune`` or a load), else kept current by ``_shorten``
        self._dist: dict[int, int] | None = {}
        self.meta: dict[str, Any] = {}
        #: number of edges refused because they would have closed a cycle
        self.rejected_edges = 0

    # ------------------------------------------------------------------ queries
    def __len__(self) -> int:
        return len(self._id)

    def __contains__(self, state: object) -> bool:
        return state in self._id

    @property
    def num_nodes(self) -> int:
        return len(self._id)

    @property
    def num_edges(self) -> int:
        return len(self._edges)

    def nodes(self) -> list[str]:
        return list(self._id)

    def edges(self) -> Iterator[tuple[str, str, str, int]]:
        """``(state, action, next_state, support)`` for every edge."""
        for (u, a, v), sup in self._edges.items():
            yield self._name[u], a, self._name[v], sup

    def goals(self) -> list[str]:
        return [self._name[g] for g in self._goal]

    def is_goal(self, state: str) -> bool:
        i = self._id.get(state)
        return i is not None and i in self._goal

    def support(self, state: str) -> int:
        """How many merged trajectories pass through ``state`` (0 if unknown)."""
        i = self._id.get(state)
        return 0 if i is None else self._support[i]

    def contains_many(self, states: Sequence[str]) -> np.ndarray:
        """``(len(states),)`` bool: which states are nodes."""
        ids = self._id
        return np.fromiter((s in ids for s in states), dtype=bool, count=len(states))

    def has_transition(self, state: str, next_state: str) -> bool:
        """Whether some edge leads from ``state`` to ``next_state`` (any action)."""
        u, v = self._id.get(state), self._id.get(next_state)
        return u is not None and v is not None and v in self._succ.get(u, ())

    def has_state_action(self, state: str, action: str) -> bool:
        """Whether some edge leaves ``state`` labelled ``action``."""
        u = self._id.get(state)
        return u is not None and (u, action) in self._state_action

    def transitions_many(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """``(len(pairs),)`` bool: ``has_transition`` of each ``(state, next_state)``."""
        return np.fromiter((self.has_transition(u, v) for u, v in pairs), dtype=bool, count=len(pairs))

    def state_actions_many(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """``(len(pairs),)`` bool: ``has_state_action`` of each ``(state, action)``."""
        return np.fromiter((self.has_state_action(u, a) for u, a in pairs), dtype=bool, count=len(pairs))

    @property
    def num_state_actions(self) -> int:
        """Distinct ``(state, action)`` pairs over the edges."""
        return len(self._state_action)

    @property
    def num_transitions(self) -> int:
        """Distinct ``(state, next_state)`` pairs over the edges."""
        return sum(len(s) for s in self._succ.values())

    def distance(self, state: str) -> float:
        """Shortest number of edges from ``state`` to a goal; ``inf`` if none or unknown."""
        i = self._id.get(state)
        if i is None:
            return math.inf
        return self._distances().get(i, math.inf)

    def distances_many(self, states: Sequence[str]) -> np.ndarray:
        """``(len(states),)`` float: distance to goal of each state (``inf`` if unknown)."""
        dist = self._distances()
        ids = self._id
        return np.fromiter(
            (dist.get(ids.get(s, -1), math.inf) for s in states), dtype=np.float64, count=len(states)
        )

    def _distances(self) -> dict[int, int]:
        if self._dist is None:
            self._dist = self._bfs_distances()
        return self._dist

    def _bfs_distances(self) -> dict[int, int]:
        """Goal distances from scratch: one backward breadth-first search from all goals."""
        dist = {g: 0 for g in self._goal}
        queue = deque(self._goal)
        while queue:
            v = queue.popleft()
            dv = dist[v] + 1
            for u in self._pred.get(v, ()):
                if u not in dist:
                    dist[u] = dv
                    queue.append(u)
        return dist

    def _shorten(self, node: int, d: int) -> None:
        """``node`` now reaches a goal in ``d`` edges (a new goal, or a new edge out of it):
        lower its distance and its ancestors' where that is shorter than what they had.

        Additions only ever shorten distances, and the relaxation runs breadth-first from
        ``node``, so each ancestor is settled once and only ancestors that improve are visited.
        """
        dist = self._dist
        if dist is None:  # stale anyway: the next query recomputes everything
            return
        old = dist.get(node)
        if old is not None and old <= d:
            return
        dist[node] = d
        pred = self._pred
        queue = deque((node,))
        while queue:
            x = queue.popleft()
            dx = dist[x] + 1
            for p in pred.get(x, ()):
                dp = dist.get(p)
                if dp is None or dp > dx:
                    dist[p] = dx
                    queue.append(p)

    def is_acyclic(self) -> bool:
        """Check acyclicity from scratch (Kahn's algorithm); used by tests and ``load``."""
        indeg = {v: len(self._pred.get(v, {})) for v in self._id.values()}
        queue = deque(v for v, d in indeg.items() if d == 0)
        seen = 0
        while queue:
            v = queue.popleft()
            seen += 1
            for w in self._succ.get(v, ()):
                indeg[w] -= 1
                if indeg[w] == 0:
                    queue.append(w)
        return seen == len(indeg)

    # ------------------------------------------------------------------ building
    @classmethod
    def from_trajectories(cls, trajectories: Iterable[Trajectory | Mapping[str, Any]]) -> ReferenceGraph:
        """Build from the successful trajectories of ``trajectories`` (others are ignored), each a
        ``Trajectory`` or its JSON record."""
        graph = cls()
        graph.add_trajectories(trajectories)
        return graph

    def add_trajectories(self, trajectories: Iterable[Trajectory | Mapping[str, Any]]) -> int:
        """Evolve: clean and merge every successful trajectory; return the number of new edges.
        Trajectories may be given as JSON records (``proas.types.as_trajectories``)."""
        before = len(self._edges)
        for traj in as_trajectories(trajectories):
            if traj.success and traj.steps:
                self.add_path(*clean_path(traj.steps))
        return len(self._edges) - before

    def add_batch(self, batch: Any) -> int:
        """``add_trajectories`` on a ``proas.credit.CreditBatch``: the same graph, from its arrays.

        Each successful trajectory's path is cleaned on state / action codes (equal exactly when
        the texts are) and merged in batch order, so the result equals ``add_trajectories`` on
        the trajectories the batch was made from; returns the number of new edges.
        """
        before = len(self._edges)
        off = batch.offsets.tolist()
        # plain lists: the cleaning loop indexes per step, and list items are cheaper than numpy's
        state, next_state = batch.state.tolist(), batch.next_state.tolist()
        action, error = batch.action.tolist(), batch.error.tolist()
        states, actions = batch.states, batch.actions
        for i in np.flatnonzero(batch.success & (batch.lengths > 0)).tolist():
            lo, hi = off[i], off[i + 1]
            nodes, acts = _clean(state[lo:hi], next_state[lo:hi], action[lo:hi], error[lo:hi])
            self.add_path([states[c] for c in nodes], [None if c is None else actions[c] for c in acts])
        return len(self._edges) - before

    def add_path(self, nodes: Sequence[str], actions: Sequence[str | None]) -> None:
        """Merge one clean path; its last node becomes a goal. Cycle-closing edges are skipped."""
        if not nodes:
            return
        if len(actions) != len(nodes) - 1:
            raise ValueError("a path needs exactly one action per edge")
        new = [s not in self._id for s in nodes]
        ids = [self._add_node(s) for s in nodes]
        if any(new):
            self._place_new_nodes(ids, new)
        for i in set(ids):
            self._support[i] += 1
        for u, a, v in zip(ids, actions, ids[1:]):
            if a is not None:
                self._add_edge(u, a, v, 1)
        if ids[-1] not in self._goal:
            self._goal.add(ids[-1])
            self._shorten(ids[-1], 0)

    def merge(self, other: ReferenceGraph) -> int:
        """Merge another graph's nodes, goals, supports and edges; return the number of new edges."""
        before = len(self._edges)
        for state, i in other._id.items():
            j = self._add_node(state)
            self._support[j] += other._support[i]
            if i in other._goal and j not in self._goal:
                self._goal.add(j)
                self._shorten(j, 0)
        for (u, a, v), sup in other._edges.items():
            self._add_edge(self._id[other._name[u]], a, self._id[other._name[v]], sup)
        return len(self._edges) - before

    def _place_new_nodes(self, ids: list[int], new: list[bool]) -> None:
        """Give each run of new path nodes orders between its known neighbours on the path.

        New nodes are otherwise appended at the end of the topological order, which makes an
        edge from a new node back into the known graph search a large region. Orders are
        floats; when a gap is too narrow to split, all orders are renumbered (rare: a gap
        halves with each split, and floats hold some thirty halvings of it).
        """
        k = 0
        while k < len(ids):
            if not new[k]:
                k += 1
                continue
            j = k
            while j + 1 < len(ids) and new[j + 1]:
                j += 1
            run = list(dict.fromkeys(ids[k : j + 1]))  # a path may repeat a node (jumps)
            left = self._ord[ids[k - 1]] if k > 0 else None
            right = self._ord[ids[j + 1]] if j + 1 < len(ids) else None
            if left is not None and right is not None and left < right:
                chosen = self._spread(left, right, len(run))
                if chosen is None:
                    self._renumber()
                    continue  # retry this run with fresh gaps
                for i, x in zip(run, chosen):
                    self._set_ord(i, x)
            elif right is not None and left is None:
                for m, i in enumerate(reversed(run), start=1):
                    self._set_ord(i, self._min_ord - m)
                self._min_ord -= len(run)
            # otherwise keep the appended orders (after everything, hence after `left`)
            k = j + 1

    #: phases of the first value in a gap: the golden-ratio sequence, irrational offsets that keep
    #: new orders off the (often integral) existing ones and apart from earlier splits of the same
    #: gap (two batch paths often make a detour between the same two known states)
    _PHASES = tuple((0.618034 * t) % 1.0 for t in range(1, 9))

    def _spread(self, lo: float, hi: float, n: int) -> list[float] | None:
        """``n`` increasing unused orders strictly between ``lo`` and ``hi``, or ``None`` when the
        gap is too narrow for floats to split (or every phase collides)."""
        step = (hi - lo) / (n + 1)
        if step <= max(abs(lo), abs(hi), 1.0) * 1e-9:
            return None
        for phase in self._PHASES:
            chosen = [lo + (m + phase) * step for m in range(n)]
            if not any(x in self._ord_values or not lo < x < hi for x in chosen):
                return chosen
        return None

    def _set_ord(self, i: int, value: float) -> None:
        self._ord_values.discard(self._ord[i])
        self._ord[i] = value
        self._ord_values.add(value)

    def _renumber(self) -> None:
        for rank, i in enumerate(sorted(self._ord, key=self._ord.__getitem__)):
            self._ord[i] = float(rank)
        self._ord_values = set(self._ord.values())
        self._next_ord = float(len(self._ord))
        self._min_ord = 0.0

    def _add_node(self, state: str) -> int:
        i = self._id.get(state)
        if i is None:
            i = self._next_id
            self._next_id += 1
            self._id[state] = i
            self._name[i] = state
            self._support[i] = 0
            self._ord[i] = self._next_ord
            self._ord_values.add(self._next_ord)
            self._next_ord += 1.0
        return i

    def _add_edge(self, u: int, action: str, v: int, support: int) -> bool:
        key = (u, action, v)
        if key in self._edges:
            self._edges[key] += support
            return True
        succ_u = self._succ.get(u)
        if not (succ_u is not None and v in succ_u):
            if u == v or not self._reorder_for(u, v):
                self.rejected_edges += 1
                return False
        self._edges[key] = support
        self._state_action[(u, action)] = self._state_action.get((u, action), 0) + 1
        self._succ.setdefault(u, {})
        self._succ[u][v] = self._succ[u].get(v, 0) + 1
        self._pred.setdefault(v, {})
        self._pred[v][u] = self._pred[v].get(u, 0) + 1
        if self._dist is not None:
            dv = self._dist.get(v)
            if dv is not None:
                self._shorten(u, dv + 1)
        return True

    def _reorder_for(self, u: int, v: int) -> bool:
        """Make room for ``u -> v`` in the topological order, or report a cycle (Pearce–Kelly).

        ``F`` is what ``v`` reaches and ``B`` what reaches ``u``, both inside the order window
        ``(ord[v], ord[u])``; the edge closes a cycle exactly when they meet. The two searches
        advance in turn, the one with the shorter queue first, so a cycle is found after
        exploring about the region between the two ends (most refused edges of a batch), and
        an acceptable edge costs about the smaller of ``F`` and ``B``, not both.

        When ``F`` runs dry first, no cycle; ``F`` moves, in its own order, just above ``u``:
        below the lowest of its successors outside it, all of which lie above ``u``. When ``B``
        runs dry first, ``B`` moves just below ``v`` likewise. Only if floats cannot split that
        gap are both sides finished and ``B`` then ``F`` given their combined order slots, the
        classic Pearce–Kelly step, which needs no new values.
        """
        ord_ = self._ord
        lb, ub = ord_[v], ord_[u]
        if lb > ub:
            return True
        succ, pred = self._succ, self._pred
        forward: dict[int, None] = {v: None}  # insertion-ordered sets: F and B
        backward: dict[int, None] = {u: None}
        f_queue, b_queue = deque((v,)), deque((u,))
        above = math.inf  # lowest order among F's successors outside F (all above ub)
        below = -math.inf  # highest order among B's predecessors outside B (all below lb)
        while f_queue and b_queue:
            if len(f_queue) <= len(b_queue):
                x = f_queue.popleft()
                for w in succ.get(x, ()):
                    if w in backward:  # v reaches w and w reaches u
                        return False
                    if w in forward:
                        continue
                    ow = ord_[w]
                    if ow < ub:
                        forward[w] = None
                        f_queue.append(w)
                    elif ow < above:
                        above = ow
            else:
                x = b_queue.popleft()
                for w in pred.get(x, ()):
                    if w in forward:
                        return False
                    if w in backward:
                        continue
                    ow = ord_[w]
                    if ow > lb:
                        backward[w] = None
                        b_queue.append(w)
                    elif ow > below:
                        below = ow
        # no cycle: move the side that ran dry past the other end
        if not f_queue:
            moved = sorted(forward, key=ord_.__getitem__)
            if above == math.inf:
                values = [self._next_ord + m for m in range(len(moved))]
                self._next_ord += len(moved)
            else:
                values = self._spread(ub, above, len(moved))
        else:
            moved = sorted(backward, key=ord_.__getitem__)
            if below == -math.inf:
                values = [self._min_ord - len(moved) + m for m in range(len(moved))]
                self._min_ord -= len(moved)
            else:
                values = self._spread(below, lb, len(moved))
        if values is not None:
            for x, value in zip(moved, values):
                self._set_ord(x, value)
            return True
        # the gap is too narrow: finish both sides and swap their slots (no new values needed)
        for seen, queue, nbrs, inside in (
            (forward, f_queue, succ, lambda w: ord_[w] < ub),
            (backward, b_queue, pred, lambda w: ord_[w] > lb),
        ):
            while queue:
                x = queue.popleft()
                for w in nbrs.get(x, ()):
                    if w not in seen and inside(w):
                        seen[w] = None
                        queue.append(w)
        b_sorted = sorted(backward, key=ord_.__getitem__)
        f_sorted = sorted(forward, key=ord_.__getitem__)
        slots = sorted(ord_[x] for x in b_sorted + f_sorted)
        for x, slot in zip(b_sorted + f_sorted, slots):
            ord_[x] = slot
        return True

    # ------------------------------------------------------------------ pruning
    def prune(self, fraction: float, seed: int = 0) -> int:
        """Remove ``round(fraction * num_state_actions)`` state-action pairs chosen with ``seed``.

        A pruned ``(state, action)`` pair loses every edge it labels; a ``(state, next_state)``
        transition goes when all of its actions are pruned. Nodes left without any edge are
        removed too (their state is no longer known to the graph). This is the paper's
        Incomplete ARG ("prunes 40% of the ARG's state-action pairs"). Returns the number of
        pairs removed.
        """
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"prune fraction must lie in [0, 1], got {fraction}")
        pairs = list(self._state_action)
        k = int(round(fraction * len(pairs)))
        if k == 0:
            return 0
        rng = np.random.default_rng(seed)
        chosen = {pairs[i] for i in rng.choice(len(pairs), size=k, replace=False)}
        for key in [key for key in self._edges if (key[0], key[1]) in chosen]:
            u, a, v = key
            del self._edges[key]
            for table, x, y in ((self._succ, u, v), (self._pred, v, u)):
                table[x][y] -= 1
                if table[x][y] == 0:
                    del table[x][y]
        for pair in chosen:
            del self._state_action[pair]
        for i in list(self._name):
            if not self._succ.get(i) and not self._pred.get(i):
                self._remove_node(i)
        self._dist = None  # removals lengthen distances; a one-off, so recompute on the next query
        return k

    def _remove_node(self, i: int) -> None:
        state = self._name.pop(i)
        del self._id[state]
        del self._support[i]
        self._ord_values.discard(self._ord.pop(i))
        self._goal.discard(i)
        self._succ.pop(i, None)
        self._pred.pop(i, None)

    def copy(self) -> ReferenceGraph:
        out = ReferenceGraph()
        out._dist = None  # the copy's distances are this graph's: taken once below, not edge by edge
        out.merge(self)
        out._dist = {out._id[self._name[i]]: d for i, d in self._distances().items()}
        out.meta = dict(self.meta)
        return out

    # ------------------------------------------------------------------ files
    def to_json(self) -> dict[str, Any]:
        order = sorted(self._name, key=self._ord.__getitem__)
        index = {i: k for k, i in enumerate(order)}
        return {
            "format": FORMAT,
            "version": VERSION,
            "nodes": [[self._name[i], self._support[i], i in self._goal] for i in order],
            "edges": [[index[u], a, index[v], sup] for (u, a, v), sup in self._edges.items()],
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, obj: Any, where: str = "graph") -> ReferenceGraph:
        if not isinstance(obj, dict) or obj.get("format") != FORMAT:
            raise GraphFileError(f"{where}: not a proas reference graph (format {FORMAT!r} expected)")
        if obj.get("version") != VERSION:
            raise GraphFileError(
                f"{where}: graph file version {obj.get('version')!r} is not supported (expected {VERSION})"
            )
        graph = cls()
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

    def to_bytes(self, path: str | os.PathLike) -> bytes:
        """The content ``save(path)`` writes (gzip when the name ends in ``.gz``)."""
        data = json.dumps(self.to_json(), separators=(",", ":")).encode("utf-8")
        if str(path).endswith(".gz"):
            data = gzip.compress(data, mtime=0)
        return data

    def save(self, path: str | os.PathLike) -> None:
        """Write the graph atomically (gzip when the name ends in ``.gz``)."""
        data = self.to_bytes(path)
        with atomic_open(path, "wb") as fh:
            fh.write(data)

    @classmethod
    def load(cls, path: str | os.PathLike, max_bytes: int | None = None) -> ReferenceGraph:
        """Read a graph file written by ``save``; anything wrong is a one-line ``GraphFileError``.

        ``max_bytes`` (default ``MAX_GRAPH_BYTES``) caps the JSON the file may hold or, gzipped,
        inflate to; it is read in chunks and refused as soon as it passes the cap.
        """
        path = Path(path)
        limit = MAX_GRAPH_BYTES if max_bytes is None else max_bytes
        try:
            raw = _read_capped(path, limit)
        except FileNotFoundError:
            raise GraphFileError(f"graph file not found: {path}") from None
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
            obj = json.loads(raw.decode("utf-8"))
        # RecursionError: absurdly deep JSON nesting; ValueError: bad JSON, or an integer of
        # more digits than Python converts
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise GraphFileError(f"{path}: corrupt graph file ({type(exc).__name__})") from None
        return cls.from_json(obj, where=str(path))

    # ------------------------------------------------------------------ export
    def to_networkx(self):
        """A ``networkx.MultiDiGraph`` with node attributes support / goal / distance."""
        import networkx as nx

        g = nx.MultiDiGraph()
        dist = self._distances()
        for i, state in self._name.items():
            d = dist.get(i)
            g.add_node(state, support=self._support[i], goal=i in self._goal, distance=-1 if d is None else d)
        for (u, a, v), sup in self._edges.items():
            g.add_edge(self._name[u], self._name[v], action=a, support=sup)
        return g

    def export(self, path: str | os.PathLike, fmt: str | None = None) -> None:
        """Export for viewing: GraphML (``.graphml``) or Graphviz DOT (``.dot``/``.gv``).

        Distance ``-1`` marks a node from which no goal is reachable.
        """
        data = self.export_bytes(path, fmt)
        with atomic_open(path, "wb") as fh:
            fh.write(data)

    @staticmethod
    def export_format(path: str | os.PathLike, fmt: str | None = None) -> str:
        """``graphml`` or ``dot`` for an export to ``path``; an unknown format is a ``ProasError``."""
        fmt = (fmt or Path(path).suffix.lstrip(".")).lower()
        if fmt == "gv":
            fmt = "dot"
        if fmt not in ("graphml", "dot"):
            raise ProasError(f"unknown export format {fmt!r}: choose graphml or dot")
        return fmt

    def export_bytes(self, path: str | os.PathLike, fmt: str | None = None) -> bytes:
        """The content ``export(path, fmt)`` writes."""
        if self.export_format(path, fmt) == "graphml":
            import networkx as nx

            g = self.to_networkx()
            texts = [*self._id, *(a for _, a, _ in self._edges)]
            if any(_XML_UNSAFE.search(t) for t in texts):
                # XML 1.0 cannot carry these characters: escape every text, injectively
                g = nx.relabel_nodes(g, {state: _escape_text(state, _XML_UNSAFE) for state in g}, copy=True)
                for _, _, data in g.edges(data=True):
                    data["action"] = _escape_text(data["action"], _XML_UNSAFE)
                g.graph["text_escaped"] = True
            buf = io.BytesIO()
            nx.write_graphml(g, buf)
            return buf.getvalue()
        return self.to_dot().encode("utf-8")

    def to_dot(self) -> str:
        dist = self._distances()

        def q(text: str) -> str:
            text = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
            return '"' + _DOT_UNSAFE.sub(lambda m: _escape_char(m.group()), text) + '"'

        lines = ["digraph ARG {", "  rankdir=LR;", "  node [shape=box];"]
        for i, state in self._name.items():
            d = dist.get(i, -1)
            style = ", peripheries=2" if i in self._goal else ""
            lines.append(f"  {q(state)} [support={self._support[i]}, distance={d}{style}];")
        for (u, a, v), sup in self._edges.items():
            lines.append(f"  {q(self._name[u])} -> {q(self._name[v])} [label={q(a)}, support={sup}];")
        lines.append("}")
        return "\n".join(lines) + "\n"


# characters XML 1.0 cannot hold (C0 controls but tab, newline, carriage return; surrogates;
# U+FFFE, U+FFFF), and those DOT output escapes (C0 and C1 controls, DEL, surrogates)
_XML_UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_DOT_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _escape_char(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _escape_text(text: str, unsafe: re.Pattern) -> str:
    """``text`` with backslashes doubled and each ``unsafe`` character as ``\\xNN`` / ``\\uNNNN``
    (injective: distinct texts stay distinct)."""
    return unsafe.sub(lambda m: _escape_char(m.group()), text.replace("\\", "\\\\"))


def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _is_index(x: Any, n: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < n


def _read_capped(path: Path, limit: int) -> bytes | None:
    """The bytes of ``path``, gunzipped when it is gzip (by its magic number), read in chunks;
    ``None`` once they pass ``limit``."""
    with open(path, "rb") as fh:
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
