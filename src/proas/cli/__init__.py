"""The ``proas`` command: the front door, on the top floor.

Each subsystem owns its subcommands in a ``cli`` module that exposes ``register(subparsers)``
and sets ``func`` on the parsers it adds; ``COMMANDS`` below lists those modules, imported by
name, so that a reader and the import linter (``lint-imports``) see every arrow from here. One
set of commands stands in this package instead: ``proas lm`` (``proas.cli.lm``). The ``lm``
package sits below the trainer, which trains it, while its commands read a run (``export``) and
walk the oracle over a training config (``tokenizer``): work of the trainer and the baselines,
which a module of the ``lm`` package could not import without a loop between the floors. The
command modules import only what their parsers need (argparse, the registries of names); what a
command runs (torch, the trainer, an env's data) is imported inside its function, so ``--help``
and a config typo answer before any of it loads (``benchmarks/cli_start.py``,
``tests/test_cli_usability.py``).

A ``ProasError`` (bad input, missing or corrupt file, malformed config) becomes one line on
stderr and exit status 2, its control and bidi characters escaped (``proas.termtext.printable``).
So does every error of the operating system (an ``OSError`` with an ``errno``): a path that is
missing (``ENOENT``), a file where a folder should be or below one (``ENOTDIR``, ``EISDIR``),
a loop of links (``ELOOP``), a name too long, and a write the storage refuses (a full disk, a
read-only or forbidden folder: ``STORAGE_ERRNOS``), where the line adds that every file proas
writes is written atomically, so what was complete before the failure (a run's last complete
checkpoint) is intact, and ``--resume`` continues from there once there is room. A closed pipe
on stdout (``proas tasks | head``) ends the command quietly with status 141, as a shell's.
"""

from __future__ import annotations

import argparse
import errno
import gc
import sys

from proas.baselines import cli as baselines_cli
from proas.cli import lm as lm_cli
from proas.credit import cli as credit_cli
from proas.envs import cli as envs_cli
from proas.envs.household import cli as household_cli
from proas.errors import ProasError
from proas.experiments import cli as experiments_cli
from proas.inspect import cli as inspect_cli
from proas.integrations.verl import cli as verl_cli
from proas.probes import cli as probes_cli
from proas.tasksets import cli as tasksets_cli
from proas.termtext import printable
from proas.train import cli as train_cli

#: the command modules, in the order ``proas --help`` lists their commands
COMMANDS = (
    credit_cli,  # credit, credit-demo
    tasksets_cli,  # schedule make | make-tuning-val | verify
    envs_cli,  # play, tasks
    household_cli,  # household export
    train_cli,  # train, eval
    experiments_cli,  # experiment, report, heldout
    inspect_cli,  # inspect
    baselines_cli,  # direct, sft, serve, react
    probes_cli,  # probe stats | esr | fd
    lm_cli,  # lm export | tokenizer | new-model
    verl_cli,  # verl build-graph
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="proas",
        description="Progress-aware advantage shaping for multi-turn agentic RL.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in COMMANDS:
        module.register(sub)
    _conventions(parser)
    return parser


def _conventions(parser: argparse.ArgumentParser) -> None:
    """The help's conventions, applied to every command in one place (checked by
    tests/test_cli_usability.py): subcommands are named COMMAND; a whole number that its command
    does not name is N (SEED for a seed, PORT for a port), a temperature T; and every option
    with a default says it. A number's type is a ``proas.ranges.Number`` (its range checked as
    it is parsed), whose ``kind`` is ``int`` or ``float``. A command registered without a
    description opens its ``--help`` with the line its parent's list gives it, so that ``proas
    eval --help`` says what the command does, as ``proas --help`` does."""
    for _, command in walk(parser):
        for a in command._actions:
            _convention(a)
            if isinstance(a, argparse._SubParsersAction):
                for listed in a._choices_actions:
                    sub = a.choices[listed.dest]
                    if not sub.description and listed.help:
                        text = listed.help[0].upper() + listed.help[1:]
                        sub.description = text if text.endswith(".") else text + "."


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """``(command path, parser)`` of ``parser`` and of every command and subcommand below it,
    parents before their children (``()`` for ``parser`` itself)."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, path + (name,))


def _convention(a: argparse.Action) -> None:
    """``_conventions`` for one action of one command."""
    if isinstance(a, argparse._SubParsersAction):
        a.metavar = "COMMAND"
        return
    if isinstance(a, argparse._HelpAction) or a.nargs == 0:
        return
    if a.metavar is None and a.choices is None:
        kind = getattr(a.type, "kind", a.type)
        if kind is int:
            a.metavar = "SEED" if "seed" in a.dest else "PORT" if a.dest == "port" else "N"
        elif kind is float and "temperature" in a.dest:
            a.metavar = "T"
    if (a.option_strings and a.help and a.default is not None and a.default is not argparse.SUPPRESS
            and "default" not in a.help):  # (a default of 0 is shown too: `0 in (None, False)` holds)
        a.help += " (default: %(default)s)"


#: the errors of a storage that refuses a write: full (``ENOSPC``, ``EDQUOT``, ``EFBIG``),
#: read-only (``EROFS``), forbidden (``EACCES``, ``EPERM``) or failing (``EIO``)
STORAGE_ERRNOS = frozenset(
    getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EFBIG", "EROFS", "EACCES", "EPERM", "EIO")
    if hasattr(errno, name)
)


def _os_error(exc: OSError) -> str:
    """The one line of an operating system's error: what it says and the path(s) it names, and,
    for a storage that refuses a write, that what was complete before is intact."""
    paths = [str(p) for p in (exc.filename, exc.filename2) if p is not None]
    where = f" ({' -> '.join(paths)})" if paths else ""
    line = f"{exc.strerror or exc}{where}"
    if exc.errno in STORAGE_ERRNOS:
        line += "; every file completed before is intact (a run resumes with --resume)"
    return line


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except ProasError as exc:
        print(f"proas: error: {printable(exc, newlines=False)}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.errno is None:  # not the system's: a library's own message, which says more with its traceback
            raise
        if exc.errno == errno.EPIPE:  # the reader of our output went away (``proas tasks | head``)
            _quiet_stdout()
            return 141  # 128 + SIGPIPE, as a shell reports a command killed by the broken pipe
        print(f"proas: error: {printable(_os_error(exc), newlines=False)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("proas: interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it on the way out does not fail again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # (a stdout without a file descriptor: nothing to flush into a pipe)
        pass


def run() -> int:
    """``main`` as a process's entry point (the ``proas`` script, ``python -m proas``), which ends
    the process with its exit status.

    What the command leaves alive (a run's games, kept states and caches: millions of objects)
    is then moved out of the garbage collector's generations (``gc.freeze``): the interpreter's
    passes over them on the way out took seconds after a household run, to free what the
    process's end frees anyway. Nothing is written after ``main`` returns (every file proas
    writes is closed by then), so this changes nothing but the time to exit. ``main`` itself,
    called in-process (tests, a notebook), leaves the collector as it was.
    """
    rc = main()
    gc.freeze()
    return rc
