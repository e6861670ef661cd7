"""The ``proas`` command.

Each subsystem owns its subcommands: a module listed in ``COMMAND_MODULES`` exposes
``register(subparsers)`` and sets ``func`` on the parsers it adds. A ``ProasError`` (bad input,
missing or corrupt file, malformed config) becomes one line on stderr and exit status 2, its
control and bidi characters escaped (``proas.termtext.printable``). So does a write the storage
refuses (a full disk, a read-only or forbidden folder: ``STORAGE_ERRNOS``): every file proas
writes is written atomically, so what was complete before the failure (a run's last complete
checkpoint) is intact, and ``--resume`` continues from there once there is room.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import sys

from proas.errors import ProasError
from proas.termtext import printable

COMMAND_MODULES = [
    "proas.credit.cli",
    "proas.tasksets_cli",
    "proas.play_cli",
    "proas.envs.household.cli",
    "proas.train.cli",
    "proas.experiments.cli",
    "proas.inspect.cli",
    "proas.baselines.cli",
    "proas.probes.cli",
    "proas.lm_cli",
    "proas.integrations.verl.cli",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="proas",
        description="Progress-aware advantage shaping for multi-turn agentic RL.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    _conventions(parser)
    return parser


def _conventions(parser: argparse.ArgumentParser) -> None:
    """The help's conventions, applied to every command in one place (checked by
    tests/test_cli_usability.py): subcommands are named COMMAND; a whole number that its command
    does not name is N (SEED for a seed, PORT for a port), a temperature T; and every option
    with a default says it."""
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            a.metavar = "COMMAND"
            for child in a.choices.values():
                _conventions(child)
            continue
        if isinstance(a, argparse._HelpAction) or a.nargs == 0:
            continue
        if a.metavar is None and a.choices is None:
            if a.type is int:
                a.metavar = "SEED" if "seed" in a.dest else "PORT" if a.dest == "port" else "N"
            elif a.type is float and "temperature" in a.dest:
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


def _storage_error(exc: OSError) -> str:
    where = f" ({exc.filename})" if exc.filename is not None else ""
    return f"{exc.strerror or exc}{where}; every file completed before is intact (a run resumes with --resume)"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except ProasError as exc:
        print(f"proas: error: {printable(exc, newlines=False)}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.errno not in STORAGE_ERRNOS:
            raise
        print(f"proas: error: {printable(_storage_error(exc), newlines=False)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("proas: interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
