"""`proas play ENV --task ID`: play one task of an environment in the terminal (and `proas tasks`:
list a split's task ids). It stands with the envs, whose registry it builds them from.

Shows the observation and the admissible commands (when the env has them); a command is typed
as text or by its number in the list. ``hint`` prints the oracle's next action (``env.hint()``,
or the first step of ``env.oracle(task)`` before any move), ``quit`` leaves.

Env text (observations, commands, hints) is printed with its control characters escaped
(``proas.termtext``). A typed command is not printed again when the terminal already shows it
(standard input is a terminal); a command picked by its number is shown as ``→ command``.
With piped input nothing is shown by the terminal, so each command is printed as ``> command``.

Envs are built by name through ``proas.envs.make`` (the env registry); the factory takes keyword
options (``backend`` for household).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, TextIO

from rich.columns import Columns
from rich.console import Console
from rich.text import Text

from proas import envs
from proas.errors import ProasError
from proas.termtext import safe_text


def _hint(env: Any, task: str, moved: bool) -> str | None:
    if hasattr(env, "hint"):
        return env.hint()
    if not moved:
        plan = env.oracle(task)
        return plan[0] if plan else None
    return None


def admissible_list(adm: list[str]) -> Columns:
    """The numbered commands in columns (numbers running down): a command is never split
    across lines, as one long ``|``-joined line wrapped by the terminal was."""
    items = [Text(f"[{i}] ") + safe_text(c, newlines=False) for i, c in enumerate(adm, 1)]
    return Columns(items, padding=(0, 3), column_first=True)


def play(env: Any, task: str, read: Callable[[], str], out: TextIO, *, echo: bool = True,
         width: int | None = None) -> int:
    """Run the loop; returns 0 when the task was won, 1 otherwise.

    ``echo``: print each command read as ``> command`` (for input the terminal does not show);
    ``width``: the output's width in columns (default: the terminal's, else 80).
    """
    console = Console(file=out, width=width, highlight=False, emoji=False)

    def show(text: Any = "", style: str = "", *, one_line: bool = False) -> None:
        # a command (hint, echo) stays one line even if the terminal wraps it: it is copied
        # from there; observations are wrapped at word boundaries
        console.print(text if isinstance(text, Text) else safe_text(text, style), soft_wrap=one_line)

    obs, info = env.reset(task)
    show(obs)
    show("(type a command or its number; 'hint' for the oracle's next action, 'quit' to leave)", "dim")
    moved = False
    fresh = True
    while True:
        adm = info.get("admissible")
        if adm and fresh:
            show()
            show("admissible:", "bold")
            console.print(admissible_list(adm))
        fresh = False
        try:
            typed = read().strip()
        except EOFError:
            return 1
        if typed in ("quit", "exit"):
            return 1
        if typed == "hint":
            h = _hint(env, task, moved)
            show(f"hint: {h}" if h else "hint: none available", one_line=True)
            continue
        line = typed
        if typed.isdigit() and adm and 1 <= int(typed) <= len(adm):
            line = adm[int(typed) - 1]
        if echo:
            show(f"> {line}", one_line=True)
        elif line != typed:
            show(f"→ {line}", "dim", one_line=True)
        obs, reward, terminated, truncated, info = env.step(line)
        done = terminated or truncated
        moved = fresh = True
        show(obs)
        if info.get("error"):
            show(f"(rejected: {info.get('error_kind') or 'error'})", "yellow")
        if done:
            won = bool(info.get("won"))
            show()
            show(f"{'WON' if won else 'episode over (not won)'} after {info.get('steps', '?')} steps, reward {reward}",
                 "bold green" if won else "bold")
            return 0 if won else 1


def cmd_play(args: argparse.Namespace) -> int:
    if args.backend and args.env != "household":
        raise ProasError(f"--backend applies to household only, not {args.env}")
    kwargs = {"backend": args.backend} if args.backend else {}
    env = envs.make(args.env, **kwargs)
    # a terminal shows what is typed after the prompt; piped input shows nothing, so the loop
    # prints the command instead, and a prompt would only clutter the transcript
    interactive = sys.stdin.isatty()
    play(env, args.task, lambda: input("> " if interactive else ""), sys.stdout, echo=not interactive)
    return 0  # quitting or losing a game is not a command failure


#: the household env's engines (``HouseholdEnv(backend=...)``)
HOUSEHOLD_BACKENDS = ("fast", "alfworld")


def cmd_tasks(args: argparse.Namespace) -> int:
    env = envs.make(args.env)
    ids = env.task_ids(args.split)
    for task_id in ids:
        print(task_id)
    print(f"{len(ids)} tasks in {args.env}'s {args.split} split", file=sys.stderr)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("play", help="play one task of an environment in the terminal")
    p.add_argument("env", metavar="ENV", choices=envs.names(), help=f"environment: {', '.join(envs.names())}")
    p.add_argument("--task", required=True, metavar="TASK_ID",
                   help="task id, e.g. train-pick-0007 for household (`proas tasks ENV` lists them)")
    p.add_argument("--backend", default=None, choices=HOUSEHOLD_BACKENDS,
                   help="household's engine: fast (the simulator, default) or alfworld (the real engine)")
    p.set_defaults(func=cmd_play)

    t = sub.add_parser("tasks", help="list the task ids of an environment's split, one a line",
                       description="List the task ids of one split of an environment (for `proas play --task`, "
                                   "task sets and `algo.graph.oracle_tasks`), one a line; the count goes to stderr.")
    t.add_argument("env", metavar="ENV", choices=envs.names(), help=f"environment: {', '.join(envs.names())}")
    t.add_argument("--split", default="valid", metavar="SPLIT",
                   help="; ".join(f"{spec.name}: {spec.splits}" for spec in envs.ENVS.values()) + " (default valid)")
    t.set_defaults(func=cmd_tasks)
