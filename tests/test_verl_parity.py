"""The verl bridge on the real verl 0.9.1 package: DataProto round trip, parity with verl's own
estimators (and with verl-agent's GiGPO maths), reshaping equal to proas's credit layer, and the
registered ``proas_*`` estimators dispatched by verl's ``compute_advantage``.

Runs in the verl venv (``bash .ci/verl_env.sh VENV && VENV/bin/python -m pytest -q
tests/test_verl_*.py``); skipped where verl is not installed.
"""

from __future__ import annotations

import numpy as np
import pytest

verl = pytest.importorskip("verl")
torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402

from proas.credit import ReferenceGraph, compute_credit  # noqa: E402
from proas.errors import ProasError  # noqa: E402
from proas.integrations.verl import (  # noqa: E402
    ESTIMATOR_NAMES,
    ProASCredit,
    bind,
    compute_advantage,
    patch_ray_trainer,
    register_estimators,
    rows_to_trajectories,
    trajectories_to_rows,
)
from proas.types import Step, Trajectory  # noqa: E402

pytestmark = pytest.mark.verl

RESPONSE_LEN = 6


# ---------------------------------------------------------------------- batches
def make_trajectories(rng: np.random.Generator, n_groups=3, group_size=4, max_len=5, won_p=0.5):
    """Groups of trajectories in a small room world; winners end in "goal" with env reward 10
    on the last step (verl-agent's ALFWorld reward); anchors repeat across a group's members."""
    trajs = []
    for g in range(n_groups):
        for k in range(group_size):
            n = int(rng.integers(1, max_len + 1))
            won = bool(rng.random() < won_p)
            states = ["start"] + [f"room{int(rng.integers(0, 4))}" for _ in range(n)]
            if won:
                states[-1] = "goal"
            steps = [
                Step(states[t], f"act{int(rng.integers(0, 3))}", states[t + 1],
                     error=bool(rng.random() < 0.25), anchor=f"you see {states[t]}",
                     reward=10.0 if (won and t == n - 1) else 0.0)
                for t in range(n)
            ]
            trajs.append(Trajectory(f"uid-{g}", f"traj-{g}-{k}", 10.0 if won else 0.0, steps))
    return trajs


def make_dataproto(trajs, rng: np.random.Generator | None = None) -> DataProto:
    """The DataProto verl-agent's rollout would hand to compute_advantage for these trajectories:
    one row per step, the episode reward at each row's last response token (EpisodeRewardManager),
    ragged response lengths."""
    non_tensor = trajectories_to_rows(trajs)
    n = len(non_tensor["uid"])
    rng = rng or np.random.default_rng(0)
    lengths = torch.as_tensor(rng.integers(1, RESPONSE_LEN + 1, size=n))
    mask = (torch.arange(RESPONSE_LEN)[None, :] < lengths[:, None]).to(torch.int64)
    rewards = torch.zeros(n, RESPONSE_LEN)
    episode = torch.as_tensor(np.asarray(non_tensor["episode_rewards"], dtype=np.float32))
    rewards[torch.arange(n), lengths - 1] = episode
    tensors = {"token_level_rewards": rewards, "response_mask": mask}
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensor)


def shuffle_and_pad(data: DataProto, rng: np.random.Generator, n_pad: int = 3) -> tuple[DataProto, np.ndarray]:
    """What verl-agent does before the advantage: pad with copies of random rows (adjust_batch),
    then reorder rows (_balance_batch). Returns the batch and each row's original row."""
    n = len(data)
    copies = rng.integers(0, n, size=n_pad)
    padded = DataProto.concat([data, data.select_idxs(copies)])
    origin = np.concatenate([np.arange(n), copies])
    perm = rng.permutation(len(padded))
    padded.reorder(torch.as_tensor(perm))
    return padded, origin[perm]


def apply_invalid_action_penalty(data: DataProto, coef: float = 0.1) -> None:
    """What verl-agent's trainer does to the rows before its compute_advantage
    (``apply_invalid_action_penalty``): ``coef`` off the last response token's reward of every
    row whose ``is_action_valid`` is false (and off GiGPO's step return: see verl_agent_gigpo)."""
    invalid = ~np.asarray(data.non_tensor_batch["is_action_valid"], dtype=bool)
    last = data.batch["response_mask"].sum(dim=1) - 1
    data.batch["token_level_rewards"][torch.arange(len(data)), last] -= coef * torch.as_tensor(
        invalid, dtype=torch.float32)


def step_penalty_of(trajs, coef: float = 0.1) -> np.ndarray:
    """The ``step_penalty`` proas's estimators take for these trajectories' format errors."""
    return coef * np.array([s.error for t in trajs for s in t.steps], dtype=np.float64)


