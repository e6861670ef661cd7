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

from rich.console import Group
from rich.table import Table
from rich.text import Text

from proas.errors import ProasError
from proas.inspect.rollout_log import LoggedStep, LoggedTrajectory, RolloutLog

__all__ = [
    "KIND_NOTE",
    "abbreviate",
    "glyph",
    "group_table",
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
    """One line of at most ``width`` characters (whitespace collapsed, ``…`` when cut)."""
    if not text:
        return ""
    flat = re.sub(r"\s+", " ", text).strip()
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
    the group). Defaults: the group of ``trajectory`` if given, else the first group; in it, the
    first trajectory whose credit the shaping changed (else the first).
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
        group = next(iter(groups.values()))
    if trajectory is None:
        changed = [t for t in group if any(s.kind != "kept" for s in t.steps)]
        return group, (changed or group)[0]
    for t in group:
        if t.trajectory == trajectory:
            return group, t
    if trajectory.isdigit() and int(trajectory) < len(group):
        return group, group[int(trajectory)]
    ids = ", ".join(t.trajectory for t in group[:10])
    raise ProasError(f"step {log.step}: no trajectory {trajectory!r} in task {group[0].group!r}; its trajectories: {ids}")


def _listing(groups: dict) -> str:
    keys = list(groups)
    more = f", ... ({len(keys)} in all)" if len(keys) > 10 else ""
    return ", ".join(keys[:10]) + more


def _fmt(x: float) -> str:
    return f"{x:+.3f}"


def overview_table(log: RolloutLog, limit: int = 20) -> Table:
    """One row per task group of the batch."""
    table = Table(title=f"RL step {log.step}: {len(log.trajectories)} trajectories, {len(log.groups())} tasks", title_justify="left")
    for col in ("task", "type", "G", "success", "mean steps", "masked", "APR ↑", "APR ↓"):
        table.add_column(col, justify="left" if col in ("task", "type") else "right")
    for n, (gid, members) in enumerate(log.groups().items()):
        if n == limit:
            table.add_row(f"… {len(log.groups()) - limit} more", *[""] * 7)
            break
        kinds = [s.kind for t in members for s in t.steps]
        table.add_row(
            gid,
            members[0].task_type or "",
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


def group_table(group: Sequence[LoggedTrajectory], selected: LoggedTrajectory | None = None, strip_width: int = 60) -> Table:
    """The trajectories of one task side by side: one row each, steps aligned by ``t``."""
    first = group[0]
    table = Table(title=f"task {first.task_id} ({first.task_type or 'no type'}), group {first.group}", title_justify="left")
    table.add_column("", width=1)
    table.add_column("trajectory")
    table.add_column("won", justify="center")
    table.add_column("R", justify="right")
    table.add_column("A_i", justify="right")
    table.add_column("T", justify="right")
    table.add_column("credit per step (● advancing ○ not advancing ✗ unreasonable)")
    for t in group:
        table.add_row(
            "▶" if selected is not None and t.trajectory == selected.trajectory else "",
            t.trajectory,
            "✓" if t.success else "✗",
            f"{t.reward:g}",
            Text(_fmt(t.traj_advantage), style="green" if t.traj_advantage > 0 else "red" if t.traj_advantage < 0 else ""),
            str(len(t)),
            credit_strip(t, strip_width),
        )
    return table


def trajectory_table(traj: LoggedTrajectory, obs_width: int = 48) -> Table:
    """A trajectory step by step, each row coloured by what the shaping did to it."""
    title = (
        f"trajectory {traj.trajectory}: {'won' if traj.success else 'failed'}, R = {traj.reward:g}, "
        f"A_i = {_fmt(traj.traj_advantage)}, {len(traj)} steps"
    )
    table = Table(title=title, title_justify="left")
    table.add_column("t", justify="right")
    table.add_column("observation", max_width=obs_width, no_wrap=True)
    table.add_column("action")
    table.add_column("next state")
    for col in ("Rea", "PA", "FD", "U", "base", "shaped"):
        table.add_column(col, justify="right")
    table.add_column("note", no_wrap=True)
    for s in traj.steps:
        style = step_style(s)
        table.add_row(
            str(s.t),
            abbreviate(s.observation, obs_width),
            Text(s.action + ("  (error)" if s.error else "")),
            short_state(s.next_state, traj.task_type),
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


def inspection(log: RolloutLog, task: str | None = None, trajectory: str | None = None) -> Group:
    """Overview, group view and trajectory view of a logged step, ready for ``Console.print``."""
    group, traj = select(log, task, trajectory)
    return Group(overview_table(log), "", group_table(group, traj), "", trajectory_table(traj), "", legend())
