"""The trainer's credit settings as verl-agent has them: group statistics over step rows, GiGPO's
mode per env, the invalid-action penalty in the row scores, the reasonableness rule; and RL
started from an SFT run of the scorer."""

import numpy as np
import pytest
import torch

from proas.baselines.sft import SFTOptions, train_sft
from proas.credit import ESTIMATORS as CREDIT_ESTIMATORS
from proas.credit import ReferenceGraph
from proas.errors import ProasError
from proas.train import loop as loop_mod
from proas.train.config import ESTIMATORS, build_config
from proas.train.loop import Trainer
from proas.train.warm_start import build_policy
from proas.types import Step, Trajectory

torch.set_num_threads(1)

TOY = ["env.name=toy_env:make_env", "env.options.n_places=2", "env.options.max_steps=6", "env.options.n_train=16",
       "env.options.n_valid=8", "train.progress=false", "env.tasks_per_step=2", "env.group_size=4"]


def test_defaults_follow_verl_agent():
    c = build_config([])
    assert c.algo.group_stats == "steps"
    assert c.algo.graph.rea == "transition"
    assert c.policy.scorer.history_length == 2
    # GiGPO's mode as verl-agent's scripts: ALFWorld mean_std_norm, WebShop mean_norm
    assert c.algo.resolved_gigpo_mode("household") == "mean_std_norm"
    assert c.algo.resolved_gigpo_mode("shop") == "mean_norm"
    assert c.algo.resolved_gigpo_mode("toy") == "mean_norm"
    assert build_config(["algo.gigpo_mode=mean_norm"]).algo.resolved_gigpo_mode("household") == "mean_norm"


@pytest.mark.parametrize("override, key", [
    ("algo.group_stats=rows", "algo.group_stats"),
    ("algo.graph.rea=edge", "algo.graph.rea"),
    ("algo.gigpo_mode=std", "algo.gigpo_mode"),
])
def test_bad_values_name_the_key(override, key):
    with pytest.raises(ProasError, match=key):
        build_config([override])


def _capture(monkeypatch):
    seen = {}
    real = loop_mod.compute_credit

    def spy(trajs, graph, **kw):
        seen.update(kw)
        return real(trajs, graph, **kw)

    monkeypatch.setattr(loop_mod, "compute_credit", spy)
    return seen


@pytest.mark.parametrize("estimator, mode", [("grpo", None), ("gigpo", "mean_norm")])
def test_the_trainer_passes_group_stats_rule_and_mode(tmp_path, monkeypatch, estimator, mode):
    seen = _capture(monkeypatch)
    t = Trainer(build_config(TOY + [f"algo.estimator={estimator}", "algo.graph.rea=state_action",
                                    "algo.group_stats=trajectories"]), tmp_path)
    t.train_step()
    assert seen["rea"] == "state_action"
    assert seen["estimator_options"]["group_stats"] == "trajectories"
    if mode:
        assert seen["estimator_options"]["mode"] == mode  # toy env: verl-agent's default, mean_norm
    # the scorer always names a candidate: no invalid-action penalty anywhere
    assert not np.any(seen["penalty"].invalid) and seen["penalty"].coef == 0.1


def test_malformed_responses_pay_the_penalty_inside_the_group_statistics(tmp_path):
    t = Trainer(build_config(TOY + ["algo.shaping=none", "env.invalid_action_penalty=0.5"]), tmp_path)
    t.graph = ReferenceGraph()

    def traj(tid, reward, malformed):
        steps = [Step("a", "x", "b", extra={"malformed": m}) for m in malformed]
        return Trajectory("g", tid, reward, steps)

    trajs = [traj("1", 0.0, [False, True]), traj("2", 0.0, [False, False])]
    res = t._credit(trajs, 1)
    # an all-fail group: row scores [0, -0.5, 0, 0], mean -0.125, std of the rows
    rows = np.array([0.0, -0.5, 0.0, 0.0])
    expect = (rows - rows.mean()) / (rows.std(ddof=1) + 1e-6)
    assert res.advantage == pytest.approx(expect)
    assert res.traj_advantage == pytest.approx(np.full(4, 0.125 / (rows.std(ddof=1) + 1e-6)))
    assert res.final is res.advantage or np.array_equal(res.final, res.advantage)  # charged once, inside


