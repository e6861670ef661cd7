"""Rea, PA and Future-Drift, exactly as docs/credit.md ("Annotations") defines them."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from credit_helpers import STATE, path_traj, trajectories
from proas.credit import (
    CreditBatch,
    ReferenceGraph,
    annotate,
    annotate_loop,
    future_drift,
)
from proas.types import Step, Trajectory


def graph_of(*paths):
    return ReferenceGraph.from_trajectories([path_traj("o", str(k), 1, p) for k, p in enumerate(paths)])


def test_hand_worked_annotations_node_rule():
    g = graph_of(["A", "B", "C", "G"])
    traj = Trajectory(
        "g", "t", 0.0,
        [
            Step("A", "oops", "A", error=True),   # error: Rea 0, PA 0
            Step("A", "a", "B"),                  # new known state: Rea 1, PA 1
            Step("B", "x", "X"),                  # unknown state: Rea 0
            Step("X", "back", "B"),               # known but revisited: Rea 1, PA 0
            Step("B", "b", "C"),                  # Rea 1, PA 1
            Step("C", "stay", "C"),               # self-loop: Rea 1, PA 0
        ],
    )
    ann = annotate(CreditBatch.from_trajectories([traj]), g, rea="node")
    assert ann.rea.tolist() == [0, 1, 0, 1, 1, 1]
    assert ann.pa.tolist() == [0, 1, 0, 0, 1, 0]
    assert ann.fd.tolist() == [4, 3, 3, 2, 1, 1]


def _rule_case():
    # oracle paths A -a-> B -b-> C -c-> G and A -d-> D -e-> G
    g = ReferenceGraph.from_trajectories([
        Trajectory("o", "1", 1.0, [Step("A", "a", "B"), Step("B", "b", "C"), Step("C", "c", "G")]),
        Trajectory("o", "2", 1.0, [Step("A", "d", "D"), Step("D", "e", "G")]),
    ])
    traj = Trajectory("g", "t", 0.0, [
        Step("A", "a", "B"),      # edge A->B under its own action: every rule accepts
        Step("B", "z", "C"),      # pair B->C is an edge, action z is not: transition only
        Step("C", "look", "C"),   # no change of state: a node, but no self-loop edge exists
        Step("C", "e", "D"),      # D is a node, C->D no edge, (C, e) no label
        Step("D", "c", "G"),      # D->G is an edge (action e); (D, c) labels nothing
        Step("G", "b", "C", error=True),  # an error is never reasonable
    ])
    return g, traj


def test_hand_worked_rules_transition_state_action_node():
    g, traj = _rule_case()
    batch = CreditBatch.from_trajectories([traj])
    assert annotate(batch, g, rea="transition").rea.tolist() == [1, 1, 0, 0, 1, 0]
    assert annotate(batch, g, rea="state_action").rea.tolist() == [1, 0, 0, 0, 0, 0]
    assert annotate(batch, g, rea="node").rea.tolist() == [1, 1, 1, 1, 1, 0]
    # PA and Future-Drift sit on top of the rule: transition's PA = Rea minus revisits
    ann = annotate(batch, g)  # the default is transition
    assert ann.rea.tolist() == [1, 1, 0, 0, 1, 0]
    assert ann.pa.tolist() == [1, 1, 0, 0, 1, 0]
    assert ann.fd.tolist() == [3, 3, 3, 2, 1, 1]


def test_unknown_rule_is_refused():
    g, traj = _rule_case()
    import pytest

    with pytest.raises(ValueError, match="transition, state_action, node"):
        annotate(CreditBatch.from_trajectories([traj]), g, rea="edge")


def test_revisit_counts_the_start_state():
    traj = path_traj("g", "t", 0, ["A", "B", "A"])  # B -> A returns to s_1
    g2 = graph_of(["A", "B"], ["X", "A"])
    ann = annotate(CreditBatch.from_trajectories([traj]), g2, rea="node")
    assert ann.rea.tolist() == [1, 1] and ann.pa.tolist() == [1, 0]


def test_revisit_is_per_trajectory():
    g = graph_of(["A", "B", "C"])
    t1 = path_traj("g", "1", 0, ["A", "B"])
    t2 = path_traj("g", "2", 0, ["B", "C"])  # B was visited by t1, not by t2
    ann = annotate(CreditBatch.from_trajectories([t1, t2]), g)
    assert ann.pa.tolist() == [1, 1]


def test_future_drift_counts_na_steps_to_the_end():
    pa = np.array([1, 0, 0, 1, 0, 1, 1])
    offsets = np.array([0, 4, 4, 7])  # an empty trajectory in the middle
    assert future_drift(pa, offsets).tolist() == [2, 2, 1, 0, 1, 0, 0]


@settings(max_examples=150, deadline=None)
@given(trajectories(), st.lists(st.lists(STATE, min_size=1, max_size=6), max_size=5),
       st.sampled_from(["transition", "state_action", "node"]))
def test_vectorised_annotations_equal_the_loop(trajs, oracle_paths, rule):
    g = graph_of(*oracle_paths)
    fast = annotate(CreditBatch.from_trajectories(trajs), g, rea=rule)
    slow = annotate_loop(trajs, g, rea=rule)
    assert fast.rea.tolist() == slow.rea.tolist()
    assert fast.pa.tolist() == slow.pa.tolist()
    assert fast.fd.tolist() == slow.fd.tolist()
