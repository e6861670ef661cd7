"""The verl bridge without verl: step rows <-> trajectories, token broadcasting, the graph's life.

These run in the main suite (numpy + torch only); tests/test_verl_parity.py repeats the
end-to-end checks on real verl ``DataProto`` objects in the verl venv (.ci/verl_env.sh).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

import numpy as np
import pytest
import torch

import verl_rows_oracle as oracle
from proas.credit import SHAPINGS, CreditBatch, ReferenceGraph, compute_credit
from proas.errors import ProasError
from proas.integrations.verl import (
    HOOK_ESTIMATORS,
    ProASCredit,
    StepColumns,
    broadcast_to_tokens,
    rows_to_batch,
    rows_to_trajectories,
    step_values_to_rows,
    trajectories_to_rows,
)
from proas.types import Step, Trajectory

SQ = 1 / np.sqrt(2)  # GRPO advantage magnitude of a {1, 0} group: 0.5 / std([1, 0])


def hand_batch() -> list[Trajectory]:
    """One group: a success with an error step, a failure that loops and returns to the start."""
    win = Trajectory(
        group="g", trajectory="win", reward=1.0,
        steps=[
            Step("s0", "go", "s1"),
            Step("s1", "bad", "s1", error=True),
            Step("s1", "take", "goal"),
        ],
    )
    lose = Trajectory(
        group="g", trajectory="lose", reward=0.0,
        steps=[
            Step("s0", "wander", "x"),
            Step("x", "look", "x"),
            Step("x", "back", "s0"),
        ],
    )
    return [win, lose]


# Worked by hand, with one sample per trajectory and the node rule (HAND_OPTIONS).
# GRPO: A = +-0.5 / std([1, 0]) = +-1/sqrt(2) (std unbiased, eps negligible).
# Graph from the win's clean path s0 -> s1 -> goal. Win: Rea = [1, 0, 1] (step 1 is an error)
# -> MUI gives [A, 0, A]. Lose: x is no node, so Rea = [0, 0, 1] (s0 is a node), PA = [0, 0, 0]
# (s0 was visited), D = [3, 2, 1], mean 2 -> APR gives A * [1.5, 1, 0.5].
HAND_ADVANTAGE = np.array([SQ, 0.0, SQ, -1.5 * SQ, -SQ, -0.5 * SQ])
HAND_OPTIONS = {"estimator_options": {"group_stats": "trajectories"}, "rea": "node"}
# With the defaults (statistics over the 6 step rows, the transition rule): the rows score
# [1, 1, 1, 0, 0, 0], mean 0.5, unbiased std sqrt(0.3); lose's steps are no ARG edges, so
# Rea = PA = [0, 0, 0] and D = [3, 2, 1] as before.
# (Without verl-agent's invalid-action penalty: NO_PENALTY.)
SQ_ROWS = 0.5 / (np.sqrt(0.3) + 1e-6)
DEFAULT_ADVANTAGE = np.array([SQ_ROWS, 0.0, SQ_ROWS, -1.5 * SQ_ROWS, -SQ_ROWS, -0.5 * SQ_ROWS])
NO_PENALTY = {"invalid_action_penalty": 0.0}
# With the penalty (0.1, the default): the win's error row is format-invalid (is_action_valid
# False), so the rows score [1, 0.9, 1, 0, 0, 0]: mean 2.9/6, unbiased std sqrt(1.408333/5).
# A_win = (1 - mean)/std, A_lose = -mean/std; the error row keeps its own -0.1/std (B, not
# shaped) while MUI zeroes its A part; lose's steps get APR's [1.5, 1, 0.5] as before.
_MEAN, _STD = 2.9 / 6, np.sqrt((2 * (1 - 2.9 / 6) ** 2 + (0.9 - 2.9 / 6) ** 2 + 3 * (2.9 / 6) ** 2) / 5) + 1e-6
PENALISED_ADVANTAGE = np.array([
    (1 - _MEAN) / _STD, -0.1 / _STD, (1 - _MEAN) / _STD,
    -1.5 * _MEAN / _STD, -_MEAN / _STD, -0.5 * _MEAN / _STD,
])


class FakeDataProto:
    """verl's DataProto layout (``batch`` of tensors, ``non_tensor_batch`` of object arrays)."""

    def __init__(self, batch: dict, non_tensor_batch: dict):
        self.batch = batch
        self.non_tensor_batch = non_tensor_batch

    def __len__(self) -> int:
        return next(iter(self.batch.values())).shape[0]


