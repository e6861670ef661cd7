"""Invariants of the shop env under arbitrary and random actions (shipped catalog)."""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
        before = (env.obs, env.page, dict(env.options), env.asin)
        obs, reward, done, info = env.step(action)
        if info["error"]:
            assert (obs, env.page, env.options, env.asin) == before
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
            obs, reward, done, info = env.step(action)
            steps += 1
            assert not info["error"], action
            assert info["anchor"] == obs and info["abstract_state"].startswith("shop|")
            if not done:
                assert reward == 0.0
        assert steps <= env.max_steps
        assert reward == (10.0 if info["won"] else 0.0)
        assert info["won"] == (info["score"] == 1.0)