def first_token_values(adv: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
    return adv[torch.arange(adv.shape[0]), mask.argmax(dim=1)].numpy()


# ---------------------------------------------------------------------- round trip
def test_dataproto_round_trip_survives_padding_and_reordering():
    rng = np.random.default_rng(0)
    trajs = make_trajectories(rng)
    data, origin = shuffle_and_pad(make_dataproto(trajs), rng)
    layout = rows_to_trajectories(data.non_tensor_batch)
    assert layout.n_duplicate_rows == 3
    by_id = {t.trajectory: t.to_json() for t in layout.trajectories}
    assert by_id == {t.trajectory: t.to_json() for t in trajs}
    # each row maps to the step it was a copy of
    flat_ids = [(t.trajectory, k) for t in layout.trajectories for k in range(len(t))]
    orig_ids = [(t.trajectory, k) for t in trajs for k in range(len(t))]
    assert [flat_ids[s] for s in layout.row_to_step] == [orig_ids[o] for o in origin]


# ---------------------------------------------------------------------- GRPO / RLOO parity
@settings(max_examples=25, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1), norm=st.booleans())
def test_grpo_cross_steps_equals_verls_grpo_on_the_same_rows(seed, norm):
    rng = np.random.default_rng(seed)
    trajs = make_trajectories(rng, n_groups=int(rng.integers(1, 4)), group_size=int(rng.integers(1, 5)))
    data = make_dataproto(trajs, rng)
    apply_invalid_action_penalty(data)  # kept by default, as verl-agent does
    verl_adv, verl_ret = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"],
        index=data.non_tensor_batch["uid"],
        norm_adv_by_std_in_grpo=norm,
    )
    credit = ProASCredit(estimator="grpo", estimator_options={"group_stats": "steps", "norm_by_std": norm},
                         shaping="none")
    credit.reshape(data)
    torch.testing.assert_close(data.batch["advantages"], verl_adv, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(data.batch["returns"], verl_ret, rtol=1e-5, atol=1e-5)


def test_grpo_per_trajectory_equals_verls_grpo_when_each_trajectory_is_one_row():
    rng = np.random.default_rng(7)
    trajs = make_trajectories(rng, n_groups=4, group_size=5, max_len=1)
    data = make_dataproto(trajs, rng)
    apply_invalid_action_penalty(data)
    verl_adv, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"],
        index=data.non_tensor_batch["uid"],
    )
    ProASCredit(estimator="grpo", shaping="none").reshape(data)
    torch.testing.assert_close(data.batch["advantages"], verl_adv, rtol=1e-5, atol=1e-5)
    assert verl_adv.abs().sum() > 0


def test_grpo_per_trajectory_differs_from_verl_when_lengths_differ_and_steps_equals_it():
    """proas's default, like verl, weighs every step row; group_stats=trajectories does not."""
    trajs = [
        Trajectory("u", "a", 1.0, [Step("s", "x", "g")]),
        Trajectory("u", "b", 0.0, [Step("s", "x", "t"), Step("t", "y", "t"), Step("t", "z", "t")]),
    ]
    data = make_dataproto(trajs)
    verl_adv, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"], index=data.non_tensor_batch["uid"],
    )
    # verl: rows [1, 0, 0, 0], mean 1/4, std sqrt(1/4) = 1/2: win row (1 - 1/4) / (1/2) = 1.5
    assert first_token_values(verl_adv, data.batch["response_mask"])[0] == pytest.approx(1.5, rel=1e-5)
    ProASCredit(estimator="grpo", shaping="none").reshape(data)
    got = first_token_values(data.batch["advantages"], data.batch["response_mask"])
    assert got[0] == pytest.approx(1.5, rel=1e-5)
    data = make_dataproto(trajs)
    ProASCredit(estimator="grpo", shaping="none", estimator_options={"group_stats": "trajectories"}).reshape(data)
    # trajectories [1, 0], mean 1/2, std 1/sqrt(2): win (1/2) * sqrt(2)
    got = first_token_values(data.batch["advantages"], data.batch["response_mask"])
    assert got[0] == pytest.approx(np.sqrt(0.5), rel=1e-5)


