"""verl step rows <-> proas trajectories, and step advantages -> token advantages.

verl-agent trains on one ``DataProto`` row per executed (trajectory, step): one prompt, one
response. The rows of a trajectory share ``traj_uid``; the trajectories of one task share
``uid``; trainer code reorders rows (``_balance_batch``) and pads the batch with copies of random
rows (``adjust_batch``) before the advantage is computed. So this module never trusts row order
when a step-index column exists, and maps every copy of a step to the same step.

Everything here works on plain mappings of numpy arrays (``DataProto.non_tensor_batch``) and
torch tensors, so it is testable without verl installed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any, Mapping, Sequence

import numpy as np

from proas.credit.batch import CreditBatch
from proas.errors import ProasError
from proas.types import Step, Trajectory

__all__ = [
    "StepColumns",
    "RowLayout",
    "BatchLayout",
    "rows_to_batch",
    "rows_to_trajectories",
    "trajectories_to_rows",
    "step_values_to_rows",
    "broadcast_to_tokens",
    "response_mask_of",
]


@dataclass(frozen=True)
class StepColumns:
    """Names of the ``non_tensor_batch`` columns the bridge reads. verl-agent's names by default.

    ``uid``, ``traj_uid``, ``anchor_obs``, ``is_action_valid``, ``rewards`` and
    ``episode_rewards`` are what verl-agent's rollout loop already writes; ``step_index``,
    ``abstract_state``, ``next_abstract_state`` and ``action`` are the four a verl-agent env
    manager / rollout loop must add for ProAS (docs/verl.md).
    """

    group: str = "uid"
    """episode group: the G rollouts of one task instance (GRPO's group)."""
    trajectory: str = "traj_uid"
    """one episode; its rows are its steps."""
    step: str | None = "step_index"
    """0-based step number within the trajectory. ``None``: the rows are already in step order
    (only true with ``trainer.balance_batch=False`` and no batch padding)."""
    state: str = "abstract_state"
    """abstract state the action was taken in, ``s_t`` (the env's ``info['abstract_state']``
    before the step)."""
    next_state: str = "next_abstract_state"
    """abstract state after the action, ``s_{t+1}``."""
    action: str | None = "action"
    """the executed action text (after verl-agent's projection). ``None``: not recorded; graph
    edges then carry an empty action."""
    anchor: str | None = "anchor_obs"
    """raw current observation, GiGPO's anchor. ``None`` or absent: the abstract state is used."""
    valid: str | None = "is_action_valid"
    """``error_t = not is_action_valid``; used unless ``error`` names a column."""
    error: str | None = None
    """a column holding ``error_t`` directly (e.g. one that also flags inadmissible commands and
    "Nothing happens."); takes precedence over ``valid``."""
    step_reward: str | None = "rewards"
    """the env's reward for the step, ``r_t`` (GiGPO's discounted step returns). ``None`` or
    absent: the credit layer puts the outcome on the last step."""
    episode_reward: str = "episode_rewards"
    """the trajectory's outcome reward ``R_i``, copied onto each of its rows."""
    won: str | None = None
    """optional per-row success flag; absent: success means ``R_i > 0``."""

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any] | None) -> "StepColumns":
        """Build from a config mapping (e.g. ``proas.columns`` of a verl YAML); unknown keys raise."""
        if cfg is None:
            return cls()
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ProasError(
                f"unknown proas column setting(s) {unknown}; valid: {sorted(known)}"
            )
        return cls(**{k: (None if v is None else str(v)) for k, v in cfg.items()})


@dataclass
class RowLayout:
    """Where each row's step lives in the flat step arrays of the credit layer.

    ``trajectories`` are in first-seen row order, their steps in step order, so the credit
    layer's flat arrays (trajectory after trajectory) index steps as ``offsets[i] + t``;
    ``row_to_step[r]`` is that flat index for row ``r``. Copies of a step (batch padding) map to
    the same flat index.
    """

    trajectories: list[Trajectory]
    row_to_step: np.ndarray  # (n_rows,) int64
    offsets: np.ndarray  # (n_traj + 1,) int64
    n_duplicate_rows: int

    @property
    def n_steps(self) -> int:
        return int(self.offsets[-1])


def _column(non_tensor: Mapping[str, Any], name: str, n_rows: int) -> np.ndarray:
    col = np.asarray(non_tensor[name], dtype=object)
    if col.ndim == 0 or len(col) != n_rows:
        raise ProasError(
            f"non_tensor_batch[{name!r}] has {col.size} entries, expected one per row ({n_rows})"
        )
    return col


