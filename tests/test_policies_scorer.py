"""The scorer policy: candidates, sampling, log-probs that the loss can trust, learning."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from proas.errors import ProasError
from proas.policies.base import Context, task_text
from proas.policies.features import Featurizer, words
from proas.policies.scorer import ScorerPolicy, _BagSum

torch.set_num_threads(1)


def ctx(admissible=("go to desk", "take key from desk"), invalid=("take mug from desk",), history=()):
    return Context("toy", "put the key on the bed", "You arrive at the desk. You see a key.",
                   list(history), list(admissible) if admissible is not None else None, list(invalid), len(history))


def test_task_text_reads_alfworld_and_webshop_forms():
    assert task_text("Welcome.\n\nYour task is to: put some apple on table.", {}) == "put some apple on table."
    assert task_text("WebShop [SEP] Instruction: [SEP] buy red socks [SEP] Search", {}) == "buy red socks"
    assert task_text("anything", {"task": "given"}) == "given"


def test_candidates_are_admissible_then_invalid_without_duplicates():
    p = ScorerPolicy(seed=0)
    c = ctx(admissible=("a 1", "b 2"), invalid=("c 3", "a 1"))
    assert p.candidates(c) == ["a 1", "b 2", "c 3"]


def test_an_env_without_admissible_actions_is_a_clear_error():
    with pytest.raises(ProasError, match="admissible"):
        ScorerPolicy(seed=0).act([ctx(admissible=None)], np.random.default_rng(0))


def test_untrained_policy_is_close_to_uniform():
    d = ScorerPolicy(seed=0).act([ctx()], np.random.default_rng(0))[0]
    assert d.logp == pytest.approx(np.log(1 / 3), abs=0.01)


def test_evaluate_reproduces_the_rollout_log_prob_exactly():
    p = ScorerPolicy(seed=1, init_std=0.5)
    decisions = p.act([ctx(), ctx(history=[("o", "go to desk")])], np.random.default_rng(3))
    st = p.evaluate(p.prepare([d.data for d in decisions]))
    assert st.logp.shape == (2, 1) and st.mask.sum().item() == 2
    assert st.logp[:, 0].tolist() == pytest.approx([d.logp for d in decisions], abs=1e-6)
    assert p.exact_rollout_logp


def test_greedy_picks_the_argmax_and_sampling_follows_the_probabilities():
    p = ScorerPolicy(seed=2, init_std=0.5)
    c = ctx()
    st_data = p.act([c], np.random.default_rng(0), temperature=0)[0]
    logps = []
    for k in range(3):
        data = dict(st_data.data, choice=k)
        logps.append(p.evaluate(p.prepare([data])).logp.item())
    assert st_data.data["choice"] == int(np.argmax(logps))
    rng = np.random.default_rng(0)
    picks = [p.act([c], rng)[0].data["choice"] for _ in range(3000)]
    freq = np.bincount(picks, minlength=3) / 3000
    assert freq == pytest.approx(np.exp(logps), abs=0.03)


def test_a_gradient_step_on_positive_advantage_raises_the_chosen_probability():
    p = ScorerPolicy(seed=0)
    d = p.act([ctx()], np.random.default_rng(0))[0]
    opt = p.make_optimizer(2.0)
    before = p.evaluate(p.prepare([d.data])).logp.item()
    for _ in range(5):
        opt.zero_grad()
        (-p.evaluate(p.prepare([d.data])).logp.sum()).backward()
        opt.step()
    assert p.evaluate(p.prepare([d.data])).logp.item() > before + 0.2


def test_feature_ids_are_stable_across_instances():
    a, b = Featurizer(14), Featurizer(14)
    c = ctx(history=[("o", "go to desk")])
    assert a.context_ids(c).tolist() == b.context_ids(c).tolist()
    assert a.action_ids("take key from desk").tolist() == b.action_ids("take key from desk").tolist()
    assert words("Take the Key 1!") == ("take", "the", "key", "1")


def test_pair_features_see_the_task_match_admissibility_and_repetition():
    f = Featurizer(14)
    c = ctx(history=[("o", "go to desk")])
    take, go, mug = f.pair_ids(c, ["take key from desk", "go to desk", "take mug from desk"])
    assert f._id("m:take:1") in take.tolist()  # 'key' is in the task
    assert f._id("ad:take:1") in take.tolist() and f._id("ad:take:0") in mug.tolist()  # listed or not
    assert f._id("rl:go:1") in go.tolist()  # 'go to desk' was the last action
    assert f._id("rl:take:0") in take.tolist()  # 'take key from desk' was not taken recently


def test_state_dict_round_trip():
    p, q = ScorerPolicy(seed=0), ScorerPolicy(seed=5)
    q.load_state_dict(p.state_dict())
    for x, y in zip(p.module.parameters(), q.module.parameters()):
        assert torch.equal(x, y)


def test_adamw_decays_the_weights_it_updates_and_adam_does_not():
    """``optimizer=adamw`` is AdamW with the configured decoupled weight decay: a step with a
    zero gradient shrinks every weight by ``lr * weight_decay``; plain Adam leaves them."""
    for name, factor in (("adamw", 1 - 0.1 * 0.5), ("adam", 1.0)):
        policy = ScorerPolicy(bits=6, dim=4, init_std=0.5, seed=0, optimizer=name, weight_decay=0.5)
        opt = policy.make_optimizer(0.1)
        before = policy.module.ctx.weight.detach().clone()
        for p in policy.parameters():
            p.grad = torch.zeros_like(p)
        opt.step()
        assert torch.allclose(policy.module.ctx.weight.detach(), before * factor, atol=1e-7), name


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy().view(np.int32)  # bit patterns: -0.0 and 0.0 differ


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 40), st.integers(1, 6))
def test_the_bag_sum_gradient_is_torchs_bit_for_bit(seed, bags, dim):
    """``_BagSum``'s backward makes torch's additions in torch's order: the gradients are the same
    bits, for indices that repeat across and within bags, with empty bags and zero gradients."""
    rng = np.random.default_rng(seed)
    rows = 12
    sizes = rng.integers(0, 9, bags)
    sizes[0] = max(sizes[0], 3)
    idx = torch.from_numpy(rng.integers(0, rows, int(sizes.sum())))
    off = torch.from_numpy(np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64))
    # magnitudes far apart, so that the order of the additions shows in the sum
    grad = rng.standard_normal((bags, dim)) * 10.0 ** rng.integers(-6, 7, (bags, 1))
    grad[rng.random((bags, dim)) < 0.1] = -0.0
    grad = torch.from_numpy(grad.astype(np.float32))
    weight = torch.from_numpy(rng.standard_normal((rows, dim)).astype(np.float32))
    w1, w2 = weight.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    out1 = torch.nn.functional.embedding_bag(idx, w1, off, mode="sum")
    out2 = _BagSum.apply(w2, idx, off)
    assert np.array_equal(_bits(out1), _bits(out2))
    out1.backward(grad)
    out2.backward(grad)
    assert np.array_equal(_bits(w1.grad), _bits(w2.grad))


def test_the_bag_sum_gradient_depends_on_the_order_its_test_checks():
    """Data like the test's above can tell orders apart: the same additions in another order (a
    stable sort's, which differs from torch's here) give other bits, so a backward that sorts
    otherwise fails that test."""
    rng = np.random.default_rng(1)
    idx = torch.from_numpy(rng.integers(0, 3, 64))
    off = torch.arange(64)
    grad = torch.from_numpy((rng.standard_normal((64, 1)) * 10.0 ** rng.integers(-6, 7, (64, 1))).astype(np.float32))
    w = torch.zeros(3, 1, requires_grad=True)
    _BagSum.apply(w, idx, off).backward(grad)
    stable = torch.zeros(3, 1)
    for j in torch.sort(idx, stable=True).indices.tolist():
        stable[idx[j]] = stable[idx[j]] + grad[j]
    assert not torch.equal(w.grad, stable)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=40), st.integers(0, 2**32 - 1))
def test_row_sums_are_each_rows_own_sum(counts, seed):
    """The sampler's row totals, one ``sum`` per distinct count, are bit for bit each row's own
    ``p[i, :n].sum()`` (numpy's pairwise order depends on the length summed), padding included."""
    from proas.policies.scorer import _row_sums

    rng = np.random.default_rng(seed)
    p = np.zeros((len(counts), max(counts) + int(rng.integers(0, 5))))
    for i, n in enumerate(counts):
        p[i, :n] = np.exp(rng.normal(0.0, 4.0, n))
    assert np.array_equal(_row_sums(p, counts), np.array([p[i, :n].sum() for i, n in enumerate(counts)]))


def test_a_batch_of_recorded_decisions_packs_as_their_arrays_do():
    """``prepare`` and ``preparer`` of decisions recorded by ``act`` (each names its turn and
    row) give, for any batch of them in any order, repeats included and across turns, exactly
    what ``prepare`` of the same decisions' context ids and candidate keys gives."""
    from proas.policies.scorer import _keyed

    p = ScorerPolicy(seed=4, init_std=0.5)
    contexts = [ctx(), ctx(history=[("You see a bed.", "go to bed")]),
                ctx(admissible=("go to bed", "look", "take key from desk"), invalid=()),
                ctx(admissible=("inventory",), invalid=("go to desk", "open drawer 1"),
                    history=[("o", "look"), ("You see a bed.", "go to bed")])]
    data = [d.data for d in p.act(contexts, np.random.default_rng(1))]
    data += [d.data for d in p.act(contexts[::-1][:3], np.random.default_rng(2))]
    take = p.preparer(data)
    rng = np.random.default_rng(0)
    for rows in ([0], [6, 2, 5], list(range(7)), rng.integers(0, 7, 12).tolist(), rng.permutation(7)[:5].tolist()):
        want = p.prepare([dict(_keyed(data[i]), choice=data[i]["choice"]) for i in rows])
        for got in (take(np.asarray(rows)), p.prepare([data[i] for i in rows])):
            assert got.keys() == want.keys()
            for key, value in want.items():
                if isinstance(value, torch.Tensor):
                    assert got[key].dtype == value.dtype and torch.equal(got[key], value), key
                else:
                    assert got[key] == value, key
            assert torch.equal(p.evaluate(got).logp, p.evaluate(want).logp)
