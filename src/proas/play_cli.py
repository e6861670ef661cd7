"""`proas play ENV --task ID`: play one task of an environment in the terminal.

Shows the observation and the admissible commands (when the env has them); a command is typed
as text or by its number in the list. ``hint`` prints the oracle's next action (``env.hint()``,
or the first step of ``env.oracle(task)`` before any move), ``quit`` leaves.

Envs are found by name in ``ENV_FACTORIES`` ("module:function", imported only when used); the
factory takes keyword options (``backend`` for household).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any, Callable, TextIO

from proas.errors import ProasError

ENV_FACTORIES: dict[str, str] = {
    "household": "proas.envs.household:make_household_env",
    "shop": "proas.envs.shop:make_shop_env",
}


def make_env(name: str, **kwargs: Any) -> Any:
    if name not in ENV_FACTORIES:
        raise ProasError(f"unknown env {name!r}; choose one of {sorted(ENV_FACTORIES)}")
    module_name, _, func_name = ENV_FACTORIES[name].partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), func_name)
    except (ImportError, AttributeError) as exc:
        raise ProasError(f"env {name!r} is not available ({exc})") from None
    return factory(**kwargs)


def _hint(env: Any, task: str, moved: bool) -> str | None:
    if hasattr(env, "hint"):
        return env.hint()
    if not moved:
        plan = env.oracle(task)
        return plan[0] if plan else None
    return None


def play(env: Any, task: str, read: Callable[[], str], out: TextIO) -> int:
    """Run the loop; returns 0 when the task was won, 1 otherwise."""
    obs, info = env.reset(task)
    print(obs, file=out)
    print("(type a command or its number; 'hint' for the oracle's next action, 'quit' to leave)", file=out)
    moved = False
    show = True
    while True:
        adm = info.get("admissible")
        if adm and show:
            print("\nadmissible: " + " | ".join(f"[{i}] {c}" for i, c in enumerate(adm, 1)), file=out)
        show = False
        try:
            line = read().strip()
        except EOFError:
            return 1
        if line in ("quit", "exit"):
            return 1
        if line == "hint":
            h = _hint(env, task, moved)
            print(f"hint: {h}" if h else "hint: none available", file=out)
            continue
        if line.isdigit() and adm and 1 <= int(line) <= len(adm):
            line = adm[int(line) - 1]
        obs, reward, done, info = env.step(line)
        moved = show = True
        print(f"> {line}\n{obs}", file=out)
        if info.get("error"):
            print(f"(rejected: {info.get('error_kind') or 'error'})", file=out)
        if done:
            won = bool(info.get("won"))
            print(f"\n{'WON' if won else 'episode over (not won)'} after {info.get('steps', '?')} steps, reward {reward}", file=out)
            return 0 if won else 1


def cmd_play(args: argparse.Namespace) -> int:
    kwargs = {"backend": args.backend} if args.backend else {}
    env = make_env(args.env, **kwargs)
    play(env, args.task, lambda: input("> "), sys.stdout)
    return 0  # quitting or losing a game is not a command failure


def register(sub: Any) -> None:
    p = sub.add_parser("play", help="play one task of an environment in the terminal")
    p.add_argument("env", help=f"environment: {', '.join(ENV_FACTORIES)}")
    p.add_argument("--task", required=True, help="task id, e.g. train-pick-0007 for household")
    p.add_argument("--backend", default=None, help="household: fast (default) or alfworld (the real engine)")
    p.set_defaults(func=cmd_play)