@pytest.mark.parametrize("estimator", ["rloo", "reinforce_pp"])
def test_estimators_without_step_penalty_pay_it_on_the_final_advantage(tmp_path, estimator):
    t = Trainer(build_config(TOY + [f"algo.estimator={estimator}", "algo.shaping=none",
                                    "env.invalid_action_penalty=0.5"]), tmp_path)
    t.graph = ReferenceGraph()
    trajs = [Trajectory("g", "1", 10.0, [Step("a", "x", "b", extra={"malformed": m}) for m in (False, True)]),
             Trajectory("g", "2", 0.0, [Step("a", "x", "b", extra={"malformed": False})] * 2)]
    res = t._credit(trajs, 1)
    clean = t._credit([Trajectory(x.group, x.trajectory, x.reward, [Step("a", "x", "b")] * 2) for x in trajs], 1)
    np.testing.assert_array_equal(res.advantage, clean.advantage)  # the estimator never saw it
    np.testing.assert_array_equal(res.penalty, [0.0, 0.5, 0.0, 0.0])
    np.testing.assert_array_equal(res.final, res.advantage - np.array([0.0, 0.5, 0.0, 0.0]))


def _sft_run(tmp_path, *over):
    c = build_config(TOY + ["env.options.n_places=4", *over])
    train_sft(c, tmp_path / "sft", SFTOptions(epochs=1, batch_size=16, val_every=1))
    return tmp_path / "sft"


def test_rl_starts_from_an_sft_run_of_the_scorer(tmp_path):
    sft = _sft_run(tmp_path)
    best = torch.load(sft / "best" / "state.pt", map_location="cpu", weights_only=True)["policy"]
    c = build_config(TOY + ["env.options.n_places=4", f"policy.scorer.init_from={sft}"])
    policy = build_policy(c, seed=5)
    for name, value in policy.state_dict().items():
        assert torch.equal(value, best[name]), name
    # random weights otherwise
    fresh = build_policy(build_config(TOY + ["env.options.n_places=4"]), seed=5)
    assert not all(torch.equal(v, best[k]) for k, v in fresh.state_dict().items())
    # the RL run's first validation is the SFT policy's, and its KL reference is that policy
    t = Trainer(c, tmp_path / "rl")
    for name, value in t.policy.state_dict().items():
        assert torch.equal(value, best[name]), name


def test_init_from_refuses_what_does_not_fit(tmp_path):
    with pytest.raises(ProasError, match="policy.scorer.init_from"):
        build_policy(build_config(TOY + [f"policy.scorer.init_from={tmp_path / 'nope'}"]), seed=0)
    sft = _sft_run(tmp_path)
    with pytest.raises(ProasError, match="dim=16; this run has hash_bits=14, dim=8"):
        build_policy(build_config(TOY + [f"policy.scorer.init_from={sft}", "policy.scorer.dim=8"]), seed=0)


#: what the trainer's config gives each estimator (the rest keep the estimator's defaults)
CONFIG_OPTIONS = {
    "grpo": {"norm_by_std", "group_stats"},
    "dapo": {"norm_by_std", "group_stats"},
    "gigpo": {"gamma", "step_weight", "mode", "group_stats"},
    "migpo": {"gamma", "step_weight", "mode", "group_stats"},
    "rloo": set(),
    "reinforce_pp": set(),
    "gae": {"gamma", "lam"},
}


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_the_config_gives_each_estimator_the_options_it_takes(estimator):
    algo = build_config([f"algo.estimator={estimator}", "algo.gamma=0.5", "algo.norm_by_std=false"]).algo
    opts = algo.estimator_options("household")
    assert set(opts) == CONFIG_OPTIONS[estimator]
    CREDIT_ESTIMATORS[estimator].check(opts)  # every value fits its typed option
    assert opts.get("gamma", 0.5) == 0.5 and opts.get("norm_by_std", False) is False
    assert opts.get("mode", "mean_std_norm") == "mean_std_norm"  # household's GiGPO mode
