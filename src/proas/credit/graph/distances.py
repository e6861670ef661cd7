"""Shortest distances (in edges) to a goal, over a graph's predecessor table.

``goal_distances`` computes them from scratch, one backward breadth-first search from all goals;
``shorten`` keeps them current as edges and goals arrive (additions only ever shorten
distances, so each one relaxes backwards from where it happened). Removals can lengthen them:
after a prune the graph drops its table and asks ``goal_distances`` again on the next query.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

__all__ = ["goal_distances", "shorten"]


def goal_distances(goals: Iterable[int], pred: Mapping[int, Mapping[int, int]]) -> dict[int, int]:
    """Goal distances from scratch: one backward breadth-first search from all goals."""
    goals = list(goals)
    dist = {g: 0 for g in goals}
    queue = deque(goals)
    while queue:
        v = queue.popleft()
        dv = dist[v] + 1
        for u in pred.get(v, ()):
            if u not in dist:
                dist[u] = dv
                queue.append(u)
    return dist


def shorten(dist: dict[int, int], pred: Mapping[int, Mapping[int, int]], node: int, d: int) -> None:
    """``node`` now reaches a goal in ``d`` edges (a new goal, or a new edge out of it): lower
    its distance in ``dist`` and its ancestors' where that is shorter than what they had.

    Additions only ever shorten distances, and the relaxation runs breadth-first from ``node``,
    so each ancestor is settled once and only ancestors that improve are visited.
    """
    old = dist.get(node)
    if old is not None and old <= d:
        return
    dist[node] = d
    queue = deque((node,))
    while queue:
        x = queue.popleft()
        dx = dist[x] + 1
        for p in pred.get(x, ()):
            dp = dist.get(p)
            if dp is None or dp > dx:
                dist[p] = dx
                queue.append(p)
