"""PPO's parts (issue #24): GAE with lambda < 1 by hand, the critic that can fit a state's value,
and the trainer's defaults and metrics for them."""

import math

import numpy as np
import pytest
import torch

from proas.credit import CreditBatch, get_estimator
from proas.errors import ProasError
from proas.policies.base import Context
from proas.train.config import build_config
from proas.train.critic import ValueModel, critic_metrics, explained_variance
from proas.train.loop import Trainer
from proas.types import Step, Trajectory

torch.set_num_threads(1)

TOY = ["env.name=toy_env:make_env", "env.options.n_places=2", "env.options.max_steps=8", "env.options.n_train=32",
       "env.options.n_valid=16", "env.tasks_per_step=4", "env.group_size=4", "train.progress=false"]


def test_gae_lambda_below_one_hand_worked():
    # rewards [0, 0, 1], values [0.5, 0.2, 0.8], gamma 0.9, lambda 0.5 (gamma*lambda = 0.45):
    # delta_2 = 1 + 0 - 0.8 = 0.2;  delta_1 = 0.9*0.8 - 0.2 = 0.52;  delta_0 = 0.9*0.2 - 0.5 = -0.32
    # A_2 = 0.2;  A_1 = 0.52 + 0.45*0.2 = 0.61;  A_0 = -0.32 + 0.45*0.61 = -0.0455
    # a second trajectory (reward 0, V = 1): A = 0 - 1 = -1, nothing bootstrapped from the first
    t = Trajectory("g", "1", 1.0, [Step("a", "x", "b", reward=0.0, value=0.5),
                                   Step("b", "y", "c", reward=0.0, value=0.2),
                                   Step("c", "z", "d", reward=1.0, value=0.8)])
    u = Trajectory("g", "2", 0.0, [Step("a", "x", "b", reward=0.0, value=1.0)])
    adv = get_estimator("gae")(CreditBatch.from_trajectories([t, u]), gamma=0.9, lam=0.5, whiten=False)
    assert adv.step == pytest.approx([-0.0455, 0.61, 0.2, -1.0])
    assert adv.returns == pytest.approx([0.4545, 0.81, 1.0, 0.0])
    # lambda = 1 is the Monte Carlo return minus V: 0.9^2 - 0.5, 0.9 - 0.2, 1 - 0.8
    mc = get_estimator("gae")(CreditBatch.from_trajectories([t]), gamma=0.9, lam=1.0, whiten=False)
    assert mc.step == pytest.approx([0.31, 0.7, 0.2])
    # lambda = 0 is the one-step TD error
    td = get_estimator("gae")(CreditBatch.from_trajectories([t]), gamma=0.9, lam=0.0, whiten=False)
    assert td.step == pytest.approx([-0.32, 0.52, 0.2])


def test_trainer_gives_gae_lambda_095_by_default_and_it_is_configurable():
    c = build_config(TOY + ["algo.estimator=ppo"])
    assert c.algo.lam == 0.95 and c.algo.critic_features == "state"
    assert c.algo.estimator_options("toy")["lam"] == 0.95
    assert build_config(TOY + ["algo.estimator=ppo", "algo.lam=1.0"]).algo.estimator_options("toy")["lam"] == 1.0
    with pytest.raises(ProasError, match="algo.critic_features='table' is not one of state, context"):
        build_config(TOY + ["algo.critic_features=table"])


def _step(state: str, step: int, task: str = "fetch the apple", obs: str = "you see a room") -> Step:
    ctx = Context(env_name="toy", task=task, observation=obs, history=[], admissible=["go north"],
                  invalid_candidates=[], step=step)
    return Step(state, "go north", state, extra={"context": ctx})


def _fit(model: ValueModel, items, target: np.ndarray, updates: int = 400) -> np.ndarray:
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    y = torch.as_tensor(target, dtype=torch.float32)
    for _ in range(updates):
        opt.zero_grad()
        loss = 0.5 * ((model(items) - y) ** 2).mean()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return model(items).double().numpy()