def fake_data(trajs, perm=None, response_len=4, seed=0) -> FakeDataProto:
    rows = trajectories_to_rows(trajs)
    n = len(rows["uid"])
    perm = np.arange(n) if perm is None else np.asarray(perm)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, response_len + 1, size=len(perm))
    mask = (torch.arange(response_len)[None, :] < torch.as_tensor(lengths)[:, None]).to(torch.int64)
    return FakeDataProto(
        {"response_mask": mask, "advantages": torch.zeros(len(perm), response_len)},
        {k: v[perm] for k, v in rows.items()},
    )


# ---------------------------------------------------------------------- rows <-> trajectories
def test_round_trip_recovers_every_step_field():
    trajs = hand_batch()
    for tr in trajs:
        for t, s in enumerate(tr.steps):
            s.anchor = f"obs {tr.trajectory} {t}"
            s.reward = float(t)
    layout = rows_to_trajectories(trajectories_to_rows(trajs))
    assert [t.to_json() for t in layout.trajectories] == [t.to_json() for t in trajs]
    assert layout.row_to_step.tolist() == list(range(6))
    assert layout.offsets.tolist() == [0, 3, 6]


def test_shuffled_rows_are_put_back_in_step_order():
    trajs = hand_batch()
    perm = np.array([4, 2, 0, 5, 1, 3])
    rows = {k: v[perm] for k, v in trajectories_to_rows(trajs).items()}
    layout = rows_to_trajectories(rows)
    # first-seen trajectory is "lose" (row 0 holds lose's step 1)
    assert [t.trajectory for t in layout.trajectories] == ["lose", "win"]
    assert [s.action for s in layout.trajectories[0].steps] == ["wander", "look", "back"]
    # row r holds original step perm[r]; lose's steps now come first
    flat_of_original = {3: 0, 4: 1, 5: 2, 0: 3, 1: 4, 2: 5}
    assert layout.row_to_step.tolist() == [flat_of_original[int(p)] for p in perm]


def test_padding_copies_map_to_the_same_step():
    trajs = hand_batch()
    rows = trajectories_to_rows(trajs)
    pick = np.array([0, 1, 2, 3, 4, 5, 4, 1])  # verl-agent's adjust_batch appends copies
    layout = rows_to_trajectories({k: v[pick] for k, v in rows.items()})
    assert layout.n_duplicate_rows == 2
    assert layout.n_steps == 6
    assert layout.row_to_step.tolist() == [0, 1, 2, 3, 4, 5, 4, 1]
    vals = np.arange(6) * 10.0
    assert step_values_to_rows(vals, layout).tolist() == [0, 10, 20, 30, 40, 50, 40, 10]


def test_without_a_step_column_row_order_is_step_order():
    trajs = hand_batch()
    cols = StepColumns(step=None)
    rows = trajectories_to_rows(trajs, cols)
    assert "step_index" not in rows
    layout = rows_to_trajectories(rows, cols)
    got = [(s.state, s.action, s.next_state, s.error) for t in layout.trajectories for s in t.steps]
    assert got == [(s.state, s.action, s.next_state, s.error) for t in trajs for s in t.steps]


def test_missing_step_rewards_become_the_outcome_on_the_last_step():
    layout = rows_to_trajectories(trajectories_to_rows(hand_batch()))
    assert [s.reward for s in layout.trajectories[0].steps] == [0.0, 0.0, 1.0]
    assert [s.anchor for s in layout.trajectories[1].steps] == ["s0", "x", "x"]


def test_error_is_not_is_action_valid_unless_an_error_column_is_named():
    trajs = hand_batch()
    rows = trajectories_to_rows(trajs)
    assert rows["is_action_valid"].tolist() == [True, False, True, True, True, True]
    layout = rows_to_trajectories(rows)
    assert [s.error for s in layout.trajectories[0].steps] == [False, True, False]
    rows["proas_error"] = np.array([0, 0, 0, 0, 1, 0], dtype=object)  # e.g. "Nothing happens."
    layout = rows_to_trajectories(rows, StepColumns(error="proas_error"))
    assert [s.error for s in layout.trajectories[1].steps] == [False, True, False]
    assert [s.error for s in layout.trajectories[0].steps] == [False, False, False]


