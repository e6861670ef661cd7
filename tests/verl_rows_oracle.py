"""Frozen copy of ``proas.integrations.verl.rows`` before the single conversion path (issue #28):
the loop converter ``rows_to_trajectories`` and the old ``rows_to_batch`` (array path with the loop
as fallback). tests/test_verl_rows.py checks the single path against it; do not edit."""

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
    """Read every column ProAS uses, in one order for both the object and the array path, so a
    column of the wrong length or a bad flag fails with the same error on either."""
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
    cols = columns or StepColumns()
    _check_required(non_tensor, cols)
    c = _read_columns(non_tensor, cols)
    n_rows = c.n_rows
    group, traj, state, next_state, outcome = c.group, c.traj, c.state, c.next_state, c.outcome
    action, step_no, anchor, step_reward, won = c.action, c.step, c.anchor, c.step_reward, c.won
    error = c.error if c.error is not None else np.zeros(n_rows, dtype=bool)

    # rows of each trajectory, trajectories in first-seen order
    rows_of: dict[str, list[int]] = {}
    for r in range(n_rows):
        rows_of.setdefault(_as_text(traj[r]), []).append(r)

    trajectories: list[Trajectory] = []
    row_to_step = np.empty(n_rows, dtype=np.int64)
    offsets = [0]
    n_dup = 0
    for tid, rows in rows_of.items():
        groups = {_as_text(group[r]) for r in rows}
        if len(groups) != 1:
            raise ProasError(f"trajectory {tid!r} has rows in several groups {sorted(groups)}")
        outcomes = {_as_float(outcome[r], f"{cols.episode_reward} of trajectory {tid!r}") for r in rows}
        if len(outcomes) != 1:
            raise ProasError(
                f"trajectory {tid!r}: its rows disagree on {cols.episode_reward!r}: {sorted(outcomes)}"
            )
        if step_no is None:
            order = {r: t for t, r in enumerate(rows)}
            canonical = rows
        else:
            order = {}
            first_row_of_step: dict[int, int] = {}
            for r in rows:
                t = int(step_no[r])
                if t < 0:
                    raise ProasError(f"trajectory {tid!r}: negative {cols.step} {t}")
                order[r] = t
                if t in first_row_of_step:
                    first = first_row_of_step[t]
                    if (_as_text(state[r]), _as_text(next_state[r])) != (
                        _as_text(state[first]),
                        _as_text(next_state[first]),
                    ):
                        raise ProasError(
                            f"trajectory {tid!r}: two rows claim step {t} with different states"
                        )
                    n_dup += 1
                else:
                    first_row_of_step[t] = r
            n_steps = len(first_row_of_step)
            if sorted(first_row_of_step) != list(range(n_steps)):
                raise ProasError(
                    f"trajectory {tid!r}: {cols.step} values {sorted(first_row_of_step)} "
                    f"are not 0..{n_steps - 1}"
                )
            canonical = [first_row_of_step[t] for t in range(n_steps)]
        steps = []
        for r in canonical:
            steps.append(
                Step(
                    state=_as_text(state[r]),
                    action=_as_text(action[r]) if action is not None else "",
                    next_state=_as_text(next_state[r]),
                    error=bool(error[r]),
                    anchor=_as_text(anchor[r]) if anchor is not None else None,
                    reward=(
                        _as_float(step_reward[r], f"{cols.step_reward} of trajectory {tid!r}")
                        if step_reward is not None
                        else None
                    ),
                )
            )
        base = offsets[-1]
        for r in rows:
            row_to_step[r] = base + order[r]
        trajectories.append(
            Trajectory(
                group=groups.pop(),
                trajectory=tid,
                reward=outcomes.pop(),
                steps=steps,
                won=_as_bool(won[rows[0]]) if won is not None else None,
            )
        )
        offsets.append(base + len(steps))
    return RowLayout(
        trajectories=trajectories,
        row_to_step=row_to_step,
        offsets=np.asarray(offsets, dtype=np.int64),
        n_duplicate_rows=n_dup,
    )


@dataclass
class BatchLayout:
    """The step rows as a ``CreditBatch``, and where each row's step lives in it.

    The array twin of :class:`RowLayout`: ``batch`` equals
    ``CreditBatch.from_trajectories(rows_to_trajectories(...).trajectories)`` and
    ``row_to_step`` / ``offsets`` / ``n_duplicate_rows`` equal the ``RowLayout``'s, without a
    ``Step`` object per row. ``trajectories`` is built from the rows only when asked for
    (inspection, logging, tests), never on the reshape path.
    """

    batch: CreditBatch
    row_to_step: np.ndarray  # (n_rows,) int64
    n_duplicate_rows: int
    _rows: Mapping[str, Any]
    _columns: StepColumns

    @property
    def offsets(self) -> np.ndarray:
        return self.batch.offsets

    @property
    def n_steps(self) -> int:
        return self.batch.n_steps

    @cached_property
    def trajectories(self) -> list[Trajectory]:
        return rows_to_trajectories(self._rows, self._columns).trajectories


