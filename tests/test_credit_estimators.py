"""Base estimators against hand-worked answers and verl's conventions."""

import numpy as np
import pytest

from credit_helpers import path_traj
from proas.credit import (
    CreditBatch,
    ReferenceGraph,
    compute_credit,
    dynamic_sampling_keep,
    get_estimator,
    register_estimator,
)
from proas.credit.estimators import discounted_returns
from proas.types import Step, Trajectory


def batch_of(groups):
    """groups: {gid: [(reward, n_steps), ...]} -> CreditBatch of simple paths."""
    trajs = []
    for gid, members in groups.items():
        for k, (r, n) in enumerate(members):
            trajs.append(path_traj(gid, f"{gid}-{k}", r, [f"s{j}" for j in range(n + 1)]))
    return CreditBatch.from_trajectories(trajs)


def test_grpo_matches_verls_figures():
    # verl 0.9.1's compute_grpo_outcome_advantage, one row per trajectory (reference notes):
    # [1,0,1] -> [0.577, -1.155, 0.577]; [0,0,10] -> [-0.577, -0.577, 1.155]
    b = batch_of({"a": [(1, 1), (0, 1), (1, 1)], "b": [(0, 1), (0, 1), (10, 1)]})
    adv = get_estimator("grpo")(b)
    assert np.allclose(adv.traj, [0.57735, -1.1547, 0.57735, -0.57735, -0.57735, 1.1547], atol=1e-4)
    assert adv.uniform.all() and not adv.step.any()
    mean_only = get_estimator("grpo")(b, norm_by_std=False)
    assert np.allclose(mean_only.traj, [1 / 3, -2 / 3, 1 / 3, -10 / 3, -10 / 3, 20 / 3])


def test_grpo_group_of_one_has_mean_zero_std_one():
    b = batch_of({"solo": [(3.0, 2)], "pair": [(1.0, 1), (3.0, 1)]})
    adv = get_estimator("grpo")(b, group_stats="trajectories")
    assert adv.traj[0] == pytest.approx(3.0 / (1 + 1e-6))
    # pair: mean 2, unbiased std sqrt(2)
    assert adv.traj[1:] == pytest.approx([-1 / (np.sqrt(2) + 1e-6), 1 / (np.sqrt(2) + 1e-6)])
    # over step rows, the solo trajectory's two rows are two samples of 3.0: mean 3, advantage 0
    rows = get_estimator("grpo")(b)
    assert rows.traj[0] == pytest.approx(0.0)
    assert rows.traj[1:] == pytest.approx(adv.traj[1:])


def test_grpo_statistics_default_to_step_rows_as_verl_agent():
    b = batch_of({"g": [(1.0, 5), (0.0, 1)]})
    per_traj = get_estimator("grpo")(b, norm_by_std=False, group_stats="trajectories")
    assert per_traj.traj == pytest.approx([0.5, -0.5])
    # verl-agent's every-step-row statistics (the default): mean = (5*1 + 1*0)/6
    rows = get_estimator("grpo")(b, norm_by_std=False)
    assert rows.traj == pytest.approx([1 - 5 / 6, -5 / 6])
    # with the std: rows [1,1,1,1,1,0], unbiased std sqrt((5*(1/6)^2 + (5/6)^2) / 5)
    std = np.std([1, 1, 1, 1, 1, 0], ddof=1)
    assert get_estimator("grpo")(b).traj == pytest.approx([(1 / 6) / (std + 1e-6), (-5 / 6) / (std + 1e-6)])
    with pytest.raises(ValueError, match="steps, trajectories"):
        get_estimator("grpo")(b, group_stats="rows")


def test_invalid_action_penalty_enters_the_row_scores_before_the_statistics():
    # verl-agent: row (i, t) scores R_i - p_{i,t}; group mean over rows [1, 1, 0, -0.5] = 0.375
    b = batch_of({"g": [(1.0, 2), (0.0, 2)]})
    pen = np.array([0.0, 0.0, 0.0, 0.5])
    adv = get_estimator("grpo")(b, norm_by_std=False, step_penalty=pen)
    assert adv.traj == pytest.approx([0.625, -0.375])  # A_i: the part ProAS reshapes
    assert adv.step == pytest.approx([0.0, 0.0, 0.0, -0.5])  # the row's own penalty, in B
    assert adv.per_step(b) == pytest.approx(np.array([1, 1, 0, -0.5]) - 0.375)
    # normalised: both parts divided by the rows' std
    std = np.std([1, 1, 0, -0.5], ddof=1)
    n = get_estimator("grpo")(b, step_penalty=pen)
    assert n.per_step(b) == pytest.approx((np.array([1, 1, 0, -0.5]) - 0.375) / (std + 1e-6))
    # an all-fail group keeps a signal: the invalid row is below its valid siblings
    flat = batch_of({"f": [(0.0, 2), (0.0, 2)]})
    f = get_estimator("grpo")(flat, norm_by_std=False, step_penalty=pen)
    assert f.per_step(flat)[3] < f.per_step(flat)[0]
    with pytest.raises(ValueError, match="shape"):
        get_estimator("grpo")(b, step_penalty=np.zeros(3))