def test_won_flags_travel_on_every_row_when_any_trajectory_has_one():
    trajs = hand_batch()
    trajs[0].won = False  # a positive reward that the env did not call a win
    cols = StepColumns(won="won")
    rows = trajectories_to_rows(trajs, cols)
    assert rows["won"].tolist() == [False] * 6
    layout = rows_to_trajectories(rows, cols)
    assert [t.won for t in layout.trajectories] == [False, False]
    assert [t.success for t in layout.trajectories] == [False, False]


def test_missing_columns_are_named_in_one_clear_error():
    rows = trajectories_to_rows(hand_batch())
    del rows["abstract_state"], rows["step_index"]
    with pytest.raises(ProasError, match=r"lacks column\(s\) \['abstract_state', 'step_index'\]"):
        rows_to_trajectories(rows)


def test_inconsistent_rows_are_refused():
    rows = trajectories_to_rows(hand_batch())
    bad = dict(rows, uid=np.array(["g", "g", "h", "g", "g", "g"], dtype=object))
    with pytest.raises(ProasError, match="several groups"):
        rows_to_trajectories(bad)
    bad = dict(rows, episode_rewards=np.array([1, 1, 0, 0, 0, 0], dtype=object))
    with pytest.raises(ProasError, match="disagree on 'episode_rewards'"):
        rows_to_trajectories(bad)
    bad = dict(rows, step_index=np.array([0, 1, 3, 0, 1, 2], dtype=object))
    with pytest.raises(ProasError, match=r"are not 0\.\.2"):
        rows_to_trajectories(bad)
    for huge in (2**63, 2**70, -(2**70)):  # beyond int64: the same one-line refusal, not an OverflowError
        bad = dict(rows, step_index=np.array([0, 1, huge, 0, 1, 2], dtype=object))
        with pytest.raises(ProasError, match=r"not 0\.\.2|negative"):
            rows_to_batch(bad)
    pick = np.array([0, 1, 2, 3, 4, 5, 0])
    bad = {k: v[pick] for k, v in rows.items()}
    bad["next_abstract_state"] = bad["next_abstract_state"].copy()
    bad["next_abstract_state"][6] = "elsewhere"
    with pytest.raises(ProasError, match="two rows claim step 0"):
        rows_to_trajectories(bad)


def test_unknown_column_setting_is_refused():
    with pytest.raises(ProasError, match="unknown proas column"):
        StepColumns.from_mapping({"trajectory_id": "tid"})
    assert StepColumns.from_mapping({"trajectory": "tid"}).trajectory == "tid"


