"""``proas credit`` (offline credit over trajectory logs) and ``proas credit-demo``."""

from __future__ import annotations

import argparse
import json
import os
from importlib import resources
from pathlib import Path

from proas.credit.annotate import REA_RULES
from proas.credit.estimators import GROUP_STATS
from proas.credit.graph import ReferenceGraph
from proas.credit.pipeline import CreditResult, compute_credit
from proas.credit.registry import (
    SHAPING_OPTIONS,
    SHAPINGS,
    estimator_choices,
    estimator_name,
    estimator_spec,
    estimators_taking,
)
from proas.errors import ProasError
from proas.fileio import atomic_write_all, check_output_path, open_regular
from proas.ranges import seed
from proas.termtext import printable
from proas.types import Trajectory, TrajectoryFormatError


def read_trajectories(path: str | Path) -> list[Trajectory]:
    """Read one trajectory per line (blank lines skipped); errors name the line.

    ``(group, trajectory)`` ids must be unique: a repeated one would be counted twice in its
    group's statistics.
    """
    path = Path(path)
    try:  # a regular file only: a FIFO in its place would block the read for ever
        with open_regular(path, follow_symlinks=True) as fh:
            text = fh.read().decode("utf-8")
    except FileNotFoundError:
        raise ProasError(f"file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProasError(f"cannot read {path}: {exc}") from None
    out = []
    first_line: dict[tuple[str, str], int] = {}
    # JSONL: a record ends at "\n" only. ``str.splitlines`` also cuts at U+2028, U+2029 and
    # \x85, which JSON allows raw inside a string (json.dumps(..., ensure_ascii=False) writes them so)
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ProasError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
        except (ValueError, RecursionError) as exc:  # a number of too many digits; nesting too deep
            raise ProasError(f"{path}:{lineno}: invalid JSON ({type(exc).__name__})") from None
        try:
            traj = Trajectory.from_json(obj, where=f"{path}:{lineno}")
        except TrajectoryFormatError as exc:
            raise ProasError(str(exc)) from None
        seen = first_line.setdefault((traj.group, traj.trajectory), lineno)
        if seen != lineno:
            raise ProasError(f"{path}:{lineno}: group {traj.group!r}, trajectory {traj.trajectory!r} "
                             f"repeats line {seen}; ids must be unique")
        out.append(traj)
    return out


def credit_rows(trajectories: list[Trajectory], res: CreditResult) -> list[dict]:
    rows = []
    for i, traj in enumerate(trajectories):
        base = int(res.offsets[i])
        for t in range(len(traj.steps)):
            k = base + t
            rows.append(
                {
                    "group": traj.group,
                    "trajectory": traj.trajectory,
                    "t": t,
                    "rea": int(res.rea[k]),
                    "pa": int(res.pa[k]),
                    "fd": int(res.fd[k]),
                    "base_advantage": float(res.base_advantage[k]),
                    "advantage": float(res.advantage[k]),
                }
            )
    return rows


def _parse_options(pairs: list[str] | None, what: str) -> dict:
    opts = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ProasError(f"{what} option {pair!r} must look like key=value")
        try:
            opts[key] = json.loads(raw)
        except json.JSONDecodeError:
            opts[key] = raw
    return opts


def _check_outputs(args: argparse.Namespace) -> list[tuple[str, str]]:
    """``(flag, path)`` of every output, checked before any work (no half-done runs)."""
    outputs = [(flag, path) for flag, path in (("--out", args.out), ("--save-graph", args.save_graph),
                                               ("--export-graph", args.export_graph)) if path]
    seen: dict[str, str] = {}
    for flag, path in outputs:
        check_output_path(path, flag)
        real = os.path.realpath(path)
        if real in seen:
            raise ProasError(f"{seen[real]} and {flag} name the same file {path}")
        seen[real] = flag
    # an output over an input would replace what was read (the trajectory log) with what was
    # written; --save-graph over --graph is the one overlap meant: the grown graph replaces it
    inputs = [(flag, path) for flag, path in (("--trajectories", args.trajectories), ("--build-from", args.build_from),
                                              ("--graph", args.graph)) if path]
    for flag, path in outputs:
        for in_flag, in_path in inputs:
            if (flag, in_flag) != ("--save-graph", "--graph") and os.path.realpath(in_path) == os.path.realpath(path):
                raise ProasError(f"{flag} names the input of {in_flag} ({path}); writing it would replace the input")
    if args.export_graph:
        ReferenceGraph.export_format(args.export_graph)
    return outputs


def cmd_credit(args: argparse.Namespace) -> int:
    _check_outputs(args)
    trajectories = read_trajectories(args.trajectories)
    if args.graph and args.build_from:
        raise ProasError("give either --graph or --build-from, not both")
    if args.graph:
        graph = ReferenceGraph.load(args.graph)
    elif args.build_from:
        graph = ReferenceGraph.from_trajectories(read_trajectories(args.build_from))
    elif args.static:
        raise ProasError("a static graph needs --graph or --build-from")
    else:
        graph = ReferenceGraph()
    est_opts = _parse_options(args.estimator_option, "estimator")
    args.estimator = estimator_name(args.estimator)  # ppo is gae
    grouped = estimator_spec(args.estimator).takes("group_stats")
    if args.group_stats is not None and not grouped:
        raise ProasError(f"--group-stats does not apply to estimator {args.estimator!r} "
                         f"(it applies to: {', '.join(sorted(estimators_taking('group_stats')))})")
    if grouped:
        if args.group_stats is not None and est_opts.get("group_stats", args.group_stats) != args.group_stats:
            raise ProasError("--group-stats and --estimator-option group_stats=... disagree")
        est_opts.setdefault("group_stats", args.group_stats or GROUP_STATS[0])
    try:
        res = compute_credit(
            trajectories,
            graph,
            estimator=args.estimator,
            shaping=args.shaping,
            estimator_options=est_opts,
            shaping_options=_parse_options(args.shaping_option, "shaping"),
            seed=args.seed,
            evolve=not args.static,
            rea=args.rea,
        )
    except (ValueError, TypeError) as exc:
        raise ProasError(str(exc).splitlines()[0]) from None
    rows = "".join(json.dumps(row, separators=(",", ":")) + "\n" for row in credit_rows(trajectories, res))
    files = [(args.out, rows.encode("utf-8"))]
    if args.save_graph:
        files.append((args.save_graph, graph.to_bytes(args.save_graph)))
    if args.export_graph:
        files.append((args.export_graph, graph.export_bytes(args.export_graph)))
    atomic_write_all(files)  # every output or none
    n_steps = int(res.offsets[-1])
    print(
        f"wrote {_count(n_steps, 'step')} of {_count(len(trajectories), 'trajectory', 'trajectories')} to "
        f"{printable(args.out, newlines=False)} "
        f"(graph: {graph.num_nodes} nodes, {graph.num_edges} edges)"
    )
    return 0


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


DEMO_FILE = "household_demo.jsonl"


def cmd_credit_demo(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    source = resources.files("proas.data.examples").joinpath(DEMO_FILE)
    with resources.as_file(source) as path:
        trajectories = read_trajectories(path)
    oracle = [t for t in trajectories if t.group == "oracle"]
    batch = [t for t in trajectories if t.group != "oracle"]
    graph = ReferenceGraph.from_trajectories(oracle)
    console = Console()
    console.print(
        f"[bold]ARG[/bold] built from {len(oracle)} oracle trajectories: "
        f"{graph.num_nodes} nodes, {graph.num_edges} edges; batch of {len(batch)} trajectories, "
        f"estimator {args.estimator}, shaping proas (graph evolves with the batch's successes)"
    )
    res = compute_credit(batch, graph, estimator=args.estimator, shaping="proas", evolve=True)
    shown = [next(i for i, t in enumerate(batch) if t.success), next(i for i, t in enumerate(batch) if not t.success)]
    for i in shown:
        traj = batch[i]
        title = f"{traj.trajectory} ({'success' if traj.success else 'failure'}, reward {traj.reward:g})"
        table = Table(title=title, title_justify="left")
        for col in ("t", "action", "next state", "err", "Rea", "PA", "FD", "base A", "ProAS A"):
            table.add_column(col, justify="right" if col not in ("action", "next state") else "left")
        lo = int(res.offsets[i])
        for t, step in enumerate(traj.steps):
            k = lo + t
            base, new = res.base_advantage[k], res.advantage[k]
            style = "red" if abs(new) < abs(base) - 1e-9 else ("green" if abs(new) > abs(base) + 1e-9 else "")
            table.add_row(
                str(t),
                step.action,
                step.next_state.split("|", 1)[-1],
                "x" if step.error else "",
                str(res.rea[k]),
                str(res.pa[k]),
                str(res.fd[k]),
                f"{base:+.3f}",
                f"[{style}]{new:+.3f}[/{style}]" if style else f"{new:+.3f}",
            )
        console.print(table)
    console.print(
        "MUI zeroes the reward of unreasonable steps (Rea = 0) in the successful trajectory; "
        "APR moves the failed trajectory's penalty towards steps with high Future-Drift (FD)."
    )
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "credit",
        help="ProAS credit for trajectory logs (JSONL in, per-step JSONL out)",
        description="Annotate and shape the advantages of a batch of logged trajectories. Each input "
                    'line is one trajectory, {"group", "trajectory", "reward", "steps": [{"state", "action", '
                    '"next_state", "error"}, ...]}, with abstract states; each output line is one step, with '
                    "its rea, pa, fd, base_advantage and advantage. Without --graph or --build-from the "
                    "reference graph is built from the input's own successes (docs/credit.md, \"On your own "
                    'logs").',
    )
    p.add_argument("--trajectories", required=True, metavar="FILE", help="input JSONL, one trajectory per line")
    p.add_argument("--out", required=True, metavar="FILE", help="output JSONL, one line per step")
    p.add_argument("--graph", metavar="FILE", help="load the reference graph from this file")
    p.add_argument("--build-from", metavar="FILE",
                   help="build the graph from the successful trajectories of this JSONL")
    p.add_argument("--save-graph", metavar="FILE", help="save the graph (after merging the input's successes) here")
    p.add_argument("--export-graph", metavar="FILE", help="also export the graph for viewing (.graphml or .dot)")
    p.add_argument("--estimator", default="grpo", choices=estimator_choices(),
                   help="base estimator, A_i and B_i,t (docs/credit.md; ppo and gae are one estimator)")
    p.add_argument("--shaping", default="proas", choices=list(SHAPINGS),
                   help="how the base advantage is reshaped: proas (the method), none, or an ablation")
    p.add_argument("--static", action="store_true",
                   help="do not merge the input's successful trajectories into the graph (the Static ARG)")
    p.add_argument("--rea", default=REA_RULES[0], choices=list(REA_RULES),
                   help="reasonableness rule: (s_t, s_t+1) is an ARG edge (transition, default), "
                        "(s_t, a_t) labels an ARG edge (state_action), or s_t+1 is a node (node)")
    p.add_argument("--group-stats", choices=list(GROUP_STATS), default=None,
                   help="group mean/std over the group's step rows (steps, verl-agent's default) "
                        f"or one sample per trajectory (trajectories); {', '.join(estimators_taking('group_stats'))}")
    p.add_argument("--seed", type=seed(), default=0, help="seed of the random-label ablation")
    p.add_argument("--estimator-option", action="append", metavar="KEY=VALUE",
                   help="an option of the estimator, e.g. gamma=0.95 (docs/credit.md lists them)")
    p.add_argument("--shaping-option", action="append", metavar="KEY=VALUE",
                   help=f"an option of the shaping: {', '.join(SHAPING_OPTIONS)} (docs/credit.md, \"Shaping\")")
    p.set_defaults(func=cmd_credit)

    d = sub.add_parser("credit-demo", help="show ProAS credit on shipped example trajectories")
    d.add_argument("--estimator", default="grpo", choices=estimator_choices(), help="base estimator")
    d.set_defaults(func=cmd_credit_demo)
