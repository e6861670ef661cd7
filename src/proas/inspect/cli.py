"""``proas inspect RUN_DIR``: a logged batch's credit in the terminal, or as an HTML page.

The batch comes from ``RUN_DIR/rollouts/step_N.jsonl.gz`` (``write_rollouts``); the
reference graph for the page from ``--graph``, else the checkpoint of the same step, else the
run's latest checkpoint, else its best one.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from rich.console import Console

from proas.errors import ProasError
from proas.fileio import atomic_write_bytes
from proas.inspect.view import inspection, select
from proas.ranges import integer
from proas.rollout_log import read_rollouts
from proas.termtext import printable

GRAPH_FILE = "graph.json"


def find_graph(run_dir: Path, step: int) -> Path:
    """The reference graph to draw for ``step`` of a run (see the module docstring)."""
    same = run_dir / "checkpoints" / f"step_{step:06d}" / GRAPH_FILE
    if same.is_file():
        return same
    from proas.train.checkpoint import (
        latest_checkpoint,  # imports torch: only when a page is asked for
    )

    latest = latest_checkpoint(run_dir)
    if latest is not None and (latest / GRAPH_FILE).is_file():
        return latest / GRAPH_FILE
    best = run_dir / "best" / GRAPH_FILE
    if best.is_file():
        return best
    raise ProasError(f"{run_dir}: no checkpoint with a reference graph ({GRAPH_FILE}); pass --graph PATH")


def _readable(path: Path) -> None:
    """Give the page the permissions of a plain new file (the atomic write's temporary is 0600):
    it is meant to be shared."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def cmd_inspect(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    log = read_rollouts(run_dir, args.step)
    if args.html is None:
        view = inspection(log, args.task, args.trajectory, observations=args.observations or None)
        Console(width=args.width).print(view)
        return 0
    from proas.credit import ReferenceGraph
    from proas.inspect.html import render_html

    group, traj = select(log, args.task, args.trajectory)
    graph_path = Path(args.graph) if args.graph else find_graph(run_dir, log.step)
    graph = ReferenceGraph.load(graph_path)  # a missing or corrupt file is a GraphFileError (a ProasError)
    page = render_html(log, group, traj, graph, str(graph_path), max_nodes=args.max_nodes)
    # a lone surrogate (JSON can carry one into a state or an id) has no UTF-8 form: written as
    # its visible escape (\udXXX) instead of failing the page
    atomic_write_bytes(args.html, page.encode("utf-8", errors="backslashreplace"))
    _readable(Path(args.html))
    # ids and paths come from the log and the command line: shown with their control and bidi
    # characters escaped, never executed by the terminal
    shown = [printable(x, newlines=False) for x in (args.html, traj.task_id, traj.trajectory, graph_path)]
    print("wrote {}: step {}, task {}, trajectory {}, graph {}".format(shown[0], log.step, *shown[1:]))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("inspect", help="show why each step of a logged batch got its credit (terminal or HTML)")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a training run directory (with rollouts/)")
    p.add_argument("--step", type=integer("[0, INT32]"), default=None, metavar="STEP",
                   help="RL step to inspect (default: the newest logged)")
    p.add_argument("--task", default=None, metavar="TASK_ID", help="group id or task id (default: the most "
                   "informative group, "
                   "one with both wins and failures)")
    p.add_argument("--trajectory", default=None, metavar="ID", help="trajectory id, or its index in the group")
    p.add_argument(
        "--html", default=None, metavar="FILE.html", help="write a self-contained page with the reference graph"
    )
    p.add_argument("--graph", default=None, metavar="FILE", help="reference graph file (default: the run's checkpoint)")
    p.add_argument("--max-nodes", type=integer("[1, 2**20]"), default=300, metavar="N",
                   help="cap on the graph states drawn (default 300)")
    p.add_argument("--observations", action="store_true", help="show each step's observation in the step table "
                   "(needs about 160 columns; shown anyway from 180)")
    p.add_argument("--width", type=integer("[1, 10000]"),
                   default=None, metavar="N", help="terminal width (default: detected)")
    p.set_defaults(func=cmd_inspect)