def test_dapo_is_grpo_and_dynamic_sampling_drops_flat_groups():
    b = batch_of({"a": [(1, 1), (0, 1)], "b": [(1, 2), (1, 1)]})
    assert np.array_equal(get_estimator("dapo")(b).traj, get_estimator("grpo")(b).traj)
    trajs = [path_traj("a", "1", 1, ["x", "y"]), path_traj("a", "2", 0, ["x", "z"]),
             path_traj("b", "3", 1, ["x", "y"]), path_traj("b", "4", 1, ["x", "y"]),
             path_traj("c", "5", 0, ["x", "y"])]
    assert dynamic_sampling_keep(trajs) == {"a": True, "b": False, "c": False}


def test_rloo_leave_one_out():
    b = batch_of({"g": [(1.0, 1), (0.0, 1), (2.0, 1)], "solo": [(5.0, 1)]})
    adv = get_estimator("rloo")(b)
    # R_i - mean of the others
    assert adv.traj == pytest.approx([1 - 1.0, 0 - 1.5, 2 - 0.5, 5.0])


def test_reinforce_pp_centres_then_whitens():
    b = batch_of({"g": [(1.0, 1), (0.0, 1)], "h": [(4.0, 1), (0.0, 1)]})
    adv = get_estimator("reinforce_pp")(b, whiten_over="trajectories")
    centred = np.array([0.5, -0.5, 2.0, -2.0])
    expect = (centred - centred.mean()) / np.sqrt(centred.var(ddof=1) + 1e-8)
    assert adv.traj == pytest.approx(expect)
    # whitening over steps weighs a 3-step trajectory three times
    b2 = batch_of({"g": [(1.0, 3), (0.0, 1)]})
    adv2 = get_estimator("reinforce_pp")(b2)
    rows = np.array([0.5, 0.5, 0.5, -0.5])
    expect2 = (rows - rows.mean()) / np.sqrt(rows.var(ddof=1) + 1e-8)
    assert adv2.traj == pytest.approx([expect2[0], expect2[3]])


def test_discounted_returns_within_trajectories():
    b = batch_of({"g": [(0, 3), (0, 2)]})
    r = np.array([1.0, 0.0, 2.0, 5.0, 1.0])
    assert discounted_returns(r, b, 0.5).tolist() == [1 + 0.5 * 0 + 0.25 * 2, 0 + 0.5 * 2, 2.0, 5 + 0.5, 1.0]


def test_gigpo_hand_worked():
    # group g: two trajectories share anchors "o0" (t=0) and "o1" (t=1); the last steps differ
    t1 = Trajectory("g", "1", 10.0, [Step("a", "x", "b", anchor="o0"), Step("b", "y", "c", anchor="o1"),
                                     Step("c", "z", "d", anchor="o2")])
    t2 = Trajectory("g", "2", 0.0, [Step("a", "x", "b", anchor="o0"), Step("b", "w", "e", anchor="o1")])
    b = CreditBatch.from_trajectories([t1, t2])
    adv = get_estimator("gigpo")(b, gamma=0.5, mode="mean_norm", step_weight=2.0, group_stats="trajectories")
    assert adv.traj == pytest.approx([5.0, -5.0])
    # returns: t1 [2.5, 5, 10] (reward 10 on the last step), t2 [0, 0]
    # anchor o0: {2.5, 0} mean 1.25; o1: {5, 0} mean 2.5; o2 singleton -> 0
    assert adv.step == pytest.approx(2.0 * np.array([1.25, 2.5, 0.0, -1.25, -2.5]))
    assert adv.uniform.tolist() == [False, False, True, False, False]
    std = get_estimator("gigpo")(b, gamma=0.5, mode="mean_std_norm", group_stats="trajectories")
    assert std.traj == pytest.approx([5 / (np.sqrt(50) + 1e-6), -5 / (np.sqrt(50) + 1e-6)])
    assert std.step[0] == pytest.approx(1.25 / (np.std([2.5, 0], ddof=1) + 1e-6))
    # over step rows (verl-agent's default): rows [10, 10, 10, 0, 0], mean 6, std sqrt(30)
    rows = get_estimator("gigpo")(b, gamma=0.5, mode="mean_norm", step_weight=2.0)
    assert rows.traj == pytest.approx([4.0, -6.0])
    assert rows.step == pytest.approx(adv.step)  # the anchor-state level is unchanged
    rows_std = get_estimator("gigpo")(b, gamma=0.5, mode="mean_std_norm")
    assert rows_std.traj == pytest.approx([4 / (np.sqrt(30) + 1e-6), -6 / (np.sqrt(30) + 1e-6)])


