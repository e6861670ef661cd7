"""`proas household export`: write generated tasks as ALFWorld game directories.

The output is laid out as ALFWorld's data (``<out>/<split>/<task_type>/<task_id>/`` with
``traj_data.json`` and ``game.tw-pddl``, ``solvable: true`` and the oracle walkthrough), so
ALFWorld's own tools (``AlfredTWEnv`` with ``dataset.data_path`` pointing there,
``alfworld-play-tw``) play them unchanged. ``--logic DIR`` also writes the PDDL domain and the
grammar those tools read from ``$ALFWORLD_DATA/logic`` (``alfred.pddl``, ``alfred.twl2``, as the
``alfworld`` package ships them), so ``$ALFWORLD_DATA`` needs nothing from ``alfworld-download``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from proas.envs.household.env import OFFICIAL_PREFIX, game_file, task_ids
from proas.envs.household.generator import parse_task_id
from proas.errors import ProasError
from proas.fileio import atomic_write_text
from proas.ranges import integer


def cmd_export(args: argparse.Namespace) -> int:
    ids = list(args.task) if args.task else task_ids(args.split)
    official = [t for t in ids if t.startswith(OFFICIAL_PREFIX)]
    if official:
        raise ProasError(f"--task {official[0]!r}: an official ALFWorld game already lies under $ALFWORLD_DATA; "
                         "export writes generated tasks only")
    if args.per_type is not None:
        # a split lists its tasks type by type, so a plain --limit takes the first types only
        taken: dict[str, int] = {}
        kept = []
        for task_id in ids:
            short = parse_task_id(task_id)[1]
            if taken.get(short, 0) < args.per_type:
                taken[short] = taken.get(short, 0) + 1
                kept.append(task_id)
        ids = kept
    if args.limit is not None:
        ids = ids[: args.limit]
    for task_id in ids:
        game_file(task_id, args.out)
    print(f"wrote {len(ids)} ALFWorld game directories under {args.out}")
    if args.logic is not None:
        from proas.envs.household.generator import domain_and_grammar

        domain, grammar = domain_and_grammar()
        atomic_write_text(Path(args.logic) / "alfred.pddl", domain)
        atomic_write_text(Path(args.logic) / "alfred.twl2", grammar)
        print(f"wrote alfred.pddl and alfred.twl2 under {args.logic}")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("household", help="household (ALFWorld) environment tools")
    hsub = p.add_subparsers(dest="household_command", metavar="COMMAND")
    hsub.required = True
    ex = hsub.add_parser("export", help="write generated tasks as ALFWorld game directories")
    ex.add_argument("--out", required=True, metavar="DIR", help="output directory (an ALFWorld data_path)")
    ex.add_argument("--split", default="valid", choices=("train", "valid_seen", "valid_unseen", "valid"),
                    help="the split to export (default valid, the fixed 128)")
    ex.add_argument("--task", action="append", metavar="TASK_ID", help="a task id (repeatable); overrides --split")
    ex.add_argument("--per-type", type=integer("[1, INT32]"), default=None, metavar="N",
                    help="export only the first N tasks of each task type (a split lists its tasks type by type)")
    ex.add_argument("--limit", type=integer("[0, INT32]"), default=None, help="export only the first N tasks")
    ex.add_argument("--logic", metavar="DIR", default=None,
                    help="also write ALFWorld's domain and grammar (alfred.pddl, alfred.twl2) here: "
                         "$ALFWORLD_DATA/logic, where AlfredTWEnv's config reads them")
    ex.set_defaults(func=cmd_export)
