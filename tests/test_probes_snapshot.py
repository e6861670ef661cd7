"""Replay snapshots restore the exact state (observation, admissible set, abstract state) in the
shop env and in both household backends."""

import numpy as np
import pytest

from proas.errors import ProasError
from proas.probes.snapshot import Snapshot, restore, state_key


def _walk(env, task_id, steps, seed):
    """A seeded walk mixing admissible and rejected actions; the state after every prefix."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(task_id)
    actions, keys = [], [state_key(obs, info)]
    for _ in range(steps):
        pool = list(info.get("admissible") or []) + list(info.get("invalid_candidates") or [])
        pool = [a for a in pool if not a.startswith("click[buy")]  # keep shop episodes alive
        a = pool[int(rng.integers(len(pool)))]
        obs, _, terminated, truncated, info = env.step(a)
        done = terminated or truncated
        actions.append(a)
        keys.append(state_key(obs, info))
        if done:
            break
    return actions, keys


def _check(make, task_id, steps, prefixes, seed=0):
    env = make()
    actions, keys = _walk(env, task_id, steps, seed)
    other = make()  # a fresh instance, as the probes' env pool uses
    for k in prefixes:
        k = min(k, len(actions))
        r = restore(other, Snapshot(task_id, tuple(actions[:k])))
        assert state_key(r.obs, r.info) == keys[k], (task_id, k)
        assert [a for _, a in r.history] == actions[:k] and r.step == k
        # and the restored env continues exactly as the original did
        if k < len(actions):
            obs, _, _, _, info = other.step(actions[k])
            assert state_key(obs, info) == keys[k + 1]
    return actions, keys


def test_household_fast_snapshots_are_exact():
    from proas.envs.household import make_household_env, task_ids

    for tid in task_ids("valid")[:3] + [t for t in task_ids("train") if "-heat-" in t][:1]:
        _, keys = _check(lambda: make_household_env(backend="fast"), tid, 25, [0, 1, 7, 16, 25])
        # the walk went somewhere: several distinct states were visited
        assert len({k[2] for k in keys}) > 1


def test_household_real_engine_snapshots_are_exact():
    pytest.importorskip("alfworld")
    from proas.envs.household import make_household_env, task_ids

    _check(lambda: make_household_env(backend="alfworld"), task_ids("valid")[0], 6, [0, 3, 6], seed=1)


def test_shop_snapshots_are_exact():
    from proas.envs.shop import make_shop_env

    env = make_shop_env()
    for tid in env.task_ids("valid")[:2]:
        _check(make_shop_env, tid, 8, [0, 2, 5, 8], seed=2)


def test_a_snapshot_past_the_end_of_the_episode_is_refused():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from toy_env import make_env

    env = make_env(n_places=4)
    oracle = env.oracle("valid-000")
    r = restore(env, Snapshot("valid-000", tuple(oracle)))
    assert r.info["won"]
    with pytest.raises(ProasError, match="ended at step 3"):
        restore(env, Snapshot("valid-000", tuple(oracle) + ("go to desk",)))