def test_rloo_equals_verls_rloo_when_each_trajectory_is_one_row():
    rng = np.random.default_rng(11)
    trajs = make_trajectories(rng, n_groups=3, group_size=4, max_len=1)
    trajs.append(Trajectory("lonely", "solo", 10.0, [Step("start", "a", "goal", reward=10.0)]))
    data = make_dataproto(trajs, rng)
    verl_adv, _ = core_algos.get_adv_estimator_fn("rloo")(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"], index=data.non_tensor_batch["uid"], config=None,
    )
    ProASCredit(estimator="rloo", shaping="none").reshape(data)
    torch.testing.assert_close(data.batch["advantages"], verl_adv, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------- GiGPO parity
def verl_agent_gigpo(token_level_rewards, step_env_rewards, response_mask, anchor_obs, uid, traj_uid,
                     gamma, step_weight, mode, eps=1e-6, step_penalty=None):
    """Test-only reference: verl-agent's GiGPO (gigpo/core_gigpo.py) written from its documented
    equations over step rows, one row at a time. verl 0.9.1 has no GiGPO of its own.

    Eq. 5: G_t = r_t + gamma G_{t+1} over each traj_uid's rows in batch order.
    Eq. 3: S = sum of the row's token rewards; statistics over every row sharing uid; a group of
           one row has mean 0, std 1; unbiased std.
    Eq. 6: step groups = rows of one uid whose anchor_obs are equal.
    Eq. 7: G normalised within its step group; a step group of one row gets 0.
    Eq. 8: A = A^E + step_weight A^S, broadcast to the response tokens.
    step_penalty: verl-agent's invalid-action penalty per row, subtracted from the row's
           discounted return after discounting (its trainer penalises ``step_rewards``, which
           already hold G_t); the token rewards come in already penalised.
    """
    remove_std = {"mean_norm": True, "mean_std_norm": False}[mode]
    n = token_level_rewards.shape[0]
    returns = [0.0] * n
    rows_of = {}
    for i in range(n):
        rows_of.setdefault(traj_uid[i], []).append(i)
    for rows in rows_of.values():
        running = 0.0
        for i in reversed(rows):
            running = float(step_env_rewards[i]) + gamma * running
            returns[i] = running
    if step_penalty is not None:
        returns = [r - float(p) for r, p in zip(returns, step_penalty)]

    def normalise(values, keys, singleton_is_zero):
        groups = {}
        for i in range(n):
            groups.setdefault(keys[i], []).append(values[i])
        out = []
        for i in range(n):
            g = torch.tensor(groups[keys[i]], dtype=torch.float64)
            if len(g) == 1:
                mean, std = (g[0] if singleton_is_zero else torch.tensor(0.0)), torch.tensor(1.0)
            else:
                mean, std = g.mean(), g.std()
            out.append(float(values[i] - mean) if remove_std else float((values[i] - mean) / (std + eps)))
        return out

    scores = token_level_rewards.sum(dim=-1).tolist()
    episode = normalise(scores, list(uid), singleton_is_zero=False)
    step = normalise(returns, [(uid[i], anchor_obs[i]) for i in range(n)], singleton_is_zero=True)
    adv = torch.tensor([e + step_weight * s for e, s in zip(episode, step)], dtype=torch.float32)
    return adv[:, None] * response_mask


@pytest.mark.parametrize("penalty", [0.0, 0.1])
@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_gigpo_cross_steps_equals_verl_agents_gigpo(mode, seed, penalty):
    rng = np.random.default_rng(100 + seed)
    trajs = make_trajectories(rng, n_groups=3, group_size=4, max_len=6)
    data = make_dataproto(trajs, rng)
    nt = data.non_tensor_batch
    apply_invalid_action_penalty(data, penalty)
    invalid = ~np.asarray(nt["is_action_valid"], dtype=bool)
    expected = verl_agent_gigpo(
        data.batch["token_level_rewards"], nt["rewards"], data.batch["response_mask"],
        nt["anchor_obs"], nt["uid"], nt["traj_uid"], gamma=0.95, step_weight=1.0, mode=mode,
        step_penalty=penalty * invalid,
    )
    credit = ProASCredit(estimator="gigpo", shaping="none", invalid_action_penalty=penalty,
                         estimator_options={"group_stats": "steps", "mode": mode, "gamma": 0.95})
    credit.reshape(data)
    torch.testing.assert_close(data.batch["advantages"], expected, rtol=1e-5, atol=1e-5)
    # the step level did something: some anchor groups have several members
    assert not np.allclose(credit.last_result.step_advantage, 0.0)


# ---------------------------------------------------------------------- reshape == credit layer
@pytest.mark.parametrize("estimator,options", [
    ("grpo", {"group_stats": "steps"}),
    ("dapo", {}),
    ("gigpo", {"group_stats": "steps", "mode": "mean_std_norm"}),
    ("rloo", {}),
    ("reinforce_pp", {}),
])
def test_reshaped_dataproto_equals_compute_credit_on_the_same_trajectories(estimator, options):
    rng = np.random.default_rng(5)
    trajs = make_trajectories(rng, n_groups=4, group_size=4)
    oracle = [t for t in trajs if t.success][:2]
    data, origin = shuffle_and_pad(make_dataproto(trajs, rng), rng, n_pad=5)
    # verl computes its own advantage first; ProAS replaces it
    data.batch["advantages"] = torch.full_like(data.batch["token_level_rewards"], 99.0)
    credit = ProASCredit(ReferenceGraph.from_trajectories(oracle), estimator=estimator,
                         estimator_options=options)
    metrics = credit.reshape(data)

    # the penalty of the invalid steps, as the hook reads it from is_action_valid (not rloo's or
    # REINFORCE++'s: proas's forms of them have no row-level term)
    penalised = estimator in ("grpo", "dapo", "gigpo")
    ref_options = dict(options, step_penalty=step_penalty_of(trajs)) if penalised else options
    ref = compute_credit(trajs, ReferenceGraph.from_trajectories(oracle), estimator=estimator,
                         estimator_options=ref_options, shaping="proas", evolve=True)
    mask = data.batch["response_mask"]
    expected = torch.as_tensor(ref.advantage[origin], dtype=torch.float32)[:, None] * mask
    torch.testing.assert_close(data.batch["advantages"], expected, rtol=1e-5, atol=1e-6)
    assert (data.batch["advantages"][mask == 0] == 0).all()
    assert not np.allclose(ref.advantage, ref.base_advantage)
    assert metrics["proas/duplicate_rows"] == 5.0
    assert credit.graph.num_nodes > ReferenceGraph.from_trajectories(oracle).num_nodes


def test_base_verl_on_verls_grpo_equals_base_proas_when_rows_of_a_trajectory_agree():
    rng = np.random.default_rng(21)
    trajs = make_trajectories(rng, n_groups=4, group_size=4)
    oracle = [t for t in trajs if t.success][:2]
    data = make_dataproto(trajs, rng)
    data.batch["advantages"], _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"], index=data.non_tensor_batch["uid"],
    )
    # padded after verl's GRPO: in verl-agent the copies would also weigh in its statistics
    data, origin = shuffle_and_pad(data, rng)
    ProASCredit(ReferenceGraph.from_trajectories(oracle), base="verl").reshape(data)
    ref = compute_credit(trajs, ReferenceGraph.from_trajectories(oracle), estimator="grpo",
                         estimator_options={"group_stats": "steps"}, evolve=True)
    expected = torch.as_tensor(ref.advantage[origin], dtype=torch.float32)[:, None] * data.batch["response_mask"]
    torch.testing.assert_close(data.batch["advantages"], expected, rtol=1e-5, atol=1e-5)


