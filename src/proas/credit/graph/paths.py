"""Cleaning a successful trajectory into the simple path the reference graph merges.

Error steps are dropped and loops cut: when a state recurs, the steps between its two visits
are removed, leaving a simple path from the start state to the goal state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proas.types import Step

__all__ = ["clean_labels", "clean_path"]


def clean_path(steps: Sequence[Step]) -> tuple[list[str], list[str | None]]:
    """Clean one successful trajectory into a simple path.

    Error steps are dropped; when a state recurs, everything since its first visit is cut.
    Returns ``(nodes, actions)`` with ``len(actions) == len(nodes) - 1``; ``actions[k]`` labels
    the edge ``nodes[k] -> nodes[k+1]``, or is ``None`` where the log jumps (a kept step starts
    from a state other than where the previous kept step ended; no edge is made there).
    """
    return clean_labels(
        [s.state for s in steps], [s.next_state for s in steps], [s.action for s in steps], [s.error for s in steps]
    )


def clean_labels(
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
