"""Invariants of the shop env under arbitrary and random actions (shipped catalog)."""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proas.envs.base import SUCCESS_REWARD
from proas.envs.shop import make_shop_env


@pytest.fixture(scope="module")
def env():
    return make_shop_env(nouns="stored")


_TEXT = st.text(alphabet=st.sampled_from(list("abc[] <>click search buy now\n")), max_size=30)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=_TEXT, second=_TEXT)
def test_any_text_is_either_a_valid_move_or_a_flagged_no_op(env, first, second):
    env.reset("600")
    env.step("search[face moisturizer]")
    for action in (first, second):
        before = (env.obs, env.page, env.steps)
        obs, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        if info["error"]:
            assert (obs, env.page, env.steps - 1) == before
            assert reward == 0.0 and not done
        assert info["abstract_state"].startswith("shop|")


def test_random_walks_over_admissible_actions(env):
    rng = random.Random(0)
    valid = env.task_ids("valid")
    for _ in range(60):
        obs, info = env.reset(rng.choice(valid))
        done, steps, reward = False, 0, 0.0
        while not done:
            action = rng.choice(info["admissible"])
            obs, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            steps += 1
            assert not info["error"], action
            assert info["anchor"] == obs and info["abstract_state"].startswith("shop|")
            if not done:
                assert reward == 0.0
        assert steps <= env.max_steps
        assert reward == (SUCCESS_REWARD if info["won"] else 0.0)
        assert info["won"] == (info["score"] == 1.0)


def test_hint_and_oracle_leave_the_episode_as_it_was(env):
    """``hint`` and ``oracle`` play on the env and put the episode back: an env asked for both
    before every step goes on exactly as one never asked, ``<r>`` searches included (they draw
    from the episode's random source)."""
    quiet = make_shop_env(nouns="stored")
    rng = random.Random(1)
    valid = env.task_ids("valid")
    for tid in valid[:10]:
        first = quiet.reset(tid)
        assert env.reset(tid) == first
        info, done = first[1], False
        while not done:
            env.hint()
            env.oracle(tid)
            env.oracle(rng.choice(valid))
            action = rng.choice(info["admissible"] + ["search[<r>]", "click[next >]", "click[buy now]", "click[x]"])
            asked, plain = env.step(action), quiet.step(action)
            assert asked == plain, action
            done, info = plain[2] or plain[3], plain[4]
