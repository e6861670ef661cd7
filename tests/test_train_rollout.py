"""Batched group rollout: what it records, rewards and penalties, env failures."""

import numpy as np
import pytest

from proas.envs import check_env
from proas.policies.base import Decision, Policy
from proas.train.rollout import Slot, rollout
from toy_env import ToyEnv


class Scripted(Policy):
    """Plays a fixed list of actions per slot (by task), recording the contexts it saw."""

    kind = "scripted"

    def __init__(self, plans):
        self.plans = plans
        self.seen = []

    def act(self, contexts, rng, temperature=1.0):
        out = []
        for ctx in contexts:
            self.seen.append(ctx)
            key = ctx.task
            plan = self.plans[key]
            action = plan[ctx.step] if ctx.step < len(plan) else "wait"
            out.append(Decision(action=action, response=action, malformed=action == "???",
                                logp=-1.0, data={"k": ctx.step}))
        return out

    def evaluate(self, batch, module=None):  # pragma: no cover - not used here
        raise NotImplementedError


def test_toy_env_passes_the_protocol_checker():
    check_env(ToyEnv(), "train-000")


def _plans(env, task_ids):
    plans = {}
    for tid in task_ids:
        obs, info = env.reset(tid)
        task = obs.split("Your task is to: ")[1]
        plans[task] = env.oracle(tid)
    return plans


def test_oracle_episodes_are_won_and_recorded_step_by_step():
    env = ToyEnv()
    tid = "train-001"
    policy = Scripted(_plans(env, [tid]))
    trajs, stats = rollout([ToyEnv(), ToyEnv()], [Slot(tid, "g0", "g0t0"), Slot(tid, "g0", "g0t1")], policy,
                           np.random.default_rng(0), max_steps=12, env_name="toy")
    assert stats.env_exceptions == 0
    for traj in trajs:
        assert traj.won and traj.reward == 10.0 and traj.group == "g0"
        assert [s.action for s in traj.steps] == env.oracle(tid)
        assert traj.steps[0].state == "fetch|search|other"
        assert traj.steps[0].next_state == traj.steps[1].state  # s_{t+1} of one step = s_t of the next
        assert [s.reward for s in traj.steps] == [0.0, 0.0, 0.0, 10.0]
        assert traj.steps[0].anchor.startswith("You are at the door.")
        assert traj.steps[1].extra["policy"] == {"k": 1}
        assert traj.task_type == "fetch" and traj.extra["score"] == 1.0
    assert [t.trajectory for t in trajs] == ["g0t0", "g0t1"]


def test_history_reaches_the_policy():
    tid = "train-001"
    env = ToyEnv()
    policy = Scripted(_plans(env, [tid]))
    rollout([ToyEnv()], [Slot(tid, "g", "t")], policy, np.random.default_rng(0), max_steps=12)
    third = policy.seen[2]
    assert [a for _, a in third.history] == env.oracle(tid)[:2]
    assert third.history[0][0].startswith("You are at the door.")


def test_rejected_and_malformed_actions_are_recorded_as_errors_outside_the_reward():
    env = ToyEnv()
    tid = "train-002"
    obs, _ = env.reset(tid)
    task = obs.split("Your task is to: ")[1]
    plan = ["fly", "???"] + env.oracle(tid)
    trajs, _ = rollout([ToyEnv()], [Slot(tid, "g", "t")], Scripted({task: plan}), np.random.default_rng(0),
                       max_steps=12, success_reward=10.0)
    traj = trajs[0]
    assert [s.error for s in traj.steps] == [True, True, False, False, False, False]
    assert traj.steps[1].extra["malformed"] is True
    # the penalty is charged on the advantage by the trainer, not folded into rewards
    assert [s.reward for s in traj.steps] == [0.0] * 5 + [10.0]
    assert traj.reward == 10.0 and traj.extra["outcome"] == 10.0 and traj.extra["errors"] == 2


def test_step_limit_ends_an_episode_as_failed():
    env = ToyEnv()
    obs, _ = env.reset("train-003")
    task = obs.split("Your task is to: ")[1]
    trajs, _ = rollout([ToyEnv()], [Slot("train-003", "g", "t")], Scripted({task: ["x"] * 20}),
                       np.random.default_rng(0), max_steps=5)
    assert len(trajs[0].steps) == 5 and not trajs[0].won and trajs[0].reward == 0.0


def test_an_env_exception_fails_only_its_trajectory():
    good = "train-004"
    env = ToyEnv()
    policy = Scripted(_plans(env, [good]))
    crashing = ToyEnv(crash_task="train-005")
    trajs, stats = rollout([ToyEnv(), crashing], [Slot(good, "a", "a0"), Slot("train-005", "b", "b0")], policy,
                           np.random.default_rng(0), max_steps=12)
    assert trajs[0].won
    assert not trajs[1].won and trajs[1].steps == [] and "crashed on purpose" in trajs[1].extra["env_exception"]
    assert stats.env_exceptions == 1 and "train-005" in stats.exception_messages[0]


class _MidCrash(ToyEnv):
    def step(self, action):
        if action.startswith("take"):
            raise ValueError("boom")
        return super().step(action)


def test_an_exception_mid_episode_keeps_the_steps_so_far():
    tid = "train-006"
    policy = Scripted(_plans(ToyEnv(), [tid]))
    trajs, stats = rollout([_MidCrash()], [Slot(tid, "g", "t")], policy, np.random.default_rng(0), max_steps=12)
    assert len(trajs[0].steps) == 1 and not trajs[0].won and stats.env_exceptions == 1
    assert "ValueError: boom" in trajs[0].extra["env_exception"]


def test_too_few_envs_is_an_error():
    with pytest.raises(ValueError, match="slots"):
        rollout([ToyEnv()], [Slot("train-000", "g", "a"), Slot("train-000", "g", "b")], Scripted({}),
                np.random.default_rng(0), max_steps=3)


def test_episode_ends_terminated_or_truncated_are_recorded():
    # the env protocol's step is Gymnasium's five-tuple; a won episode terminates, one the step
    # limit cuts (the env's own, or the rollout's shorter one) is recorded as truncated
    env = ToyEnv(max_steps=3)
    obs, info = env.reset("train-001")
    outs = [env.step("wait") for _ in range(3)]
    assert [(o[2], o[3]) for o in outs] == [(False, False), (False, False), (False, True)]
    tid = "train-001"
    plans = _plans(ToyEnv(), [tid])
    won, cut_by_env, cut_by_rollout = (
        rollout([ToyEnv(max_steps=m)], [Slot(tid, "g", "t")], Scripted(plans if p else {k: [] for k in plans}),
                np.random.default_rng(0), max_steps=r)[0][0]
        for m, p, r in ((12, True, 12), (3, False, 12), (12, False, 5)))
    assert won.won and not won.truncated
    assert len(cut_by_env) == 3 and cut_by_env.truncated and not cut_by_env.won
    assert len(cut_by_rollout) == 5 and cut_by_rollout.truncated
    assert cut_by_rollout.to_json()["truncated"] is True and "truncated" not in won.to_json()


def test_check_env_wants_the_five_tuple():
    from proas.envs import EnvCheckError

    class FourTuple(ToyEnv):
        def step(self, action):
            obs, reward, terminated, truncated, info = super().step(action)
            return obs, reward, terminated or truncated, info

    with pytest.raises(EnvCheckError, match="terminated, truncated"):
        check_env(FourTuple(), "train-000")