def test_state_critic_fits_a_value_that_the_context_critic_cannot_see():
    # the same text (context) in four abstract states, at three step counts; the value depends on
    # the state and on the state crossed with the step (a success less likely later), not on text
    states = ["shop|item|match", "shop|item|other", "shop|results|match", "shop|search"]
    base = {"shop|item|match": 8.0, "shop|item|other": 0.5, "shop|results|match": 4.0, "shop|search": 2.0}
    items, target = [], []
    for s in states:
        for k in range(3):
            items.append(_step(s, k))
            target.append(base[s] * (1.0 - 0.3 * k) if s != "shop|search" else base[s] + k)  # not additive
    target = np.array(target)
    state_fit = _fit(ValueModel(bits=12, features="state"), items, target)
    context_fit = _fit(ValueModel(bits=12, features="context"), items, target)
    assert explained_variance(state_fit, target) > 0.99
    assert np.abs(state_fit - target).max() < 0.05
    # the context critic sees only the step count here: at best the mean value of each step
    by_step = np.array([target[k::3].mean() for k in range(3)])
    best_context = 1.0 - ((target - np.tile(by_step, 4)) ** 2).mean() / target.var()
    assert explained_variance(context_fit, target) == pytest.approx(best_context, abs=0.02)
    assert best_context < 0.1


def test_context_critic_takes_bare_contexts_and_state_critic_refuses_them():
    ctx = _step("s", 0).extra["context"]
    assert ValueModel(bits=8, features="context")([ctx]).shape == (1,)
    with pytest.raises(TypeError, match="reads Step.state"):
        ValueModel(bits=8, features="state")([ctx])
    with pytest.raises(ValueError, match="unknown critic features"):
        ValueModel(bits=8, features="tabular")
    # the state critic: mean of the context weights plus the state's two weights
    m = ValueModel(bits=16, features="state")
    step = _step("s", 3)
    cids, sids = m.ids(step), m.state_ids(step)
    with torch.no_grad():
        m.table.weight.normal_()
        m.bias.fill_(0.5)
        w = m.table.weight[:, 0]
        assert float(m([step])[0]) == pytest.approx(float(w[cids].mean() + w[sids].sum() + 0.5), abs=1e-5)


def test_explained_variance_and_critic_metrics():
    r = np.array([0.0, 10.0, 0.0, 10.0])
    assert explained_variance(r, r) == 1.0
    assert explained_variance(np.full(4, 5.0), r) == 0.0
    assert explained_variance(10.0 - r, r) == pytest.approx(-3.0)
    assert math.isnan(explained_variance(np.ones(3), np.zeros(3)))
    m = critic_metrics(np.full(4, 5.0), r)
    assert m == {"critic/value_mean": 5.0, "critic/return_mean": 5.0, "critic/ev": 0.0}
    assert "critic/ev" not in critic_metrics(np.ones(3), np.zeros(3))  # no NaN in metrics.jsonl


def test_ppo_step_records_the_critics_fit_and_trains_the_critic_on_the_steps_states(tmp_path):
    t = Trainer(build_config(TOY + ["algo.estimator=ppo"]), tmp_path)
    assert t.critic.kind == "state"
    seen: list[str] = []
    real = t._credit

    def spy(trajs, step, values):
        seen.extend(s.state for tr in trajs for s in tr.steps)
        return real(trajs, step, values)

    t._credit = spy
    recs = [t.train_step() for _ in range(3)]
    assert all(math.isfinite(r["critic/value_mean"]) and r["critic/return_mean"] > 0 for r in recs)
    assert any(math.isfinite(r.get("critic/ev", math.nan)) for r in recs)
    # the trainer hands the critic steps, so the weights of the visited states' features moved
    w = t.critic.table.weight.detach()[:, 0]
    moved = [float(w[t.critic.features._id(f"st:{s}")]) for s in set(seen)]
    assert sum(abs(x) > 1e-4 for x in moved) >= len(moved) // 2 > 0