# ---------------------------------------------------------------------- tokens
def test_every_response_token_gets_the_step_value_and_padding_gets_zero():
    mask = torch.tensor([[1, 1, 0], [0, 1, 1], [0, 0, 0]])
    out = broadcast_to_tokens(np.array([1.5, -2.0, 7.0]), mask)
    assert out.dtype == torch.float32
    assert out.tolist() == [[1.5, 1.5, 0.0], [0.0, -2.0, -2.0], [0.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="expected 3 row values"):
        broadcast_to_tokens(np.zeros(2), mask)


# ---------------------------------------------------------------------- the hook
def test_reshape_gives_the_hand_worked_proas_advantages_on_shuffled_padded_rows():
    trajs = hand_batch()
    pick = np.array([5, 1, 3, 0, 2, 4, 1])
    data = fake_data(trajs, pick)
    credit = ProASCredit(ReferenceGraph.from_trajectories(trajs), evolve=False, **HAND_OPTIONS, **NO_PENALTY)
    credit.reshape(data)
    mask = data.batch["response_mask"].numpy()
    expected = HAND_ADVANTAGE[pick][:, None] * mask
    np.testing.assert_allclose(data.batch["advantages"].numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(data.batch["returns"].numpy(), data.batch["advantages"].numpy())
    # verl-agent's statistics over step rows and the transition rule, penalty off
    data = fake_data(trajs, pick)
    ProASCredit(ReferenceGraph.from_trajectories(trajs), evolve=False, **NO_PENALTY).reshape(data)
    np.testing.assert_allclose(data.batch["advantages"].numpy(), DEFAULT_ADVANTAGE[pick][:, None] * mask,
                               rtol=1e-5, atol=1e-6)
    # the defaults: verl-agent's invalid-action penalty kept
    data = fake_data(trajs, pick)
    ProASCredit(ReferenceGraph.from_trajectories(trajs), evolve=False).reshape(data)
    np.testing.assert_allclose(data.batch["advantages"].numpy(), PENALISED_ADVANTAGE[pick][:, None] * mask,
                               rtol=1e-5, atol=1e-6)


def test_the_penalty_reads_is_action_valid_not_the_error_column():
    """verl-agent penalises its format check (is_action_valid); ProAS's env_error may be wider."""
    trajs = hand_batch()
    rows = trajectories_to_rows(trajs, StepColumns(error="env_error"))
    # env_error flags the win's step 1, but the format was fine everywhere except lose's step 0
    rows["is_action_valid"] = np.array([True, True, True, False, True, True], dtype=object)
    data = FakeDataProto({"response_mask": torch.ones(6, 2, dtype=torch.int64)}, rows)
    credit = ProASCredit(ReferenceGraph.from_trajectories(trajs), evolve=False, shaping="none",
                         columns=StepColumns(error="env_error"), invalid_action_penalty=0.5)
    credit.reshape(data)
    scores = np.array([1, 1, 1, -0.5, 0, 0])
    std = scores.std(ddof=1) + 1e-6
    want = np.array([(1 - scores.mean()) / std] * 3 + [(0 - scores.mean()) / std] * 3)
    want[3] -= 0.5 / std
    np.testing.assert_allclose(data.batch["advantages"][:, 0].numpy(), want, rtol=1e-5)
    # no validity column, or a coefficient of 0: no penalty
    del rows["is_action_valid"]
    data = FakeDataProto({"response_mask": torch.ones(6, 2, dtype=torch.int64)}, rows)
    credit = ProASCredit(evolve=False, shaping="none", columns=StepColumns(error="env_error"))
    credit.reshape(data)
    assert len(set(np.round(data.batch["advantages"][:3, 0].numpy(), 6))) == 1
    with pytest.raises(ProasError, match="invalid_action_penalty must be"):
        ProASCredit(invalid_action_penalty=-0.1)
    with pytest.raises(ProasError, match="set invalid_action_penalty instead"):
        ProASCredit(estimator_options={"step_penalty": [0.1, 0.2]})


def test_an_empty_evolving_graph_learns_the_batch_successes_before_annotating():
    trajs = hand_batch()
    data = fake_data(trajs)
    credit = ProASCredit(**NO_PENALTY)  # empty graph, evolving; step-row statistics, transition rule
    metrics = credit.reshape(data)
    first_tokens = data.batch["advantages"][:, 0].numpy()
    np.testing.assert_allclose(first_tokens, DEFAULT_ADVANTAGE, rtol=1e-5)
    assert set(credit.graph.nodes()) == {"s0", "s1", "goal"}
    assert metrics["proas/graph_nodes"] == 3.0
    assert metrics["proas/reasonable_rate"] == pytest.approx(2 / 6)  # the win's two edges


def test_a_static_empty_graph_masks_every_success_step():
    data = fake_data(hand_batch())
    credit = ProASCredit(evolve=False, **NO_PENALTY)
    credit.reshape(data)
    assert credit.graph.num_nodes == 0
    adv = data.batch["advantages"][:, 0].numpy()
    assert adv[:3].tolist() == [0.0, 0.0, 0.0]  # nothing is a node: Rea = 0 everywhere
    # failure: no step advances, D = [3, 2, 1] as before
    np.testing.assert_allclose(adv[3:], DEFAULT_ADVANTAGE[3:], rtol=1e-5)


@pytest.mark.parametrize("estimator,options,shaping", [
    ("grpo", {"group_stats": "steps"}, "proas"),
    ("gigpo", {"mode": "mean_std_norm"}, "proas"),
    ("rloo", {}, "no_mui"),
    ("reinforce_pp", {}, "suffix"),
])
def test_reshape_equals_compute_credit_on_the_same_trajectories(estimator, options, shaping):
    rng = np.random.default_rng(3)
    trajs = random_batch(rng)
    perm = rng.permutation(sum(len(t) for t in trajs))
    data = fake_data(trajs, perm, response_len=5, seed=1)
    oracle = trajs[:1]
    credit = ProASCredit(
        ReferenceGraph.from_trajectories(oracle), estimator=estimator,
        estimator_options=options, shaping=shaping,
    )
    credit.reshape(data)
    ref_trajs = rows_to_trajectories(trajectories_to_rows(trajs)).trajectories
    if estimator in ("grpo", "gigpo"):
        # verl-agent's invalid-action penalty (kept by default): 0.1 on every invalid step
        errors = np.array([s.error for t in ref_trajs for s in t.steps], dtype=np.float64)
        options = dict(options, step_penalty=0.1 * errors)
        assert errors.any()
    ref = compute_credit(
        ref_trajs, ReferenceGraph.from_trajectories(oracle), estimator=estimator,
        estimator_options=options, shaping=shaping, evolve=True,
    )
    expected = ref.advantage[perm][:, None] * data.batch["response_mask"].numpy()
    np.testing.assert_allclose(data.batch["advantages"].numpy(), expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(ref.advantage, ref.base_advantage)  # the shaping did something


def random_batch(rng: np.random.Generator, n_groups: int = 3, group_size: int = 4) -> list[Trajectory]:
    """Small random rooms: states r0..r5, goal g; some errors, loops and shared anchors."""
    trajs = []
    for gi in range(n_groups):
        for k in range(group_size):
            n = int(rng.integers(1, 6))
            states = ["r0"] + [f"r{int(rng.integers(0, 6))}" for _ in range(n)]
            won = bool(rng.random() < 0.5)
            if won:
                states[-1] = "g"
            steps = [
                Step(states[t], f"a{t}", states[t + 1], error=bool(rng.random() < 0.2),
                     anchor=f"obs-{states[t]}", reward=(10.0 if won and t == n - 1 else 0.0))
                for t in range(n)
            ]
            trajs.append(Trajectory(f"G{gi}", f"T{gi}.{k}", 10.0 if won else 0.0, steps))
        trajs[gi * group_size].reward = 10.0  # every group has a success ...
        trajs[gi * group_size].steps[-1].next_state = "g"
        trajs[gi * group_size].steps[-1].reward = 10.0
    return trajs


def test_base_verl_reshapes_verls_own_advantage_keeping_row_residuals():
    # verl-agent's GRPO with its invalid-action penalty: the win's error row scores 0.1 lower,
    # so verl gave rows [0.7, 0.6, 0.7] and [-0.7] * 3 (values made up, the split is the point).
    data = fake_data(hand_batch())
    verl_rows = torch.tensor([0.7, 0.6, 0.7, -0.7, -0.7, -0.7])
    data.batch["advantages"] = verl_rows[:, None] * data.batch["response_mask"]
    credit = ProASCredit(ReferenceGraph.from_trajectories(hand_batch()), base="verl", evolve=False)
    credit.reshape(data)
    # win: A = mean = 2/3, residual B = [1/30, -1/15, 1/30]; MUI with Rea = [1, 0, 1] -> A*Rea + B
    # lose: A = -0.7, B = 0; APR with D = [3, 2, 1], mean 2
    expected = np.array([0.7, -1 / 15, 0.7, -1.05, -0.7, -0.35])
    got = data.batch["advantages"][:, 0].numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    np.testing.assert_allclose(credit.last_result.base_advantage, verl_rows.numpy(), rtol=1e-6)


def test_base_verl_with_no_shaping_gives_verls_advantage_back():
    data = fake_data(hand_batch(), [5, 0, 3, 1, 4, 2, 0])
    verl_rows = torch.tensor([0.3, -1.2, 0.5, 2.0, 0.1, -0.4, -1.2])
    data.batch["advantages"] = verl_rows[:, None] * data.batch["response_mask"]
    ProASCredit(base="verl", shaping="none").reshape(data)
    np.testing.assert_allclose(data.batch["advantages"].numpy(),
                               (verl_rows[:, None] * data.batch["response_mask"]).numpy(), rtol=1e-6)


def test_base_verl_needs_an_outcome_estimator_and_verls_advantages():
    with pytest.raises(ProasError, match="use base='proas' for GiGPO"):
        ProASCredit(base="verl", estimator="gigpo")
    with pytest.raises(ProasError, match="unknown base"):
        ProASCredit(base="trl")
    data = fake_data(hand_batch())
    del data.batch["advantages"]
    with pytest.raises(ProasError, match="the batch has none yet"):
        ProASCredit(base="verl").reshape(data)


def test_bad_settings_are_clear_errors():
    with pytest.raises(ProasError, match="cannot be reshaped inside verl"):
        ProASCredit(estimator="gae")
    with pytest.raises(ProasError, match="unknown shaping"):
        ProASCredit(shaping="sideways")
    with pytest.raises(ProasError, match="unknown proas config key"):
        ProASCredit.from_config({"estimater": "grpo"})
    with pytest.raises(ProasError, match="bad estimator_options for 'grpo'.*gamma"):
        ProASCredit(estimator_options={"gamma": 0.9})  # grpo has no gamma
    with pytest.raises(ProasError, match="bad estimator_options for 'gigpo': unknown mode 'mean'"):
        ProASCredit(estimator="gigpo", estimator_options={"mode": "mean"})
    with pytest.raises(ProasError, match=r"bad shaping_options: unknown option\(s\) eps"):
        ProASCredit(shaping_options={"eps": 0.1})
    with pytest.raises(ProasError, match="bad estimator_options for 'gigpo': .*gamma must be a float"):
        ProASCredit(estimator="gigpo", estimator_options={"gamma": "0.9"})


@pytest.mark.parametrize("estimator", HOOK_ESTIMATORS)
@pytest.mark.parametrize("shaping", SHAPINGS)
def test_every_registered_estimator_and_shaping_reshapes_a_batch(estimator, shaping):
    data = fake_data(hand_batch())
    ProASCredit(estimator=estimator, shaping=shaping, **NO_PENALTY).reshape(data)
    assert np.isfinite(data.batch["advantages"].numpy()).all()


def test_from_config_loads_the_graph_and_settings(tmp_path):
    from omegaconf import OmegaConf

    graph = ReferenceGraph.from_trajectories(hand_batch())
    graph.save(tmp_path / "arg.json.gz")
    cfg = OmegaConf.create({
        "graph": str(tmp_path / "arg.json.gz"), "estimator": "gigpo",
        "estimator_options": {"group_stats": "steps", "mode": "mean_norm"},
        "shaping": "no_apr", "evolve": False, "columns": {"step": "t"}, "seed": 7,
    })
    credit = ProASCredit.from_config(cfg)
    assert (credit.estimator, credit.shaping, credit.evolve, credit.seed) == ("gigpo", "no_apr", False, 7)
    assert credit.estimator_options == {"group_stats": "steps", "mode": "mean_norm"}
    assert credit.columns.step == "t"
    assert set(credit.graph.nodes()) == {"s0", "s1", "goal"}


# ---------------------------------------------------------------------- checkpoints
def test_checkpoint_round_trip_and_resume_from_verls_tracker(tmp_path):
    credit = ProASCredit()
    credit.reshape(fake_data(hand_batch()))
    step_dir = tmp_path / "global_step_5"
    credit.save_checkpoint(step_dir)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("5")

    fresh = ProASCredit()
    assert fresh.resume(tmp_path) == 5
    assert fresh.batches_seen == 1
    assert sorted(fresh.graph.edges()) == sorted(credit.graph.edges())
    assert ProASCredit().resume(tmp_path / "nothing-here") is None


def test_corrupt_or_missing_checkpoints_are_clear_errors_and_leave_the_graph(tmp_path):
    credit = ProASCredit(ReferenceGraph.from_trajectories(hand_batch()))
    with pytest.raises(ProasError, match="no ProAS checkpoint"):
        credit.load_checkpoint(tmp_path)
    saved = credit.save_checkpoint(tmp_path)
    (saved / "state.json").write_text("{not json")
    with pytest.raises(ProasError, match="corrupt ProAS checkpoint"):
        credit.load_checkpoint(tmp_path)
    (saved / "state.json").write_text(json.dumps({"format": "proas-verl-credit", "version": 1, "batches_seen": 2}))
    (saved / "graph.json.gz").write_bytes(b"\x1f\x8bgarbage")
    with pytest.raises(ProasError, match="corrupt graph file"):
        credit.load_checkpoint(tmp_path)
    assert credit.graph.num_nodes == 3 and credit.batches_seen == 0
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("five")
    with pytest.raises(ProasError, match="expected a step number"):
        credit.resume(tmp_path)


# ---------------------------------------------------------------------- the array path
def _object_batch(rows, cols=None):
    """The object path the hook used before ``rows_to_batch``: Step objects, then arrays (the
    old loop converter, frozen in ``verl_rows_oracle``)."""
    layout = oracle.rows_to_trajectories(rows, cols)
    return layout, CreditBatch.from_trajectories(layout.trajectories)


def _assert_same_batch(new, old):
    for f in dataclasses.fields(CreditBatch):
        a, b = getattr(new.batch, f.name), getattr(old[1], f.name)
        if isinstance(b, list):
            assert a == b and [type(x) for x in a] == [type(x) for x in b], f.name
        else:
            assert a.dtype == b.dtype, f.name
            np.testing.assert_array_equal(a, b, err_msg=f.name)
    np.testing.assert_array_equal(new.row_to_step, old[0].row_to_step)
    np.testing.assert_array_equal(new.offsets, old[0].offsets)
    assert new.n_duplicate_rows == old[0].n_duplicate_rows
    assert [t.to_json() for t in new.trajectories] == [t.to_json() for t in old[0].trajectories]


def _padded_shuffled_rows(rng, trajs, cols=None):
    rows = trajectories_to_rows(trajs, cols)
    n = len(rows["uid"])
    # verl-agent pads with copies of random rows (adjust_batch), then reorders (_balance_batch)
    pick = rng.permutation(np.concatenate([np.arange(n), rng.integers(0, n, size=int(rng.integers(0, n + 1)))]))
    return {k: v[pick] for k, v in rows.items()}


@pytest.mark.parametrize("seed", range(8))
def test_rows_to_batch_equals_the_object_path_on_padded_shuffled_batches(seed):
    rng = np.random.default_rng(seed)
    trajs = random_batch(rng, n_groups=int(rng.integers(1, 5)), group_size=int(rng.integers(1, 6)))
    if seed % 2:  # the won column, and steps without an env reward on some trajectories
        for tr in trajs[::2]:
            tr.won = bool(rng.random() < 0.5)
    rows = _padded_shuffled_rows(rng, trajs)
    if seed % 3 == 0:  # no step-reward and no anchor column: the credit layer's defaults
        rows.pop("rewards")
        rows.pop("anchor_obs")
    _assert_same_batch(rows_to_batch(rows), _object_batch(rows))
    # and the graph evolved from the arrays is the graph evolved from the trajectories
    g_new, g_old = ReferenceGraph.from_trajectories(trajs[:1]), ReferenceGraph.from_trajectories(trajs[:1])
    assert g_new.add_batch(rows_to_batch(rows).batch) == g_old.add_trajectories(_object_batch(rows)[0].trajectories)
    assert g_new.to_json() == g_old.to_json()


@pytest.mark.parametrize("estimator", ["grpo", "gigpo"])
@pytest.mark.parametrize("evolve", [True, False])
def test_hook_array_path_equals_compute_credit_on_padded_shuffled_batches(estimator, evolve):
    for seed in range(4):
        rng = np.random.default_rng(100 + seed)
        trajs = random_batch(rng, n_groups=3, group_size=4)
        rows = _padded_shuffled_rows(rng, trajs)
        graph = ReferenceGraph.from_trajectories(trajs[:1])
        credit = ProASCredit(graph.copy(), estimator=estimator, evolve=evolve, shaping="random", seed=seed)
        got = credit.step_advantages(rows)
        layout = oracle.rows_to_trajectories(rows)
        step_valid = np.ones(layout.n_steps, dtype=bool)
        step_valid[layout.row_to_step] = rows["is_action_valid"].astype(bool)
        ref_graph = graph.copy()
        ref = compute_credit(
            layout.trajectories, ref_graph, estimator=estimator, shaping="random", seed=seed, evolve=evolve,
            estimator_options={"step_penalty": 0.1 * (~step_valid)},
        )
        np.testing.assert_array_equal(got, ref.advantage[layout.row_to_step])
        assert credit.graph.to_json() == ref_graph.to_json()


def test_rows_to_batch_handles_odd_types_and_bad_rows_as_the_object_path_did():
    rows = trajectories_to_rows(hand_batch())
    cols = StepColumns(step=None, action=None, anchor=None)
    odd = dict(rows)
    odd["traj_uid"] = np.array([t.encode() for t in rows["traj_uid"]], dtype=object)  # bytes
    odd["step_index"] = np.array([str(t) for t in rows["step_index"]], dtype=object)
    odd["is_action_valid"] = np.array([int(v) for v in rows["is_action_valid"]], dtype=object)
    odd["episode_rewards"] = np.array([str(v) for v in rows["episode_rewards"]], dtype=object)
    for case, c in [(rows, cols), (odd, None), (odd, cols)]:
        _assert_same_batch(rows_to_batch(case, c), _object_batch(case, c))
    # the same errors as the object path
    for column, value in [("uid", "h"), ("episode_rewards", 7.0), ("step_index", 9),
                          ("episode_rewards", np.nan), ("rewards", None), ("step_index", -1)]:
        bad = {k: v.copy() for k, v in rows.items()}
        bad[column][1] = value
        with pytest.raises(ProasError) as old:
            oracle.rows_to_trajectories(bad)
        with pytest.raises(ProasError, match=re.escape(str(old.value))):
            rows_to_batch(bad)
    dup = {k: np.concatenate([v, v[:1]]) for k, v in rows.items()}
    dup["abstract_state"][-1] = "elsewhere"
    with pytest.raises(ProasError, match="different states"):
        rows_to_batch(dup)
    short = dict(rows, anchor_obs=rows["anchor_obs"][:-1])
    with pytest.raises(ProasError, match="anchor_obs"):
        rows_to_batch(short)
    flag = {k: v.copy() for k, v in rows.items()}
    flag["is_action_valid"][2] = None
    with pytest.raises(TypeError):
        rows_to_trajectories(flag)
    with pytest.raises(TypeError):
        rows_to_batch(flag)


class _Draws:
    """An attached env with a draw state (``ProASCredit.attach_envs``)."""

    def state_dict(self):
        return {"n": 1}

    def load_state_dict(self, state):
        self.loaded = state


def test_a_damaged_checkpoint_state_or_tracker_is_one_line_not_a_traceback(tmp_path):
    credit = ProASCredit(ReferenceGraph.from_trajectories(hand_batch()))
    credit.attach_envs(_Draws())
    saved = credit.save_checkpoint(tmp_path / "global_step_1")
    state = json.loads((saved / "state.json").read_text())
    # a number with more digits than Python parses (ValueError, not JSONDecodeError)
    (saved / "state.json").write_text(json.dumps(state)[:-1] + ', "x": ' + "9" * 5000 + "}")
    with pytest.raises(ProasError, match="corrupt ProAS checkpoint state"):
        credit.load_checkpoint(tmp_path / "global_step_1")
    (saved / "state.json").write_text(json.dumps({**state, "envs": 5}))  # len(5) was a TypeError
    with pytest.raises(ProasError, match="bad envs"):
        credit.load_checkpoint(tmp_path / "global_step_1")
    # a FIFO in the place of state.json: a regular file is read, the resume never blocks on it
    (saved / "state.json").unlink()
    os.mkfifo(saved / "state.json")
    with pytest.raises(ProasError, match="FIFO"):
        credit.load_checkpoint(tmp_path / "global_step_1")
    (tmp_path / "latest_checkpointed_iteration.txt").mkdir()  # was IsADirectoryError
    with pytest.raises(ProasError, match="is a directory"):
        credit.resume(tmp_path)
    (tmp_path / "latest_checkpointed_iteration.txt").rmdir()
    (tmp_path / "latest_checkpointed_iteration.txt").write_bytes(b"\xff1")  # was UnicodeDecodeError
    with pytest.raises(ProasError, match="cannot be read"):
        credit.resume(tmp_path)
    assert credit.graph.num_nodes == 3 and credit.batches_seen == 0
