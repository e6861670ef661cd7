"""Step annotations against the reference graph (docs/credit.md, "Annotations").

For step ``t`` of trajectory ``i`` and graph ``G = (V, E)``:

- ``Rea_t = 1`` iff ``error_t = 0`` and the step is consistent with ``G`` (*reasonable*), by
  one of three named rules (``REA_RULES``):

  - ``transition`` (the default): ``(s_t, s_{t+1})`` is an edge of ``G``, under any action;
  - ``state_action``: ``(s_t, a_t)`` labels an edge of ``G``;
  - ``node``: ``s_{t+1} ∈ V``.

  The ARG is acyclic and has no self-loops, so under ``transition`` and ``state_action`` a
  step that leaves the abstract state unchanged is unreasonable;
- ``PA_t = 1`` iff ``Rea_t = 1`` and ``s_{t+1} ∉ {s_1, …, s_t}`` (*progress-advancing*; a step with
  ``PA_t = 0`` is non-advancing, NA);
- ``D_{i,t} = Σ_{t'=t..T_i} (1 − PA_{i,t'})`` (*Future-Drift*).

``annotate`` is the vectorised kernel; ``annotate_loop`` is the plain per-step reference it is
tested against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from proas.credit.batch import CreditBatch
from proas.credit.graph import ReferenceGraph
from proas.types import Trajectory

__all__ = ["REA_RULES", "Annotations", "annotate", "annotate_loop", "future_drift", "reasonable", "revisits"]

#: the reasonableness rules, by name; the first is the default
REA_RULES = ("transition", "state_action", "node")


def _check_rule(rea: str) -> None:
    if rea not in REA_RULES:
        raise ValueError(f"unknown reasonableness rule {rea!r}; choose one of: {', '.join(REA_RULES)}")


@dataclass(frozen=True)
class Annotations:
    """Per-step annotations, each of shape ``(S,)``: ``rea`` and ``pa`` in {0, 1}, ``fd`` ≥ 0."""

    rea: np.ndarray
    pa: np.ndarray
    fd: np.ndarray


def revisits(batch: CreditBatch) -> np.ndarray:
    """``(S,)`` bool: ``s_{t+1}`` equals one of ``s_1, …, s_t`` of the same trajectory.

    A state's first visit is found by sorting ``(trajectory, state)`` keys once; step ``t``
    revisits iff its next state's first visit as a *current* state lies at or before ``t``.
    """
    n_states = max(len(batch.states), 1)
    key_cur = batch.traj_of_step * n_states + batch.state
    key_next = batch.traj_of_step * n_states + batch.next_state
    if batch.n_steps == 0:
        return np.zeros(0, dtype=bool)
    uniq, first = np.unique(key_cur, return_index=True)
    pos = np.minimum(np.searchsorted(uniq, key_next), len(uniq) - 1)
    found = uniq[pos] == key_next
    return found & (first[pos] <= np.arange(batch.n_steps))


def future_drift(pa: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``D_{i,t}``: the number of NA steps from ``t`` to the end of each trajectory.

    ``pa`` has shape ``(S,)``; ``offsets`` ``(n + 1,)``. Returns int64 ``(S,)``.
    """
    na = 1 - pa.astype(np.int64)
    # suffix[k] = sum(na[k:]); within a trajectory, subtract what lies after its end
    suffix = np.concatenate([np.cumsum(na[::-1])[::-1], np.zeros(1, dtype=np.int64)])
    traj_end = np.repeat(offsets[1:], np.diff(offsets))
    return suffix[: len(na)] - suffix[traj_end]


def reasonable(batch: CreditBatch, graph: ReferenceGraph, rea: str = "transition") -> np.ndarray:
    """``(S,)`` bool ``Rea_t`` of every step under the rule ``rea`` (see the module docstring).

    Each distinct ``(s_t, s_{t+1})`` or ``(s_t, a_t)`` pair of the batch is looked up once.
    """
    _check_rule(rea)
    if batch.n_steps == 0:
        return np.zeros(0, dtype=bool)
    if rea == "node":
        ok = graph.contains_many(batch.states)[batch.next_state]
    else:
        second, names, lookup = (
            (batch.next_state, batch.states, graph.transitions_many)
            if rea == "transition"
            else (batch.action, batch.actions, graph.state_actions_many)
        )
        key = batch.state * max(len(names), 1) + second
        uniq, inverse = np.unique(key, return_inverse=True)
        width = max(len(names), 1)
        pairs = [(batch.states[k // width], names[k % width]) for k in uniq.tolist()]
        ok = lookup(pairs)[inverse]
    return ~batch.error & ok


def annotate(batch: CreditBatch, graph: ReferenceGraph, rea: str = "transition") -> Annotations:
    """Rea (under rule ``rea``), PA and Future-Drift of every step of ``batch`` against ``graph``."""
    ok = reasonable(batch, graph, rea)
    pa = ok & ~revisits(batch)
    return Annotations(
        rea=ok.astype(np.int64), pa=pa.astype(np.int64), fd=future_drift(pa, batch.offsets)
    )


def annotate_loop(
    trajectories: Sequence[Trajectory], graph: ReferenceGraph, rea: str = "transition"
) -> Annotations:
    """Reference implementation, one step at a time, straight from the definitions."""
    _check_rule(rea)
    edges = list(graph.edges())
    pairs = {(u, v) for u, _, v, _ in edges}
    state_actions = {(u, a) for u, a, _, _ in edges}
    rea_all: list[int] = []
    pa_all: list[int] = []
    fd_all: list[int] = []
    for traj in trajectories:
        seen: set[str] = set()
        rea_i, pa_i = [], []
        for step in traj.steps:
            seen.add(step.state)
            if rea == "transition":
                consistent = (step.state, step.next_state) in pairs
            elif rea == "state_action":
                consistent = (step.state, step.action) in state_actions
            else:
                consistent = step.next_state in graph
            ok = int((not step.error) and consistent)
            pa = int(ok == 1 and step.next_state not in seen)
            rea_i.append(ok)
            pa_i.append(pa)
        fd_i = [sum(1 - p for p in pa_i[t:]) for t in range(len(pa_i))]
        rea_all += rea_i
        pa_all += pa_i
        fd_all += fd_i
    return Annotations(
        rea=np.array(rea_all, dtype=np.int64),
        pa=np.array(pa_all, dtype=np.int64),
        fd=np.array(fd_all, dtype=np.int64),
    )