def test_base_verl_keeps_verl_agents_invalid_action_penalty_as_a_row_residual():
    rng = np.random.default_rng(22)
    trajs = make_trajectories(rng, n_groups=3, group_size=4)
    data = make_dataproto(trajs, rng)
    invalid = ~np.asarray(data.non_tensor_batch["is_action_valid"], dtype=bool)
    last = data.batch["response_mask"].sum(dim=1) - 1
    data.batch["token_level_rewards"][torch.arange(len(data)), last] -= 0.1 * torch.as_tensor(
        invalid, dtype=torch.float32
    )
    verl_adv, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"], index=data.non_tensor_batch["uid"],
    )
    data.batch["advantages"] = verl_adv.clone()
    credit = ProASCredit(base="verl", shaping="none")
    credit.reshape(data)
    torch.testing.assert_close(data.batch["advantages"], verl_adv, rtol=1e-5, atol=1e-6)
    res = credit.last_result
    assert not np.allclose(res.step_advantage, 0.0)  # the penalty lives in the residual
    # the residual of a trajectory sums to zero: A_i is its mean
    sums = np.add.reduceat(res.step_advantage, res.offsets[:-1])
    np.testing.assert_allclose(sums, 0.0, atol=1e-5)


# ---------------------------------------------------------------------- registered estimators
def test_registered_names_resolve_in_verls_registry_and_registering_twice_is_harmless():
    assert register_estimators() == ESTIMATOR_NAMES
    assert register_estimators() == ESTIMATOR_NAMES
    for name in ESTIMATOR_NAMES:
        assert callable(core_algos.get_adv_estimator_fn(name))