def test_gigpo_anchor_groups_never_cross_task_groups():
    t1 = Trajectory("g", "1", 1.0, [Step("a", "x", "b", anchor="same")])
    t2 = Trajectory("h", "2", 0.0, [Step("a", "x", "b", anchor="same")])
    adv = get_estimator("gigpo")(CreditBatch.from_trajectories([t1, t2]))
    assert adv.uniform.all() and not adv.step.any()


def test_gigpo_uses_recorded_step_rewards():
    t = Trajectory(
        "g", "1", 1.0, [Step("a", "x", "b", anchor="o", reward=1.0), Step("b", "y", "c", anchor="p", reward=0.0)]
    )
    u = Trajectory("g", "2", 0.0, [Step("a", "x", "b", anchor="o", reward=0.0)])
    adv = get_estimator("gigpo")(CreditBatch.from_trajectories([t, u]), gamma=0.9)
    assert adv.step[0] == pytest.approx(0.5) and adv.step[2] == pytest.approx(-0.5)


def test_gae_matches_a_plain_loop():
    rng = np.random.default_rng(0)
    trajs = []
    for k, n in enumerate([3, 1, 4]):
        steps = [Step(f"s{j}", "a", f"s{j+1}", reward=float(rng.normal()), value=float(rng.normal())) for j in range(n)]
        trajs.append(Trajectory("g", str(k), 0.0, steps))
    b = CreditBatch.from_trajectories(trajs)
    gamma, lam = 0.9, 0.8
    adv = get_estimator("gae")(b, gamma=gamma, lam=lam, whiten=False)
    expect, rets = [], []
    for tr in trajs:
        a, out = 0.0, []
        for t in reversed(range(len(tr.steps))):
            nv = tr.steps[t + 1].value if t + 1 < len(tr.steps) else 0.0
            delta = tr.steps[t].reward + gamma * nv - tr.steps[t].value
            a = delta + gamma * lam * a
            out.append(a)
        out.reverse()
        expect += out
        rets += [x + s.value for x, s in zip(out, tr.steps)]
    assert adv.step == pytest.approx(expect)
    assert adv.returns == pytest.approx(rets)
    assert not adv.traj.any() and not adv.uniform.any()
    white = get_estimator("gae")(b, gamma=gamma, lam=lam)
    e = np.array(expect)
    assert white.step == pytest.approx((e - e.mean()) / np.sqrt(e.var(ddof=1) + 1e-8))


def test_gae_constant_value_known_answer():
    # V = 0.5 everywhere, reward 1 at the end, gamma = lam = 1: A_t = 1 - 0.5
    t = Trajectory("g", "1", 1.0, [Step("a", "x", "b", value=0.5), Step("b", "y", "c", value=0.5)])
    adv = get_estimator("gae")(CreditBatch.from_trajectories([t]), whiten=False)
    assert adv.step == pytest.approx([0.5, 0.5])


def test_gae_without_values_is_an_error():
    with pytest.raises(ValueError, match="value"):
        get_estimator("gae")(batch_of({"g": [(1, 2)]}))


def test_registry_lists_valid_names_and_refuses_rebinding():
    with pytest.raises(ValueError, match="choose one of: dapo, gae, gigpo, grpo"):
        get_estimator("ppo2")
    with pytest.raises(ValueError, match="already registered"):
        register_estimator("grpo")(lambda batch: None)


