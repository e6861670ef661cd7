"""ProAS shaping and its ablations: hand-worked answers and the method's invariants."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from credit_helpers import STATE, path_traj, trajectories
from proas.credit import (
    SHAPINGS,
    BaseAdvantage,
    CreditBatch,
    ReferenceGraph,
    annotate,
    compute_credit,
    get_estimator,
    progress_bonus,
    shape,
)
from proas.credit.annotate import Annotations


def one_traj_case(a, rea, pa, uniform=None, step=None):
    """A single trajectory with trajectory advantage ``a`` and given labels."""
    n = len(rea)
    traj = path_traj("g", "t", 0, [f"s{k}" for k in range(n + 1)])
    batch = CreditBatch.from_trajectories([traj])
    from proas.credit import future_drift

    pa = np.array(pa)
    ann = Annotations(rea=np.array(rea), pa=pa, fd=future_drift(pa, batch.offsets))
    base = BaseAdvantage(
        traj=np.array([a], dtype=float),
        step=np.zeros(n) if step is None else np.array(step, float),
        uniform=np.ones(n, bool) if uniform is None else np.array(uniform, bool),
    )
    return base, ann, batch


def test_proas_mui_masks_unreasonable_steps_of_preferred_trajectory():
    base, ann, batch = one_traj_case(2.0, rea=[1, 0, 1, 0], pa=[1, 0, 0, 0])
    assert shape("proas", base, ann, batch).tolist() == [2.0, 0.0, 2.0, 0.0]


def test_proas_apr_redistributes_by_future_drift():
    # PA = [0, 1, 0, 1] -> D = [2, 1, 1, 0], mean 1
    base, ann, batch = one_traj_case(-1.0, rea=[0, 1, 1, 1], pa=[0, 1, 0, 1])
    assert ann.fd.tolist() == [2, 1, 1, 0]
    eps = 1e-6
    assert shape("proas", base, ann, batch) == pytest.approx([-2 / (1 + eps), -1 / (1 + eps), -1 / (1 + eps), 0.0])


def test_apr_only_over_uniform_steps_and_b_added_back():
    # GiGPO-like: step 1 has a step-level term and is not uniformly credited
    base, ann, batch = one_traj_case(
        -1.0, rea=[0, 0, 0], pa=[0, 0, 0], uniform=[True, False, True], step=[0.0, 0.5, 0.0]
    )
    # D = [3, 2, 1]; T = {0, 2}: mean D = 2
    out = shape("proas", base, ann, batch, epsilon=0.0)
    assert out == pytest.approx([-1.5, -1.0 + 0.5, -0.5])


def test_all_advancing_failed_trajectory_keeps_its_penalty():
    base, ann, batch = one_traj_case(-1.0, rea=[1, 1, 1], pa=[1, 1, 1])
    assert shape("proas", base, ann, batch).tolist() == [-1.0, -1.0, -1.0]


def test_zero_advantage_is_untouched():
    base, ann, batch = one_traj_case(0.0, rea=[0, 1], pa=[0, 1])
    for name in SHAPINGS:
        assert shape(name, base, ann, batch).tolist() == [0.0, 0.0]


def test_ablations_hand_worked():
    pos = one_traj_case(2.0, rea=[1, 0, 1], pa=[1, 0, 1])
    neg = one_traj_case(-1.0, rea=[0, 1, 1], pa=[0, 1, 0])  # D = [2, 1, 1], mean 4/3
    eps = 1e-6
    m = 4 / 3 + eps
    expect = {
        "none": ([2, 2, 2], [-1, -1, -1]),
        "progress_reward": ([2, 2, 2], [-1, -1, -1]),
        "proas": ([2, 0, 2], [-2 / m, -1 / m, -1 / m]),
        "no_mui": ([2, 2, 2], [-2 / m, -1 / m, -1 / m]),
        "no_apr": ([2, 0, 2], [-1, -1, -1]),
        "mask_pm": ([2, 0, 2], [-1, 0, 0]),
        # suffix lengths 3, 2, 1, mean 2
        "suffix": ([2, 0, 2], [-3 / (2 + eps), -2 / (2 + eps), -1 / (2 + eps)]),
    }
    for name, (want_pos, want_neg) in expect.items():
        assert shape(name, *pos) == pytest.approx(want_pos), name
        assert shape(name, *neg) == pytest.approx(want_neg), name


def test_random_ablation_is_seeded_and_differs_from_the_arg():
    oracle = [path_traj("o", "o", 1, [f"s{k}" for k in range(6)])]
    g = ReferenceGraph.from_trajectories(oracle)
    trajs = [path_traj("g", str(i), float(i % 2), [f"s{(i + k) % 9}" for k in range(30)]) for i in range(8)]
    a = compute_credit(trajs, g, shaping="random", seed=1).advantage
    b = compute_credit(trajs, g, shaping="random", seed=1).advantage
    c = compute_credit(trajs, g, shaping="random", seed=2).advantage
    p = compute_credit(trajs, g, shaping="proas").advantage
    assert np.array_equal(a, b) and not np.array_equal(a, c) and not np.array_equal(a, p)


def test_unknown_shaping_lists_choices():
    base, ann, batch = one_traj_case(1.0, rea=[1], pa=[1])
    with pytest.raises(ValueError, match="choose one of: none, proas"):
        shape("magic", base, ann, batch)


def test_progress_bonus_hand_worked():
    g = ReferenceGraph.from_trajectories([path_traj("o", "o", 1, ["A", "B", "C", "D", "G"])])
    trajs = [
        path_traj("g", "win", 10, ["A", "B", "C", "D", "G"]),
        path_traj("g", "half", 0, ["A", "B", "C", "X"]),  # best reached C: d = 2 of 4
        path_traj("g", "err", 0, ["A", "B", "C"], errors={0, 1}),  # nothing reasonable
        path_traj("g", "lost", 0, ["Q", "B"]),  # unknown start: depth 4 is the reference
    ]
    batch = CreditBatch.from_trajectories(trajs)
    ann = annotate(batch, g, rea="node")
    assert progress_bonus(batch, g, ann.rea, coef=2.0) == pytest.approx([2.0, 1.0, 0.0, 2.0 * (1 - 3 / 4)])
    # under the transition rule Q -> B is no ARG edge, so "lost" reached nothing reasonably
    ann_t = annotate(batch, g)
    assert progress_bonus(batch, g, ann_t.rea, coef=2.0) == pytest.approx([2.0, 1.0, 0.0, 0.0])
    res = compute_credit(trajs, g, estimator="grpo", shaping="progress_reward", rea="node",
                         estimator_options={"norm_by_std": False, "group_stats": "trajectories"},
                         shaping_options={"progress_coef": 2.0})
    rewards = np.array([12.0, 1.0, 0.0, 0.5])
    assert res.reward == pytest.approx(rewards)
    assert res.advantage == pytest.approx(res.base_advantage)
    assert res.traj_advantage[res.offsets[1]] == pytest.approx(1.0 - rewards.mean())


# ---------------------------------------------------------------- invariants (hypothesis)
def _graph(paths):
    return ReferenceGraph.from_trajectories([path_traj("o", str(k), 1, p) for k, p in enumerate(paths)])


ORACLE = st.lists(st.lists(STATE, min_size=1, max_size=6), max_size=5)


@settings(max_examples=150, deadline=None)
@given(trajectories(), ORACLE, st.sampled_from(["grpo", "gigpo", "rloo", "reinforce_pp"]))
def test_apr_keeps_the_total_penalty_over_T(trajs, oracle, est):
    res = compute_credit(trajs, _graph(oracle), estimator=est, shaping="no_mui")
    for i in range(len(trajs)):
        lo, hi = res.offsets[i], res.offsets[i + 1]
        a = res.traj_advantage[lo:hi]
        if hi == lo or a[0] >= 0:
            continue
        u = res.uniform[lo:hi]
        shaped_a = (res.advantage - res.step_advantage)[lo:hi]
        assert shaped_a[u].sum() == pytest.approx(u.sum() * a[0], rel=1e-5, abs=1e-9)
        assert np.allclose(shaped_a[~u], a[~u])


@settings(max_examples=150, deadline=None)
@given(trajectories(), ORACLE, st.sampled_from(["grpo", "gigpo", "rloo"]))
def test_mui_never_changes_a_trajectory_with_nonpositive_advantage(trajs, oracle, est):
    res = compute_credit(trajs, _graph(oracle), estimator=est, shaping="no_apr")
    keep = res.traj_advantage <= 0
    assert np.array_equal(res.advantage[keep], res.base_advantage[keep])
    pos = res.traj_advantage > 0
    assert np.allclose(res.advantage[pos], (res.rea * res.traj_advantage + res.step_advantage)[pos])


@settings(max_examples=150, deadline=None)
@given(trajectories(), st.sampled_from(["grpo", "gigpo", "dapo"]))
def test_all_advancing_trajectory_keeps_its_base_advantage(trajs, est):
    # an oracle that contains every state, and trajectories with no error and no revisit
    clean, paths = [], []
    for t in trajs:
        states = [f"{t.trajectory}-{j}" for j in range(len(t.steps) + 1)]
        clean.append(path_traj(t.group, t.trajectory, t.reward, states))
        paths.append(states)
    g = _graph(paths)
    res = compute_credit(clean, g, estimator=est, shaping="proas")
    assert (res.pa == 1).all()
    assert np.array_equal(res.advantage, res.base_advantage)


@settings(max_examples=60, deadline=None)
@given(trajectories(), ORACLE)
def test_shaping_none_is_the_base_estimator(trajs, oracle):
    res = compute_credit(trajs, _graph(oracle), estimator="gigpo", shaping="none")
    batch = CreditBatch.from_trajectories(trajs)
    assert np.array_equal(res.advantage, get_estimator("gigpo")(batch).per_step(batch))