def test_verls_compute_advantage_dispatches_proas_gigpo_to_the_bound_credit():
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.ray_trainer import compute_advantage as verl_compute_advantage

    rng = np.random.default_rng(9)
    trajs = make_trajectories(rng)
    options = {"group_stats": "steps", "mode": "mean_norm"}
    oracle = [t for t in trajs if t.success][:1]
    data, _ = shuffle_and_pad(make_dataproto(trajs, rng), rng)

    register_estimators()
    credit = ProASCredit(ReferenceGraph.from_trajectories(oracle), estimator="gigpo", estimator_options=options)
    with bind(credit, data):
        out = verl_compute_advantage(data, "proas_gigpo", config=AlgoConfig(adv_estimator="proas_gigpo"))
    twin = ProASCredit(ReferenceGraph.from_trajectories(oracle), estimator="gigpo", estimator_options=options)
    row_adv = twin.step_advantages(data.non_tensor_batch)
    want = torch.as_tensor(row_adv, dtype=torch.float32)[:, None] * data.batch["response_mask"]
    torch.testing.assert_close(out.batch["advantages"], want, rtol=1e-6, atol=1e-6)
    assert credit.batches_seen == 1


def test_proas_compute_advantage_binds_for_proas_names_and_passes_others_through():
    from verl.trainer.config import AlgoConfig

    rng = np.random.default_rng(4)
    trajs = make_trajectories(rng)
    data = make_dataproto(trajs, rng)
    credit = ProASCredit(estimator="grpo", estimator_options={"group_stats": "steps"}, shaping="none",
                         invalid_action_penalty=0.0)  # verl 0.9.1 has no invalid-action penalty
    out = compute_advantage(data, "proas_grpo", credit=credit, config=AlgoConfig())
    verl_adv, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"], index=data.non_tensor_batch["uid"],
    )
    torch.testing.assert_close(out.batch["advantages"], verl_adv, rtol=1e-5, atol=1e-5)
    plain = make_dataproto(trajs, np.random.default_rng(1))
    want, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=plain.batch["token_level_rewards"],
        response_mask=plain.batch["response_mask"], index=plain.non_tensor_batch["uid"],
    )
    plain = compute_advantage(plain, "grpo", config=AlgoConfig())
    torch.testing.assert_close(plain.batch["advantages"], want, rtol=1e-6, atol=1e-6)
    with pytest.raises(ProasError, match="needs a ProASCredit"):
        compute_advantage(data, "proas_grpo", config=AlgoConfig())


def test_patch_ray_trainer_routes_the_trainers_own_call_and_restores_it():
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo import ray_trainer

    original = ray_trainer.compute_advantage
    rng = np.random.default_rng(6)
    trajs = make_trajectories(rng)
    data = make_dataproto(trajs, rng)
    credit = ProASCredit(estimator="rloo", shaping="no_apr")
    with patch_ray_trainer(credit):
        # what RayPPOTrainer.fit does: look the name up in its module at call time
        out = ray_trainer.compute_advantage(data, adv_estimator="proas_rloo", gamma=1.0, lam=1.0,
                                            config=AlgoConfig(adv_estimator="proas_rloo"))
        plain = ray_trainer.compute_advantage(make_dataproto(trajs), adv_estimator="grpo",
                                              config=AlgoConfig())
    assert ray_trainer.compute_advantage is original
    assert credit.batches_seen == 1
    want = ProASCredit(estimator="rloo", shaping="no_apr").step_advantages(data.non_tensor_batch)
    torch.testing.assert_close(out.batch["advantages"],
                               torch.as_tensor(want, dtype=torch.float32)[:, None] * data.batch["response_mask"])
    assert plain.batch["advantages"].abs().sum() > 0


def test_registered_estimator_refuses_without_a_bound_batch_or_with_another_batch():
    register_estimators()
    fn = core_algos.get_adv_estimator_fn("proas_grpo")
    rng = np.random.default_rng(2)
    data = make_dataproto(make_trajectories(rng), rng)
    kwargs = dict(token_level_rewards=data.batch["token_level_rewards"],
                  response_mask=data.batch["response_mask"], index=data.non_tensor_batch["uid"], config=None)
    with pytest.raises(ProasError, match="verl's interface does not pass"):
        fn(**kwargs)
    other = make_dataproto(make_trajectories(np.random.default_rng(3), n_groups=2), rng)
    with bind(ProASCredit(), other), pytest.raises(ProasError, match="not the bound batch's rows"):
        fn(**kwargs)
    with bind(ProASCredit(estimator="gigpo"), data), pytest.raises(ProasError, match="make them agree"):
        fn(**kwargs)
    with bind(ProASCredit(base="verl"), data), pytest.raises(ProasError, match="use base='proas'"):
        fn(**kwargs)