def test_migpo_hand_worked_with_arg_milestones():
    from proas.credit import ReferenceGraph, annotate, compute_credit
    from proas.credit.pipeline import arg_milestones

    g = ReferenceGraph.from_trajectories([path_traj("o", "o", 1, ["A", "B", "C", "G"])])
    trajs = [path_traj("g", "1", 10, ["A", "B", "X", "B", "C", "G"]), path_traj("g", "2", 0, ["A", "B", "Y", "Y"])]
    b = CreditBatch.from_trajectories(trajs)
    # milestones: each new best ARG distance reached by a reasonable step
    assert arg_milestones(b, g, annotate(b, g).rea).tolist() == [1, 0, 0, 1, 1, 1, 0, 0]
    res = compute_credit(trajs, g, "migpo", "none", {"gamma": 0.5, "group_stats": "trajectories"})
    # segment rewards: traj 1 [10 | 2.5 5 10 | 10], traj 2 [10 | 0 0 (open segment)]
    # groups (g, seg0) {10, 10}; (g, seg1) {2.5, 5, 10, 0, 0} mean 3.5; (g, seg2) singleton
    assert res.base_advantage == pytest.approx([5, 4, 6.5, 11.5, 5, -5, -8.5, -8.5])
    # episode level over step rows: [10]*5 + [0]*3, mean 6.25: A = [3.75, -6.25]
    rows = compute_credit(trajs, g, "migpo", "none", {"gamma": 0.5})
    assert rows.base_advantage == pytest.approx([3.75, 2.75, 5.25, 10.25, 3.75, -6.25, -9.75, -9.75])
    assert res.uniform.tolist() == [False, False, False, False, True, False, False, False]


def test_migpo_needs_milestones_of_the_right_shape():
    with pytest.raises(ValueError, match="milestones must have shape"):
        get_estimator("migpo")(batch_of({"g": [(1, 2)]}), milestones=[True])


# ---------------------------------------------------------------------- GAE: terminated vs truncated
def _two_step(truncated: bool) -> Trajectory:
    return Trajectory("g", "1", 0.0, [Step("a", "x", "b", reward=0.0), Step("b", "y", "c", reward=0.0)],
                      truncated=truncated)


@pytest.mark.parametrize("truncated", [False, True])
def test_gae_bootstraps_a_truncated_episode_only_when_asked(truncated):
    # docs/credit.md, "Episode ends": rewards [0, 0], V = [0.5, 0.6], V(cut state) = 0.8, gamma 0.9, lambda 1
    # no bootstrap: delta_1 = -0.6, delta_0 = 0.9*0.6 - 0.5 = 0.04; A = [0.04 + 0.9*(-0.6), -0.6] = [-0.5, -0.6]
    # bootstrap:    delta_1 = 0.9*0.8 - 0.6 = 0.12;               A = [0.04 + 0.9*0.12, 0.12] = [0.148, 0.12]
    batch = CreditBatch.from_trajectories([_two_step(truncated)])
    values, final = np.array([0.5, 0.6]), np.array([0.8])
    gae = get_estimator("gae")
    off = gae(batch, gamma=0.9, lam=1.0, whiten=False, values=values, final_values=final)
    assert off.step == pytest.approx([-0.5, -0.6]) and off.returns == pytest.approx([0.0, 0.0])
    on = gae(batch, gamma=0.9, lam=1.0, whiten=False, values=values, final_values=final, bootstrap_truncated=True)
    if truncated:  # the cut state's value flows back; the returns become the bootstrapped targets
        assert on.step == pytest.approx([0.148, 0.12]) and on.returns == pytest.approx([0.648, 0.72])
    else:  # a terminated episode has no future: the same under either setting
        np.testing.assert_array_equal(on.step, off.step)
    # through credit_arrays (the trainer's path), the values and final values are inputs
    res = compute_credit([_two_step(truncated)], ReferenceGraph(), estimator="gae", shaping="none",
                         estimator_options={"gamma": 0.9, "whiten": False, "bootstrap_truncated": True},
                         values=values, final_values=final)
    np.testing.assert_allclose(res.advantage, on.step)
    np.testing.assert_array_equal(res.values, values)


def test_gae_bootstrap_needs_the_final_values():
    batch = CreditBatch.from_trajectories([_two_step(True)])
    with pytest.raises(ValueError, match="needs final_values"):
        get_estimator("gae")(batch, values=np.array([0.5, 0.6]), bootstrap_truncated=True)
    with pytest.raises(ValueError, match="values must have shape"):
        get_estimator("gae")(batch, values=np.array([0.5]))
    # a recorded truncation survives the log's JSON form
    assert Trajectory.from_json(_two_step(True).to_json()).truncated
    assert "truncated" not in _two_step(False).to_json()
