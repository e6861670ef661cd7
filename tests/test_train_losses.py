"""The policy losses against values worked out by hand."""

import math

import pytest
import torch

from proas.train.losses import agg_loss, low_var_kl, policy_loss, value_loss

torch.set_num_threads(1)


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_token_mean_weighs_every_token_equally():
    loss = t([[1.0, 3.0, 100.0], [5.0, 0.0, 0.0]])
    mask = t([[1, 1, 0], [1, 0, 0]])
    assert agg_loss(loss, mask, "token-mean").item() == pytest.approx((1 + 3 + 5) / 3)


def test_seq_mean_token_mean_weighs_every_sequence_equally():
    loss = t([[1.0, 3.0, 100.0], [5.0, 0.0, 0.0]])
    mask = t([[1, 1, 0], [1, 0, 0]])
    assert agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 5) / 2)


def test_seq_mean_token_sum_sums_within_a_sequence():
    loss = t([[1.0, 3.0, 100.0], [5.0, 0.0, 0.0]])
    mask = t([[1, 1, 0], [1, 0, 0]])
    assert agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx((4 + 5) / 2)


def test_unknown_aggregation_is_an_error():
    with pytest.raises(ValueError, match="loss_agg"):
        agg_loss(t([[1.0]]), t([[1.0]]), "token-sum")


def test_ratio_one_gives_minus_advantage():
    logp = t([[-1.0], [-2.0]])
    loss, m = policy_loss(logp, logp.clone(), t([[2.0], [-1.0]]), t([[1], [1]]))
    assert loss.item() == pytest.approx((-2.0 + 1.0) / 2)
    assert m["clipfrac"] == 0.0


def test_positive_advantage_is_clipped_above_at_one_plus_clip_high():
    # ratio e^0.5 = 1.6487 > 1.28: the clipped term -A * 1.28 is the larger (max) one
    logp, old = t([[0.0]]), t([[-0.5]])
    loss, m = policy_loss(logp, old, t([[1.0]]), t([[1]]), clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(-1.28)
    assert m["clipfrac"] == 1.0


def test_asymmetric_clip_uses_the_low_bound_for_negative_advantages():
    # ratio e^-0.5 = 0.6065 < 0.8; A = -1: -A*ratio = 0.6065, -A*clip = 0.8 -> max = 0.8
    logp, old = t([[-0.5]]), t([[0.0]])
    loss, _ = policy_loss(logp, old, t([[-1.0]]), t([[1]]), clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(0.8)


def test_dual_clip_caps_the_loss_of_a_negative_advantage():
    # ratio e^2 = 7.389; A = -1: PPO's clipped loss would be 7.389, the dual clip caps it at 3
    logp, old = t([[0.0]]), t([[-2.0]])
    loss, _ = policy_loss(logp, old, t([[-1.0]]), t([[1]]), dual_clip=3.0)
    assert loss.item() == pytest.approx(3.0)
    loss, _ = policy_loss(logp, old, t([[-1.0]]), t([[1]]), dual_clip=10.0)
    assert loss.item() == pytest.approx(math.exp(2.0))


def test_masked_tokens_do_not_reach_the_loss_or_the_gradient():
    logp = t([[-1.0, -1.0]]).requires_grad_()
    loss, _ = policy_loss(logp, t([[-1.0, -1.0]]), t([[1.0, 1.0]]), t([[1, 0]]))
    loss.backward()
    assert logp.grad[0, 1].item() == 0.0
    assert logp.grad[0, 0].item() == pytest.approx(-1.0)


def test_gradient_of_the_unclipped_objective_is_minus_advantage_times_ratio():
    logp = t([[-1.0]]).requires_grad_()
    loss, _ = policy_loss(logp, t([[-1.1]]), t([[2.0]]), t([[1]]))
    loss.backward()
    assert logp.grad.item() == pytest.approx(-2.0 * math.exp(0.1))


def test_low_var_kl_is_zero_at_equality_and_matches_k3():
    assert low_var_kl(t([[-1.0]]), t([[-1.0]])).item() == 0.0
    # ref - logp = 0.5: e^0.5 - 0.5 - 1
    assert low_var_kl(t([[-1.5]]), t([[-1.0]])).item() == pytest.approx(math.exp(0.5) - 1.5)
    assert low_var_kl(t([[-20.0]]), t([[0.0]])).item() == 10.0  # clamped


def test_value_loss_is_half_mse():
    assert value_loss(t([1.0, 3.0]), t([0.0, 0.0])).item() == pytest.approx(0.5 * (1 + 9) / 2)
