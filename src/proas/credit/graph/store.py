"""The reference graph's storage: nodes, edges, supports and goals, and the queries and
updates over them (``ReferenceGraph``).

The graph keeps, per node, how many trajectories support it, whether it is a goal (the last
state of a successful trajectory) and its shortest distance to a goal. An edge is a
``(state, action, next_state)`` triple with a support count. What keeps the graph acyclic is
``order.py``; goal distances are ``distances.py``; files ``files.py``; exports ``export.py``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from proas.credit.graph import export, files
from proas.credit.graph.distances import goal_distances, shorten
from proas.credit.graph.order import TopologicalOrder, is_acyclic
from proas.credit.graph.paths import clean_labels, clean_path
from proas.types import Trajectory, as_trajectories

__all__ = ["ReferenceGraph"]


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
        self._next_id = 0
        # a topological order of the node ids, kept as edges arrive: how cycles are refused
        self._order = TopologicalOrder()
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
            self._dist = goal_distances(self._goal, self._pred)
        return self._dist

    def _shorten(self, node: int, d: int) -> None:
        """``node`` now reaches a goal in ``d`` edges: lower its and its ancestors' distances
        (``distances.shorten``), unless they are stale anyway (the next query recomputes them)."""
        if self._dist is not None:
            shorten(self._dist, self._pred, node, d)

    def is_acyclic(self) -> bool:
        """Check acyclicity from scratch (Kahn's algorithm); used by tests and ``load``."""
        return is_acyclic(self._id.values(), self._succ, self._pred)

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
            nodes, acts = clean_labels(state[lo:hi], next_state[lo:hi], action[lo:hi], error[lo:hi])
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
            self._order.place_new_nodes(ids, new)
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

    def _add_node(self, state: str) -> int:
        i = self._id.get(state)
        if i is None:
            i = self._next_id
            self._next_id += 1
            self._id[state] = i
            self._name[i] = state
            self._support[i] = 0
            self._order.append(i)
        return i

    def _add_edge(self, u: int, action: str, v: int, support: int) -> bool:
        key = (u, action, v)
        if key in self._edges:
            self._edges[key] += support
            return True
        succ_u = self._succ.get(u)
        if not (succ_u is not None and v in succ_u):
            if u == v or not self._order.make_room(u, v, self._succ, self._pred):
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
        self._order.discard(i)
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

    # ------------------------------------------------------------------ files (files.py)
    def to_json(self) -> dict[str, Any]:
        """The graph file's JSON record (``files`` describes the format)."""
        return files.to_json(self)

    @classmethod
    def from_json(cls, obj: Any, where: str = "graph") -> ReferenceGraph:
        """A graph from its JSON record; a bad record is a one-line ``GraphFileError``."""
        return files.fill_from_json(cls(), obj, where)

    def to_bytes(self, path: str | os.PathLike) -> bytes:
        """The content ``save(path)`` writes (gzip when the name ends in ``.gz``)."""
        return files.to_bytes(self.to_json(), path)

    def save(self, path: str | os.PathLike) -> None:
        """Write the graph atomically (gzip when the name ends in ``.gz``)."""
        files.write(path, self.to_bytes(path))

    @classmethod
    def load(cls, path: str | os.PathLike, max_bytes: int | None = None) -> ReferenceGraph:
        """Read a graph file written by ``save``; anything wrong is a one-line ``GraphFileError``.

        ``max_bytes`` (default ``MAX_GRAPH_BYTES``) caps the JSON the file may hold or, gzipped,
        inflate to; it is read in chunks and refused as soon as it passes the cap.
        """
        return cls.from_json(files.read_json(path, max_bytes), where=str(Path(path)))

    # ------------------------------------------------------------------ export (export.py)
    def to_networkx(self):
        """A ``networkx.MultiDiGraph`` with node attributes support / goal / distance."""
        return export.to_networkx(self)

    def export(self, path: str | os.PathLike, fmt: str | None = None) -> None:
        """Export for viewing: GraphML (``.graphml``) or Graphviz DOT (``.dot``/``.gv``).

        Distance ``-1`` marks a node from which no goal is reachable.
        """
        files.write(path, self.export_bytes(path, fmt))

    @staticmethod
    def export_format(path: str | os.PathLike, fmt: str | None = None) -> str:
        """``graphml`` or ``dot`` for an export to ``path``; an unknown format is a ``ProasError``."""
        return export.export_format(path, fmt)

    def export_bytes(self, path: str | os.PathLike, fmt: str | None = None) -> bytes:
        """The content ``export(path, fmt)`` writes."""
        return export.export_bytes(self, path, fmt)

    def to_dot(self) -> str:
        """The graph in Graphviz DOT."""
        return export.to_dot(self)
