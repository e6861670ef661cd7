"""Terminal views of a logged batch: why each step got the credit it got.

Three rich renderables: the batch overview (one row per task group), the group view (the
trajectories of one task side by side, each step a coloured glyph) and the trajectory view
(step by step: observation, action, Rea, PA, FD, base vs shaped advantage). The glyph and
colour conventions live here and the HTML page reuses them, so both read the same way:

- glyph = annotation: ``●`` advancing (PA = 1), ``○`` reasonable but not advancing (a loop or a
  revisit), ``✗`` unreasonable (Rea = 0: an error or a state outside the reference graph);
- colour = shaping: green / red for a positive / negative shaped advantage, bold when APR
  up-weighted the penalty, dim when it down-weighted it, grey and struck through when MUI
  masked the step (its credit was zeroed).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table
from rich.text import Text

from proas.errors import ProasError
from proas.rollout_log import LoggedStep, LoggedTrajectory, RolloutLog
from proas.termtext import printable, safe_text

__all__ = [
    "KIND_NOTE",
    "abbreviate",
    "glyph",
    "group_table",
    "informative_group",
    "inspection",
    "overview_table",
    "select",
    "short_state",
    "step_note",
    "step_style",
    "trajectory_table",
]

KIND_NOTE = {
    "masked": "MUI masked",
    "zeroed": "zeroed",
    "up": "APR ↑",
    "down": "APR ↓",
    "kept": "",
}


def glyph(step: LoggedStep) -> str:
    if not step.rea:
        return "✗"
    return "●" if step.pa else "○"


def step_style(step: LoggedStep) -> str:
    """The rich style of a step: its shaping kind and the sign of its shaped credit."""
    kind = step.kind
    if kind in ("masked", "zeroed"):
        return "bright_black strike"
    colour = "green" if step.shaped > 0 else "red" if step.shaped < 0 else "bright_black"
    if kind == "up":
        return f"bold {colour}"
    if kind == "down":
        return f"dim {colour}"
    return colour


def step_note(step: LoggedStep) -> str:
    note = KIND_NOTE[step.kind]
    if step.kind in ("up", "down") and step.weight is not None:
        note += f" ×{step.weight:.2f}"
    return note


def abbreviate(text: str | None, width: int = 60) -> str:
    """One line of at most ``width`` characters (whitespace collapsed, ``…`` when cut), safe to
    print (control characters escaped, see ``proas.termtext``)."""
    if not text:
        return ""
    flat = printable(re.sub(r"\s+", " ", text).strip(), newlines=False)
    return flat if len(flat) <= width else flat[: width - 1].rstrip() + "…"


def short_state(state: str, task_type: str | None) -> str:
    """An abstract state without its ``<task_type>|`` prefix."""
    if task_type and state.startswith(task_type + "|"):
        return state[len(task_type) + 1 :]
    return state


def select(
    log: RolloutLog, task: str | None = None, trajectory: str | None = None
) -> tuple[list[LoggedTrajectory], LoggedTrajectory]:
    """The group to show and the trajectory to detail.

    ``task`` matches a group id or a task id; ``trajectory`` a trajectory id (or its index in
    the group). Defaults: the group of ``trajectory`` if given, else the most informative group
    (``informative_group``); in it, the first trajectory whose credit the shaping changed (else
    the first).
    """
    groups = log.groups()
    if task is not None:
        members = groups.get(task) or [t for t in log.trajectories if t.task_id == task]
        if not members:
            raise ProasError(f"step {log.step}: no task {task!r}; tasks: {_listing(groups)}")
        group = members
    elif trajectory is not None:
        hit = [t for t in log.trajectories if t.trajectory == trajectory]
        if not hit:
            raise ProasError(f"step {log.step}: no trajectory {trajectory!r}")
        group = groups[hit[0].group]
    else:
        group = informative_group(groups)
    if trajectory is None:
        changed = [t for t in group if any(s.kind != "kept" for s in t.steps)]
        return group, (changed or group)[0]
    for t in group:
        if t.trajectory == trajectory:
            return group, t
    if trajectory.isdigit() and int(trajectory) < len(group):
        return group, group[int(trajectory)]
    ids = printable(", ".join(t.trajectory for t in group[:10]), newlines=False)
    raise ProasError(
        f"step {log.step}: no trajectory {trajectory!r} in task {group[0].group!r}; its trajectories: {ids}"
    )


def informative_group(groups: dict[str, list[LoggedTrajectory]]) -> list[LoggedTrajectory]:
    """The group that shows the most about the credit: one with both wins and failures (an
    all-equal group has a zero trajectory advantage under group baselines, so nothing to see),
    then the most steps the shaping changed, then the most credit; ties go to the earlier group.
    """

    def score(members: list[LoggedTrajectory]) -> tuple[bool, int, float]:
        wins = sum(t.success for t in members)
        mixed = 0 < wins < len(members)
        reshaped = sum(s.kind != "kept" for t in members for s in t.steps)
        credit = sum(abs(s.advantage) for t in members for s in t.steps)
        return mixed, reshaped, credit

    return max(groups.values(), key=score)  # max keeps the first of equals


def _listing(groups: dict) -> str:
    keys = list(groups)
    more = f", ... ({len(keys)} in all)" if len(keys) > 10 else ""
    return printable(", ".join(keys[:10]), newlines=False) + more


def _fmt(x: float) -> str:
    return f"{x:+.3f}"


def overview_table(log: RolloutLog, limit: int = 20) -> Table:
    """One row per task group of the batch."""
    # light rules and one space between columns: household's longest type (30 characters) then
    # fits on one line at 80 columns
    table = Table(title=f"RL step {log.step}: {len(log.trajectories)} trajectories, {len(log.groups())} tasks",
                  title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 0), collapse_padding=True, pad_edge=False)
    for col in ("task", "type", "G", "success", "steps", "masked", "APR ↑", "APR ↓"):
        table.add_column(col, justify="left" if col in ("task", "type") else "right", overflow="fold")
    for n, (gid, members) in enumerate(log.groups().items()):
        if n == limit:
            table.add_row(f"… {len(log.groups()) - limit} more", *[""] * 7)
            break
        kinds = [s.kind for t in members for s in t.steps]
        table.add_row(
            safe_text(gid, newlines=False),
            safe_text(members[0].task_type or "", newlines=False),
            str(len(members)),
            f"{sum(t.success for t in members)}/{len(members)}",
            f"{sum(len(t) for t in members) / len(members):.1f}",
            str(kinds.count("masked")),
            str(kinds.count("up")),
            str(kinds.count("down")),
        )
    return table


def credit_strip(traj: LoggedTrajectory, width: int | None = None) -> Text:
    text = Text()
    for s in traj.steps[:width]:
        text.append(glyph(s), style=step_style(s))
    if width is not None and len(traj.steps) > width:
        text.append("…")
    return text


def group_table(
    group: Sequence[LoggedTrajectory], selected: LoggedTrajectory | None = None, strip_width: int = 60
) -> Table:
    """The trajectories of one task side by side: one row each, steps aligned by ``t``."""
    first = group[0]
    title = safe_text(f"task {first.task_id} ({first.task_type or 'no type'}), group {first.group}", newlines=False)
    table = Table(title=title, title_justify="left")
    table.add_column("", width=1)
    table.add_column("trajectory", overflow="fold")
    table.add_column("won", justify="center")
    table.add_column("R", justify="right")
    table.add_column("A_i", justify="right")
    table.add_column("T", justify="right")
    table.add_column("credit per step (● advancing ○ not advancing ✗ unreasonable)", overflow="fold")
    for t in group:
        table.add_row(
            "▶" if selected is not None and t.trajectory == selected.trajectory else "",
            safe_text(t.trajectory, newlines=False),
            "✓" if t.success else "✗",
            f"{t.reward:g}",
            Text(
                _fmt(t.traj_advantage), style="green" if t.traj_advantage > 0 else "red" if t.traj_advantage < 0 else ""
            ),
            str(len(t)),
            credit_strip(t, strip_width),
        )
    return table


#: from this width on, the step table has room for the observation column
WIDE_STEP_TABLE = 180


class _StepTable:
    """The step table laid out for the width it is printed at (see ``trajectory_table``)."""

    def __init__(self, traj: LoggedTrajectory, obs_width: int, observations: bool | None):
        self.traj, self.obs_width, self.observations = traj, obs_width, observations

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        wide = self.observations if self.observations is not None else options.max_width >= WIDE_STEP_TABLE
        yield _step_table(self.traj, self.obs_width, wide)


def trajectory_table(traj: LoggedTrajectory, obs_width: int = 48, observations: bool | None = None) -> _StepTable:
    """A trajectory step by step, each row coloured by what the shaping did to it.

    Two layouts: the wide one has a column each for the observation, the action and the next
    state; the compact one, which fits 80 columns, leaves the observation out and puts the next
    state under the action. ``observations``: True / False forces one; None (the default)
    takes the wide one when the output is at least ``WIDE_STEP_TABLE`` columns wide.
    """
    return _StepTable(traj, obs_width, observations)


def _step_table(traj: LoggedTrajectory, obs_width: int, wide: bool) -> Table:
    title = safe_text(
        f"trajectory {traj.trajectory}: {'won' if traj.success else 'failed'}, R = {traj.reward:g}, "
        f"A_i = {_fmt(traj.traj_advantage)}, {len(traj)} steps", newlines=False)
    if wide:
        table = Table(title=title, title_justify="left")
    else:
        # no vertical rules and one space between columns: the eight figure columns then take
        # about 40 of 80 columns and leave the rest to the action
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 0), collapse_padding=True,
                      pad_edge=False)
    table.add_column("t", justify="right")
    if wide:
        table.add_column("observation", max_width=obs_width, no_wrap=True)
        table.add_column("action", overflow="fold")
        table.add_column("next state", overflow="fold")
    else:
        table.add_column("action → next state", overflow="fold", ratio=1, min_width=16)
    for col in ("Rea", "PA", "FD", "U", "base", "shaped"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("note", no_wrap=True)
    for s in traj.steps:
        style = step_style(s)
        action = safe_text(s.action + ("  (error)" if s.error else ""), newlines=False)
        state = safe_text(short_state(s.next_state, traj.task_type), newlines=False)
        if wide:
            texts = [abbreviate(s.observation, obs_width), action, state]
        else:
            action.append("\n→ ", style="bright_black")
            state.stylize("bright_black")
            texts = [action + state]
        table.add_row(
            str(s.t),
            *texts,
            str(s.rea),
            str(s.pa),
            f"{s.fd:g}",
            "✓" if s.uniform else "",
            _fmt(s.base_advantage),
            Text(_fmt(s.advantage), style=style),
            Text(step_note(s), style=style.replace(" strike", "")),  # the note stays legible
        )
    return table


def legend() -> Text:
    text = Text("legend: ")
    text.append("● advancing  ○ not advancing  ✗ unreasonable   ")
    text.append("positive", style="green")
    text.append(" / ")
    text.append("negative", style="red")
    text.append(" credit, ")
    text.append("APR up-weighted", style="bold red")
    text.append(", ")
    text.append("APR down-weighted", style="dim red")
    text.append(", ")
    text.append("MUI masked", style="bright_black strike")
    return text


def inspection(log: RolloutLog, task: str | None = None, trajectory: str | None = None,
               observations: bool | None = None) -> Group:
    """Overview, group view and trajectory view of a logged step, ready for ``Console.print``.

    ``observations``: the step table's layout (see ``trajectory_table``)."""
    group, traj = select(log, task, trajectory)
    steps = trajectory_table(traj, observations=observations)
    return Group(overview_table(log), "", group_table(group, traj), "", steps, "", legend())