def _as_text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return repr(value.tolist())
    return str(value)


def _as_float(value: Any, what: str) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ProasError(f"{what}: expected a number, got {value!r}") from None
    if not np.isfinite(out):
        raise ProasError(f"{what}: expected a finite number, got {out}")
    return out


def _as_bool(value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    return bool(int(value))


@dataclass(frozen=True)
class _Columns:
    """The step columns of a batch, read once, ``(bs,)`` object arrays (``error`` bool, or
    None when the batch has neither an error nor a validity column; the optional columns None
    when absent)."""

    n_rows: int
    group: np.ndarray
    traj: np.ndarray
    state: np.ndarray
    next_state: np.ndarray
    outcome: np.ndarray
    action: np.ndarray | None
    step: np.ndarray | None
    error: np.ndarray | None
    anchor: np.ndarray | None
    step_reward: np.ndarray | None
    won: np.ndarray | None


def _read_columns(non_tensor: Mapping[str, Any], cols: StepColumns) -> _Columns:
    """Read every column ProAS uses, checking each one's length (and converting the error flags)
    before any row check."""
    n_rows = len(np.asarray(non_tensor[cols.trajectory], dtype=object))

    def get(name: str) -> np.ndarray:
        return _column(non_tensor, name, n_rows)

    def present(name: str | None) -> bool:
        return name is not None and name in non_tensor

    group, traj = get(cols.group), get(cols.trajectory)
    state, next_state = get(cols.state), get(cols.next_state)
    outcome = get(cols.episode_reward)
    action = get(cols.action) if cols.action is not None else None
    step = get(cols.step) if cols.step is not None else None
    if cols.error is not None:
        error = _bools(get(cols.error))
    elif present(cols.valid):
        error = ~_bools(get(cols.valid))
    else:
        error = None
    return _Columns(
        n_rows, group, traj, state, next_state, outcome, action, step, error,
        anchor=get(cols.anchor) if present(cols.anchor) else None,
        step_reward=get(cols.step_reward) if present(cols.step_reward) else None,
        won=get(cols.won) if present(cols.won) else None,
    )


def _check_required(non_tensor: Mapping[str, Any], cols: StepColumns) -> None:
    required = [cols.group, cols.trajectory, cols.state, cols.next_state, cols.episode_reward]
    if cols.step is not None:
        required.append(cols.step)
    if cols.error is not None:
        required.append(cols.error)
    if cols.action is not None:
        required.append(cols.action)
    missing = [name for name in required if name not in non_tensor]
    if missing:
        raise ProasError(
            f"non_tensor_batch lacks column(s) {missing} that ProAS needs "
            f"(present: {sorted(non_tensor)}); add them in the env manager or rename them "
            f"with StepColumns (docs/verl.md)"
        )


def rows_to_trajectories(
    non_tensor: Mapping[str, Any], columns: StepColumns | None = None
) -> RowLayout:
    """Group verl step rows into proas trajectories.

    The object view of :func:`rows_to_batch` (one conversion, the same checks and errors): its
    ``CreditBatch`` and row -> step map, with the trajectories built from them.

    Args:
        non_tensor: ``DataProto.non_tensor_batch``: column name -> array with one entry per row.
        columns: the column names to read (verl-agent's by default).

    Returns:
        the trajectories (first-seen order) and the row -> flat-step map.

    Raises:
        ProasError: a required column is missing, a trajectory spans two groups, its rows
            disagree on its outcome reward, its step numbers have gaps, or two copies of one
            step disagree on the state they record.
    """
    layout = rows_to_batch(non_tensor, columns)
    return RowLayout(
        trajectories=layout.trajectories,
        row_to_step=layout.row_to_step,
        offsets=layout.offsets,
        n_duplicate_rows=layout.n_duplicate_rows,
    )


@dataclass
class BatchLayout:
    """The step rows as a ``CreditBatch``, and where each row's step lives in it.

    The array twin of :class:`RowLayout`: ``row_to_step`` / ``offsets`` / ``n_duplicate_rows``
    are the ``RowLayout``'s, and ``batch`` equals ``CreditBatch.from_trajectories`` of its
    trajectories, without a ``Step`` object per row. ``trajectories`` is built from the batch
    only when asked for (inspection, logging, tests), never on the reshape path.
    """

    batch: CreditBatch
    row_to_step: np.ndarray  # (n_rows,) int64
    n_duplicate_rows: int
    _anchors: np.ndarray | None  # (n_steps,) anchor texts; None: no anchor column
    _has_step_reward: bool
    _has_won: bool

    @property
    def offsets(self) -> np.ndarray:
        return self.batch.offsets

    @property
    def n_steps(self) -> int:
        return self.batch.n_steps

    @cached_property
    def trajectories(self) -> list[Trajectory]:
        b = self.batch
        states, actions = b.states, b.actions
        state, next_state, action = b.state.tolist(), b.next_state.tolist(), b.action.tolist()
        error, step_reward = b.error.tolist(), b.step_reward.tolist()
        anchors = self._anchors.tolist() if self._anchors is not None else None
        out = []
        for j in range(len(b.traj_ids)):
            lo, hi = int(b.offsets[j]), int(b.offsets[j + 1])
            steps = [
                Step(
                    state=states[state[i]],
                    action=actions[action[i]],
                    next_state=states[next_state[i]],
                    error=bool(error[i]),
                    anchor=anchors[i] if anchors is not None else None,
                    reward=step_reward[i] if self._has_step_reward else None,
                )
                for i in range(lo, hi)
            ]
            out.append(
                Trajectory(
                    group=b.group_ids[int(b.group[j])],
                    trajectory=b.traj_ids[j],
                    reward=float(b.reward[j]),
                    steps=steps,
                    won=bool(b.success[j]) if self._has_won else None,
                )
            )
        return out


def _texts(col: np.ndarray) -> np.ndarray:
    # verl-agent's text columns hold str already; only other types pay _as_text per entry
    values = col.tolist()
    if set(map(type, values)) <= {str}:
        return col
    out = np.empty(len(values), dtype=object)
    out[:] = [_as_text(v) for v in values]
    return out


def _bools(col: np.ndarray) -> np.ndarray:
    values = col.tolist()
    if set(map(type, values)) <= {bool, np.bool_}:
        return np.asarray(values, dtype=bool)
    return np.fromiter((_as_bool(v) for v in values), dtype=bool, count=len(values))


def _floats(col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(values, bad)``: ``float`` of each entry (numpy's cast when it takes the whole column),
    ``bad`` where that fails or is not finite (``_as_float`` words the error)."""
    try:
        out = np.asarray(col, dtype=np.float64)
        if out.shape != (len(col),):
            raise ValueError
    except Exception:  # float() of each entry; what it raises, _as_float raises again in order
        out = np.empty(len(col), dtype=np.float64)
        for i, v in enumerate(col.tolist()):
            try:
                out[i] = float(v)
            except Exception:
                out[i] = np.nan
    return out, ~np.isfinite(out)


_INT_TYPES = (int, bool, np.integer, np.bool_)


def _ints(col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(values, bad)``: ``int`` of each entry, ``bad`` (value -1) where ``int`` fails."""
    values = col.tolist()
    bad = np.zeros(len(values), dtype=bool)
    if all(isinstance(v, _INT_TYPES) for v in values):
        try:
            return np.asarray(values, dtype=np.int64).reshape(len(values)), bad
        except OverflowError:  # an integer beyond int64: entry by entry below
            pass
    out = np.empty(len(values), dtype=np.int64)
    big = np.iinfo(np.int64).max  # no step number: beyond any 0..n-1, as the step check says
    for i, v in enumerate(values):
        try:
            value = int(v)
        except Exception:  # int() raises it again when this row is the first failure
            value, bad[i] = -1, True
        out[i] = value if -big <= value <= big else big
    return out, bad


def _codes(values: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """``(codes, vocab)`` of an object array of texts, codes in first-seen order: the same codes
    as ``CreditBatch``'s interning. A dict is the fastest interner of Python strings here (an
    object sort with ``np.unique`` is four times slower)."""
    table: dict[str, int] = {}
    codes = np.fromiter((table.setdefault(v, len(table)) for v in values.tolist()), dtype=np.int64, count=len(values))
    return codes, list(table)


def _first(codes: np.ndarray) -> np.ndarray:
    """Position of the first occurrence of each code of ``_codes`` (an integer sort, in C)."""
    return np.unique(codes, return_index=True)[1]


def rows_to_batch(non_tensor: Mapping[str, Any], columns: StepColumns | None = None) -> BatchLayout:
    """Step rows -> ``CreditBatch`` arrays, and each row's step.

    Trajectories in first-seen row order, their steps in step order (row order without a step
    column); copies of a step (batch padding) map to its first-seen row. Every check runs on
    whole columns; when one fails, the error raised is the first in the order trajectory
    (first seen), check (group, outcome reward, step numbers row by row, step-number gaps, step
    rewards, won flag), row.

    Raises:
        ProasError: a required column is missing or has the wrong length, a trajectory spans two
            groups, its rows disagree on its outcome reward, a reward is not a finite number, a
            step number is negative, its step numbers have gaps, or two copies of one step
            disagree on the state they record.
    """
    cols = columns or StepColumns()
    _check_required(non_tensor, cols)
    c = _read_columns(non_tensor, cols)
    n_rows = c.n_rows
    traj_code, traj_ids = _codes(_texts(c.traj))
    first_row = _first(traj_code)
    n_traj = len(traj_ids)
    rows = np.arange(n_rows, dtype=np.int64)
    step_bad = np.zeros(n_rows, dtype=bool)
    if c.step is None:  # row order within the trajectory
        by_traj = np.argsort(traj_code, kind="stable")
        starts = np.zeros(n_traj + 1, dtype=np.int64)
        np.cumsum(np.bincount(traj_code, minlength=n_traj), out=starts[1:])
        step_no = np.empty(n_rows, dtype=np.int64)
        step_no[by_traj] = rows - starts[traj_code[by_traj]]
    else:
        step_no, step_bad = _ints(c.step)
    # rows by (trajectory, step, row): the first row of each run is the step's first-seen copy
    order = np.lexsort((rows, step_no, traj_code))
    ts, tt = traj_code[order], step_no[order]
    first_copy = np.ones(n_rows, dtype=bool)
    first_copy[1:] = (ts[1:] != ts[:-1]) | (tt[1:] != tt[:-1])
    step_of_sorted = np.cumsum(first_copy) - 1
    canon = order[first_copy]  # (S,) the row that stands for each step, in flat step order
    row_to_step = np.empty(n_rows, dtype=np.int64)
    row_to_step[order] = step_of_sorted
    n_steps = len(canon)
    traj_of_step = traj_code[canon]
    lengths = np.bincount(traj_of_step, minlength=n_traj).astype(np.int64)
    offsets = np.zeros(n_traj + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    t = np.arange(n_steps, dtype=np.int64) - offsets[traj_of_step]
    state, next_state = _texts(c.state), _texts(c.next_state)
    group = _texts(c.group)
    outcome, outcome_bad = _floats(c.outcome)
    reward = outcome[first_row]
    if c.step_reward is not None:
        step_reward, step_reward_bad = _floats(c.step_reward[canon])
    else:
        step_reward, step_reward_bad = None, np.zeros(n_steps, dtype=bool)
    success, won_bad = None, np.zeros(n_traj, dtype=bool)
    if c.won is not None:
        success = np.zeros(n_traj, dtype=bool)
        for j, v in enumerate(c.won[first_row].tolist()):
            try:
                success[j] = _as_bool(v)
            except Exception:
                won_bad[j] = True

    # the checks, each a flag per row, per trajectory or per step
    row_of = canon[step_of_sorted]  # (n_rows,) in sorted order: the step's first-seen row
    mismatch_sorted = (state[order] != state[row_of]) | (next_state[order] != next_state[row_of])
    step_row_bad = np.zeros(n_rows, dtype=bool)
    step_row_bad[order] = mismatch_sorted
    if c.step is not None:
        step_row_bad |= step_bad | (step_no < 0)
    group_bad = _per_traj(group != group[first_row][traj_code], traj_code, n_traj)
    disagree = _per_traj(outcome != reward[traj_code], traj_code, n_traj)
    gaps = _per_traj(t != step_no[canon], traj_of_step, n_traj)
    if group_bad.any() or outcome_bad.any() or disagree.any() or step_row_bad.any() or gaps.any() \
            or step_reward_bad.any() or won_bad.any():
        _raise_first(
            cols, c, traj_code, traj_ids, first_row, group, outcome, step_no, canon, t, traj_of_step,
            group_bad, outcome_bad, disagree, step_row_bad, step_bad, gaps, step_reward_bad, won_bad,
        )

    group_code, group_ids = _codes(group[first_row])
    error = c.error[canon] if c.error is not None else np.zeros(n_steps, dtype=bool)
    state_code, states = _codes(np.concatenate([state[canon], next_state[canon]]))
    if c.action is not None:
        action, actions = _codes(_texts(c.action)[canon])
    else:
        action, actions = np.zeros(n_steps, dtype=np.int64), ([""] if n_steps else [])
    anchors = _texts(c.anchor)[canon] if c.anchor is not None else None
    anchor = _codes(anchors if anchors is not None else state[canon])[0]
    if step_reward is not None:
        reward_on_last = np.zeros(n_traj, dtype=bool)
    else:  # the credit layer's convention: the outcome on the last step
        step_reward = np.zeros(n_steps, dtype=np.float64)
        reward_on_last = lengths > 0
        step_reward[offsets[1:][reward_on_last] - 1] = reward[reward_on_last]
    batch = CreditBatch(
        offsets=offsets, traj_of_step=traj_of_step, t=t, lengths=lengths, group=group_code,
        group_ids=group_ids, traj_ids=traj_ids, reward=reward,
        success=success if success is not None else reward > 0, states=states,
        state=state_code[:n_steps], next_state=state_code[n_steps:], actions=actions, action=action,
        error=error, anchor=anchor, step_reward=step_reward, value=np.full(n_steps, np.nan),
        reward_on_last=reward_on_last, truncated=np.zeros(n_traj, dtype=bool),
    )
    return BatchLayout(
        batch, row_to_step, n_rows - n_steps, anchors, c.step_reward is not None, c.won is not None
    )


def _per_traj(flag: np.ndarray, traj: np.ndarray, n_traj: int) -> np.ndarray:
    out = np.zeros(n_traj, dtype=bool)
    out[traj[flag]] = True
    return out


def _raise_first(
    cols: StepColumns, c: _Columns, traj_code: np.ndarray, traj_ids: list[str], first_row: np.ndarray,
    group: np.ndarray, outcome: np.ndarray, step_no: np.ndarray, canon: np.ndarray, t: np.ndarray,
    traj_of_step: np.ndarray, group_bad: np.ndarray, outcome_bad: np.ndarray, disagree: np.ndarray,
    step_row_bad: np.ndarray, step_bad: np.ndarray, gaps: np.ndarray, step_reward_bad: np.ndarray,
    won_bad: np.ndarray,
) -> None:
    """Raise the error of the first failed check: by trajectory (first seen), then check, then
    row (step for the step rewards)."""
    candidates: list[tuple[int, int, int]] = []  # (trajectory, check, row or step)
    for check, flag in enumerate([group_bad, None, disagree, None, gaps, None, won_bad]):
        if flag is not None and flag.any():
            candidates.append((int(np.flatnonzero(flag)[0]), check, 0))
    for check, flag in [(1, outcome_bad), (3, step_row_bad)]:
        if flag.any():
            r = np.flatnonzero(flag)
            j = int(traj_code[r].min())
            candidates.append((j, check, int(r[traj_code[r] == j][0])))
    if step_reward_bad.any():
        s = np.flatnonzero(step_reward_bad)
        j = int(traj_of_step[s].min())
        candidates.append((j, 5, int(s[traj_of_step[s] == j][0])))
    j, check, pos = min(candidates)
    tid = traj_ids[j]
    in_traj = np.flatnonzero(traj_code == j)
    if check == 0:
        groups = sorted(set(group[in_traj].tolist()))
        raise ProasError(f"trajectory {tid!r} has rows in several groups {groups}")
    if check == 1:
        _as_float(c.outcome[pos], f"{cols.episode_reward} of trajectory {tid!r}")
    elif check == 2:
        outcomes = sorted(set(outcome[in_traj].tolist()))
        raise ProasError(f"trajectory {tid!r}: its rows disagree on {cols.episode_reward!r}: {outcomes}")
    elif check == 3:
        assert c.step is not None
        if step_bad[pos]:
            int(c.step[pos])  # raises what int() raises
        if step_no[pos] < 0:
            raise ProasError(f"trajectory {tid!r}: negative {cols.step} {int(step_no[pos])}")
        raise ProasError(f"trajectory {tid!r}: two rows claim step {int(step_no[pos])} with different states")
    elif check == 4:
        seen = step_no[canon[traj_of_step == j]].tolist()
        raise ProasError(f"trajectory {tid!r}: {cols.step} values {seen} are not 0..{len(seen) - 1}")
    elif check == 5:
        assert c.step_reward is not None
        _as_float(c.step_reward[canon[pos]], f"{cols.step_reward} of trajectory {tid!r}")
    else:
        assert c.won is not None
        _as_bool(c.won[first_row[j]])
    raise AssertionError(f"check {check} of trajectory {tid!r} failed but raised nothing")  # pragma: no cover


def trajectories_to_rows(
    trajectories: Sequence[Trajectory], columns: StepColumns | None = None
) -> dict[str, np.ndarray]:
    """The ``non_tensor_batch`` columns a verl-agent rollout would write for these trajectories.

    One row per step, trajectories one after another, as verl-agent's ``gather_rollout_data``
    lays them out; every column is an object array, as verl-agent stores them. The inverse of
    :func:`rows_to_trajectories` (used by tests, and by anyone feeding proas rollouts to verl)
    up to the credit layer's own defaults: a missing anchor is written as the state, and a
    trajectory without step rewards gets its outcome on the last step.
    """
    cols = columns or StepColumns()
    out: dict[str, list[Any]] = {}

    def put(name: str | None, value: Any) -> None:
        if name is not None:
            out.setdefault(name, []).append(value)

    # a won column only when some trajectory records it, then on every row (columns stay aligned)
    with_won = any(traj.won is not None for traj in trajectories)
    for traj in trajectories:
        for t, step in enumerate(traj.steps):
            put(cols.group, traj.group)
            put(cols.trajectory, traj.trajectory)
            put(cols.step, t)
            put(cols.state, step.state)
            put(cols.next_state, step.next_state)
            put(cols.action, step.action)
            put(cols.anchor, step.anchor if step.anchor is not None else step.state)
            if cols.error is not None:
                put(cols.error, bool(step.error))
            else:
                put(cols.valid, not step.error)
            if step.reward is not None:
                put(cols.step_reward, float(step.reward))
            else:  # the credit layer's convention: the outcome on the last step
                put(cols.step_reward, float(traj.reward) if t == len(traj.steps) - 1 else 0.0)
            put(cols.episode_reward, float(traj.reward))
            if with_won:
                put(cols.won, bool(traj.success))
    result = {}
    for name, values in out.items():
        arr = np.empty(len(values), dtype=object)
        arr[:] = values
        result[name] = arr
    return result


def step_values_to_rows(values: np.ndarray, layout: RowLayout) -> np.ndarray:
    """Per-step values (flat, trajectory after trajectory) -> one value per row, copies included."""
    values = np.asarray(values)
    if values.shape[0] != layout.n_steps:
        raise ValueError(
            f"expected {layout.n_steps} step values for this batch, got shape {values.shape}"
        )
    return values[layout.row_to_step]


def response_mask_of(batch: Any) -> Any:
    """The (bs, response_length) 0/1 mask of response tokens of a verl ``DataProto.batch``.

    verl's trainer stores ``response_mask`` before computing advantages; older batches only have
    ``attention_mask`` over prompt + response, whose last ``response_length`` columns are it.
    """
    keys = set(batch.keys())
    if "response_mask" in keys:
        return batch["response_mask"]
    if "attention_mask" in keys and "responses" in keys:
        return batch["attention_mask"][:, -batch["responses"].shape[-1] :]
    raise ProasError(
        f"the batch has neither 'response_mask' nor 'attention_mask' + 'responses' (keys: {sorted(keys)})"
    )


def broadcast_to_tokens(row_values: np.ndarray, response_mask: Any) -> Any:
    """Every response token of a step row gets the row's value; padding gets 0.

    Args:
        row_values: (bs,) one value per row.
        response_mask: (bs, response_length) torch tensor, 1 on response tokens.

    Returns:
        (bs, response_length) float32 tensor on the mask's device,
        ``row_values[:, None] * response_mask``.
    """
    import torch

    n = response_mask.shape[0]
    if np.shape(row_values) != (n,):
        raise ValueError(f"expected {n} row values, got shape {np.shape(row_values)}")
    vals = torch.as_tensor(np.asarray(row_values, dtype=np.float32), device=response_mask.device)
    # float32 * an integer or bool mask is float32 (torch's type promotion) and the same numbers
    # as converting the mask first, without a second (bs, response_length) tensor
    if response_mask.dtype.is_floating_point and response_mask.dtype != torch.float32:
        response_mask = response_mask.to(torch.float32)
    return vals[:, None] * response_mask
