"""The single rows -> batch conversion (issue #28) against the two paths it replaced.

``verl_rows_oracle`` is a frozen copy of the module before: the loop converter
``rows_to_trajectories`` and ``rows_to_batch`` (array path, falling back to the loop on odd types
and bad rows). On random row sets (padding copies, shuffles, step columns or row order, str /
bytes / numpy types, and corrupted rows) the new functions give the same arrays, row map and
trajectories, or raise the same error with the same message.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import verl_rows_oracle as old
from proas.credit import CreditBatch
from proas.integrations.verl import rows as new


def _obj(values):
    values = list(values)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _random_rows(rng):
    n_traj = int(rng.integers(1, 6))
    rows = {k: [] for k in ["uid", "traj_uid", "step_index", "abstract_state", "next_abstract_state", "action",
                            "anchor_obs", "is_action_valid", "rewards", "episode_rewards", "won", "proas_error"]}
    for j in range(n_traj):
        outcome = float(rng.choice([0.0, 1.0, 0.5, -0.0]))
        won = bool(rng.random() < 0.5)
        for t in range(int(rng.integers(1, 5))):
            rows["uid"].append(f"g{int(rng.integers(0, 3))}" if t == 0 else rows["uid"][-1])
            rows["traj_uid"].append(f"tr{j}")
            rows["step_index"].append(t)
            rows["abstract_state"].append(f"s{int(rng.integers(0, 4))}")
            rows["next_abstract_state"].append(f"s{int(rng.integers(0, 4))}")
            rows["action"].append(f"a{int(rng.integers(0, 3))}")
            rows["anchor_obs"].append(f"o{int(rng.integers(0, 3))}")
            rows["is_action_valid"].append(bool(rng.random() < 0.8))
            rows["proas_error"].append(bool(rng.random() < 0.2))
            rows["rewards"].append(float(rng.choice([0.0, 1.0, 0.25])))
            rows["episode_rewards"].append(outcome)
            rows["won"].append(won)
    rows = {k: _obj(v) for k, v in rows.items()}
    n = len(rows["uid"])
    pad = rng.integers(0, n, size=int(rng.integers(0, n + 1)))  # adjust_batch's copies
    pick = np.concatenate([np.arange(n), pad])
    if rng.random() < 0.7:  # _balance_batch's reorder
        pick = rng.permutation(pick)
    return {k: v[pick] for k, v in rows.items()}


_TEXT = ["uid", "traj_uid", "abstract_state", "next_abstract_state", "action", "anchor_obs"]


def _odd_types(rng, rows):
    for name in _TEXT:
        kind = rng.integers(0, 4)
        if kind == 1:
            rows[name] = _obj(v.encode() for v in rows[name])
        elif kind == 2:
            rows[name] = _obj(np.str_(v) for v in rows[name])
        elif kind == 3:  # a mix
            rows[name] = _obj(v.encode() if i % 2 else v for i, v in enumerate(rows[name]))
    kind = rng.integers(0, 5)
    if kind == 1:
        rows["step_index"] = _obj(str(v) for v in rows["step_index"])
    elif kind == 2:
        rows["step_index"] = _obj(np.int64(v) for v in rows["step_index"])
    elif kind == 3:
        rows["step_index"] = _obj(float(v) for v in rows["step_index"])
    elif kind == 4:
        rows["step_index"] = np.asarray(rows["step_index"].tolist(), dtype=np.int32)
    for name in ["rewards", "episode_rewards"]:
        kind = rng.integers(0, 4)
        if kind == 1:
            rows[name] = _obj(str(v) for v in rows[name])
        elif kind == 2:
            rows[name] = _obj(np.float32(v) for v in rows[name])
        elif kind == 3:
            rows[name] = _obj(v.encode() if isinstance(v, str) else str(v).encode() for v in rows[name])
    for name in ["is_action_valid", "proas_error", "won"]:
        kind = rng.integers(0, 3)
        if kind == 1:
            rows[name] = _obj(int(v) for v in rows[name])
        elif kind == 2:
            rows[name] = _obj(np.bool_(v) for v in rows[name])
    return rows


_BAD_VALUES = {
    "uid": ["h", None], "traj_uid": ["tr0", "new"], "step_index": [-1, 7, "x", None, 2.5, float("nan"), 0],
    "abstract_state": ["elsewhere"], "next_abstract_state": ["elsewhere"],
    "episode_rewards": [7.0, np.nan, np.inf, "abc", None], "rewards": [None, np.nan, "abc"],
    "won": [None, "yes"], "is_action_valid": ["x"],
}


def _corrupt(rng, rows):
    for _ in range(int(rng.integers(1, 4))):
        name = str(rng.choice(list(_BAD_VALUES)))
        values = _BAD_VALUES[name]
        col = rows[name].astype(object)
        col[int(rng.integers(0, len(col)))] = values[int(rng.integers(0, len(values)))]
        rows[name] = col
    return rows


def _columns(rng):
    return new.StepColumns(
        step=None if rng.random() < 0.25 else "step_index",
        action=None if rng.random() < 0.2 else "action",
        anchor=None if rng.random() < 0.2 else "anchor_obs",
        error="proas_error" if rng.random() < 0.3 else None,
        step_reward=None if rng.random() < 0.2 else "rewards",
        won="won" if rng.random() < 0.4 else None,
    )


def _outcome(fn, *args):
    try:
        return "ok", fn(*args)
    except Exception as exc:  # noqa: BLE001 - the error itself is compared
        return "error", (type(exc), str(exc))


def _assert_same_layout(a, b):
    for f in dataclasses.fields(CreditBatch):
        x, y = getattr(a.batch, f.name), getattr(b.batch, f.name)
        if isinstance(y, list):
            assert x == y and [type(v) for v in x] == [type(v) for v in y], f.name
        else:
            assert x.dtype == y.dtype, f.name
            np.testing.assert_array_equal(x, y, err_msg=f.name)
    np.testing.assert_array_equal(a.row_to_step, b.row_to_step)
    np.testing.assert_array_equal(a.offsets, b.offsets)
    assert a.n_duplicate_rows == b.n_duplicate_rows
    assert [t.to_json() for t in a.trajectories] == [t.to_json() for t in b.trajectories]


@settings(max_examples=600, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), odd=st.booleans(), bad=st.booleans(), drop=st.booleans())
def test_single_path_equals_the_old_paths(seed, odd, bad, drop):
    rng = np.random.default_rng(seed)
    rows = _random_rows(rng)
    cols = _columns(rng)
    if odd:
        rows = _odd_types(rng, rows)
    if bad:
        rows = _corrupt(rng, rows)
    if drop:  # optional columns absent
        for name in ["anchor_obs", "rewards", "is_action_valid", "won"]:
            if rng.random() < 0.4:
                rows.pop(name)
    for c in [cols, None]:
        got, want = _outcome(new.rows_to_batch, dict(rows), c), _outcome(old.rows_to_batch, dict(rows), c)
        assert got[0] == want[0], (got, want)
        if got[0] == "error":
            assert got[1] == want[1]
        else:
            _assert_same_layout(got[1], want[1])
        got, want = (_outcome(new.rows_to_trajectories, dict(rows), c),
                     _outcome(old.rows_to_trajectories, dict(rows), c))
        assert got[0] == want[0], (got, want)
        if got[0] == "error":
            assert got[1] == want[1]
        else:
            np.testing.assert_array_equal(got[1].row_to_step, want[1].row_to_step)
            np.testing.assert_array_equal(got[1].offsets, want[1].offsets)
            assert got[1].n_duplicate_rows == want[1].n_duplicate_rows
            assert [t.to_json() for t in got[1].trajectories] == [t.to_json() for t in want[1].trajectories]