class _Irregular(Exception):
    """The rows are malformed or of unusual types: the object path decides (and words the error)."""


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


def _floats(col: np.ndarray) -> np.ndarray:
    try:
        return np.asarray(col, dtype=np.float64)
    except (TypeError, ValueError):
        raise _Irregular from None


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
    """Step rows -> ``CreditBatch`` arrays directly: what ``rows_to_trajectories`` followed by
    ``CreditBatch.from_trajectories`` gives, in numpy instead of one ``Step`` per row.

    Same trajectory and step order, the same codes, the same row -> step map and the same
    errors: rows that fail a check here (or hold types the array path does not convert) go
    through :func:`rows_to_trajectories`, which raises its own error or, for odd but valid
    types, gives the batch.
    """
    cols = columns or StepColumns()
    _check_required(non_tensor, cols)
    try:
        return _rows_to_batch(non_tensor, cols)
    except _Irregular:
        layout = rows_to_trajectories(non_tensor, cols)
        return BatchLayout(
            CreditBatch.from_trajectories(layout.trajectories), layout.row_to_step,
            layout.n_duplicate_rows, dict(non_tensor), cols,
        )


def _rows_to_batch(non_tensor: Mapping[str, Any], cols: StepColumns) -> BatchLayout:
    c = _read_columns(non_tensor, cols)
    n_rows = c.n_rows
    group_col, traj_col, state_col, next_col, outcome_col = c.group, c.traj, c.state, c.next_state, c.outcome
    action_col, step_col, error_rows = c.action, c.step, c.error
    anchor_col, reward_col, won_col = c.anchor, c.step_reward, c.won
    traj_code, traj_ids = _codes(_texts(traj_col))
    first_row = _first(traj_code)
    n_traj = len(traj_ids)
    rows = np.arange(n_rows, dtype=np.int64)
    if step_col is None:  # row order within the trajectory
        by_traj = np.argsort(traj_code, kind="stable")
        starts = np.zeros(n_traj + 1, dtype=np.int64)
        np.cumsum(np.bincount(traj_code, minlength=n_traj), out=starts[1:])
        step_no = np.empty(n_rows, dtype=np.int64)
        step_no[by_traj] = rows - starts[traj_code[by_traj]]
    else:
        try:
            step_no = np.asarray(step_col.tolist(), dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            raise _Irregular from None
        if step_no.shape != (n_rows,) or (step_no < 0).any():
            raise _Irregular
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
    if not np.array_equal(t, step_no[canon]):  # step numbers with gaps
        raise _Irregular
    state, next_state = _texts(state_col), _texts(next_col)
    dup, dup_of = order[~first_copy], canon[step_of_sorted[~first_copy]]
    if (state[dup] != state[dup_of]).any() or (next_state[dup] != next_state[dup_of]).any():
        raise _Irregular  # two copies of a step disagree
    group = _texts(group_col)
    if (group != group[first_row][traj_code]).any():
        raise _Irregular  # a trajectory in several groups
    outcome = _floats(outcome_col)
    if not np.isfinite(outcome).all() or (outcome != outcome[first_row][traj_code]).any():
        raise _Irregular
    reward = outcome[first_row]
    group_code, group_ids = _codes(group[first_row])
    error = error_rows[canon] if error_rows is not None else np.zeros(n_steps, dtype=bool)
    state_code, states = _codes(np.concatenate([state[canon], next_state[canon]]))
    if action_col is not None:
        action, actions = _codes(_texts(action_col)[canon])
    else:
        action, actions = np.zeros(n_steps, dtype=np.int64), ([""] if n_steps else [])
    anchor = _codes(_texts(anchor_col)[canon] if anchor_col is not None else state[canon])[0]
    if reward_col is not None:
        step_reward = _floats(reward_col[canon])
        if not np.isfinite(step_reward).all():
            raise _Irregular
        reward_on_last = np.zeros(n_traj, dtype=bool)
    else:  # the credit layer's convention: the outcome on the last step
        step_reward = np.zeros(n_steps, dtype=np.float64)
        reward_on_last = lengths > 0
        step_reward[offsets[1:][reward_on_last] - 1] = reward[reward_on_last]
    if won_col is not None:
        won = won_col[first_row]
        success = np.fromiter((_as_bool(v) for v in won.tolist()), dtype=bool, count=n_traj)
    else:
        success = reward > 0
    batch = CreditBatch(
        offsets=offsets, traj_of_step=traj_of_step, t=t, lengths=lengths, group=group_code,
        group_ids=group_ids, traj_ids=traj_ids, reward=reward, success=success, states=states,
        state=state_code[:n_steps], next_state=state_code[n_steps:], actions=actions, action=action,
        error=error, anchor=anchor, step_reward=step_reward, value=np.full(n_steps, np.nan),
        reward_on_last=reward_on_last, truncated=np.zeros(n_traj, dtype=bool),
    )
    return BatchLayout(batch, row_to_step, n_rows - n_steps, dict(non_tensor), cols)


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
