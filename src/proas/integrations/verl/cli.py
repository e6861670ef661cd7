"""``proas verl build-graph`` (the initial reference graph of a verl-agent ProAS run) and
``proas verl sft-data`` (the SFT row's data)."""

from __future__ import annotations

import time

from proas.errors import ProasError
from proas.fileio import check_output_path
from proas.ranges import integer, number, seed


def cmd_build_graph(args) -> int:
    from proas.integrations.verl.verl_agent import build_graph

    check_output_path(args.out)
    t0 = time.perf_counter()
    graph = build_graph(args.env, args.variant, tasks=args.tasks, seed=args.seed, prune=args.prune,
                        source=getattr(args, "source", None))
    graph.save(args.out)
    meta = graph.meta
    built = f" from {meta['built_from']} trajectories" if "built_from" in meta else ""
    failed = f" ({meta['oracle_failed']} tasks the oracle did not win)" if meta.get("oracle_failed") else ""
    print(f"{args.variant} graph of {args.env}: {graph.num_nodes} states, {graph.num_edges} edges{built}{failed}, "
          f"{time.perf_counter() - t0:.1f}s -> {args.out}")
    print(f"use it with: proas.graph={args.out}")
    return 0


def cmd_sft_data(args) -> int:
    from proas.fileio import atomic_write_all
    from proas.integrations.verl.verl_agent import sft_examples

    # the format and its writer checked before the oracle's walk (22 s on household)
    check_output_path(args.out)
    out = str(args.out)
    if not out.endswith((".jsonl", ".parquet")):
        raise ProasError(f"--out {out}: give a .parquet (verl's SFT dataset) or a .jsonl name")
    if out.endswith(".parquet"):
        try:  # verl's SFT dataset reads parquet; pyarrow comes with verl, not with proas
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ProasError("writing parquet needs pyarrow (installed with verl); "
                             "or give --out a .jsonl name") from None
    rows = sft_examples(args.env, tasks=args.tasks)
    if out.endswith(".jsonl"):
        import json

        data = "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8")
    else:
        sink = pa.BufferOutputStream()  # written whole, then atomically, as every file proas writes
        pq.write_table(pa.Table.from_pylist(rows), sink)
        data = sink.getvalue().to_pybytes()
    atomic_write_all([(out, data)])
    print(f"{len(rows)} (prompt, response) rows from the oracle on {args.env}'s training tasks -> {args.out}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("verl", help="verl / verl-agent integration tools (build-graph)",
                       description="Tools for ProAS inside verl-agent (docs/verl.md).")
    vsub = p.add_subparsers(dest="verl_command", metavar="COMMAND")
    vsub.required = True
    g = vsub.add_parser(
        "build-graph",
        help="build and save the initial ARG of a run (oracle, incomplete or distill)",
        description="Build the Agentic Reference Graph a verl-agent ProAS run starts from and save it "
                    "(.json.gz). oracle: the oracle's walkthroughs of the env's training tasks; "
                    "incomplete: the same with --prune (0.4) of its state-action pairs removed; "
                    "distill: from a teacher run's saved graph or trajectory JSONL (--from).",
    )
    g.add_argument("--env", required=True, choices=["household", "shop"],
                   help="the env whose training tasks it replays")
    g.add_argument("--variant", default="oracle", choices=["oracle", "incomplete", "distill"],
                   help="which graph (see above)")
    g.add_argument("--out", required=True, metavar="FILE", help="where to save the graph, e.g. arg.json.gz")
    g.add_argument("--tasks", type=integer("[1, INT32]"), default=None, help="use only the first N training tasks")
    g.add_argument("--seed", type=seed(), default=0, help="seeds the incomplete variant's pruning")
    g.add_argument("--prune", type=number("[0, 1)"), default=0.4, metavar="FRACTION",
                   help="share of state-action pairs removed (incomplete)")
    g.add_argument("--from", dest="source", default=None, metavar="FILE",
                   help="distill: a saved graph (.json.gz/.json) or a trajectory JSONL")
    g.set_defaults(func=cmd_build_graph)
    s = vsub.add_parser(
        "sft-data",
        help="the SFT row's data: the oracle's walkthroughs as (prompt, response) rows",
        description="Write the oracle's walkthroughs of the env's training tasks as (prompt, response) "
                    "rows in the RL runs' prompt and answer format, for verl's SFT trainer (.parquet, "
                    "needs pyarrow) or as .jsonl.",
    )
    s.add_argument("--env", required=True, choices=["household", "shop"], help="the env whose training tasks it writes")
    s.add_argument("--out", required=True, metavar="FILE", help="sft.parquet or sft.jsonl")
    s.add_argument("--tasks", type=integer("[1, INT32]"), default=None, help="use only the first N training tasks")
    s.set_defaults(func=cmd_sft_data)

