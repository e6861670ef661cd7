"""The ``proas`` command.

Each subsystem owns its subcommands: a module listed in ``COMMAND_MODULES`` exposes
``register(subparsers)`` and sets ``func`` on the parsers it adds. A ``ProasError`` (bad input,
missing or corrupt file, malformed config) becomes one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from proas.errors import ProasError

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
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except ProasError as exc:
        print(f"proas: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("proas: interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
