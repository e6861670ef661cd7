"""``proas probe stats|esr|fd`` (docs/probes.md)."""

from __future__ import annotations

from pathlib import Path

from proas.errors import ProasError
from proas.ranges import integer, number, seed


def register(sub) -> None:
    p = sub.add_parser("probe", help="the paper's motivation probes (stats, esr, fd)")
    ps = p.add_subparsers(dest="probe", metavar="COMMAND")
    ps.required = True

    s = ps.add_parser("stats", help="unreasonable steps in successes, NA steps in failures, over training")
    s.add_argument("runs", nargs="+", metavar="RUN_DIR", help="training runs (their checkpoints and rollout logs)")
    s.add_argument("--out", required=True, metavar="DIR", help="where stats.csv/.md/.png go")
    s.add_argument("--tasks", type=integer("[1, 2**16]"),
                   default=32, help="training tasks per checkpoint (fresh rollouts only)")
    s.add_argument("--group", type=integer("[1, 2**16]"), default=4, help="rollouts per task (fresh rollouts only)")
    s.add_argument("--seed", type=seed(), default=0, help="seed of the fresh rollouts")
    s.set_defaults(func=_stats)

    for name, helptext in (("esr", "ESR with vs without an injected segment of K unreasonable actions"),
                           ("fd", "recovered ESR after forbidding actions of different Future-Drift")):
        e = ps.add_parser(name, help=helptext)
        e.add_argument("target", metavar="RUN_DIR|CHECKPOINT", help="the policy (proas eval's resolution)")
        e.add_argument("--out", required=True, metavar="DIR", help=f"where {name}.csv/.md/.png go")
        e.add_argument("--tasks", type=integer("[1, 2**16]"),
                       default=8, help="validation tasks to probe, evenly spaced over "
                       "the validation set (default 8)")
        e.add_argument("--n", type=integer("[1, 2**16]"), default=50, help="continuations per state (default 50)")
        e.add_argument("--temperature", type=number("[0, F32]"), default=None, help="sampling temperature "
                       "(default: the run's policy.temperature)")
        e.add_argument("--seed", type=seed(), default=0, help="seed of the sampled continuations")
        if name == "esr":
            e.add_argument("--k", type=integer("[1, 2**16]"), action="append", default=None,
                           help="length of the injected segment; repeat for several (default 4)")
            e.add_argument("--cut", type=number("[0, 1)"), default=0.5, metavar="FRACTION",
                           help="the clean prefix: this fraction of the oracle walkthrough (default 0.5)")
            e.set_defaults(func=_esr)
        else:
            e.add_argument("--rollouts", type=integer("[1, 2**16]"),
                           default=2, help="episodes per task to find failures")
            e.add_argument("--points", type=integer("[1, 2**16]"),
                           default=4, help="suppression points per failed trajectory")
            e.add_argument("--graph", default=None, metavar="FILE", help="reference graph file (default: the "
                           "checkpoint's, else the oracle graph of the training tasks)")
            e.set_defaults(func=_fd)


def spread(ids: list[str], n: int) -> list[str]:
    """``n`` of ``ids`` evenly spaced over the list (validation sets are ordered by task type)."""
    if n >= len(ids):
        return list(ids)
    import numpy as np

    return [ids[i] for i in np.linspace(0, len(ids) - 1, n).round().astype(int)]


def _check_out(out: Path) -> Path:
    """``--out`` checked before any work: an existing folder, or a path whose folder can be
    made (a path that is a file, or below one, fails fast). The folder itself is made only once
    there is something to write, so a failed probe leaves no empty ``--out`` behind."""
    from proas.fileio import check_output_path, refuse_non_directory

    refuse_non_directory(out, "--out")
    if not out.is_dir():
        check_output_path(out, "--out")
    return out


def _setup(args):
    from proas.baselines.common import env_name, load_policy, validation_ids
    from proas.envs import make_factory

    out = _check_out(Path(args.out))
    policy, cfg, directory, _ = load_policy(args.target)
    make = make_factory(cfg.env.name, cfg.env.options, config=True)
    env0 = make()
    ids = spread(validation_ids(cfg, env0) or list(env0.task_ids("valid")), args.tasks)
    temp = cfg.policy.temperature if args.temperature is None else args.temperature
    return policy, cfg, directory, make, env0, ids, temp, out, env_name(cfg, env0)


def _stats(args) -> int:
    from proas.probes.report import line_plot, write_table
    from proas.probes.stats import run_stats

    out = _check_out(Path(args.out))
    all_rows = []
    series = {}
    for run in args.runs:
        rows = run_stats(Path(run), tasks=args.tasks, group=args.group, seed=args.seed)
        label = Path(run).name
        for r in rows:
            r["run"] = label
        all_rows += rows
        for key, short in (("unreasonable_in_success", "unreasonable in successes"),
                           ("na_in_failure", "NA in failures")):
            pts = [(r["step"], r[key]) for r in rows if r[key] is not None]
            if pts:
                series[f"{label}: {short}"] = tuple(zip(*pts))
    out.mkdir(parents=True, exist_ok=True)
    write_table(all_rows, out / "stats", ["run", "step", "unreasonable_in_success", "na_in_failure", "train_sr",
                                          "source"])
    line_plot(out / "stats.png", series, xlabel="RL step", ylabel="share of steps (%)",
              title="Unreasonable steps in successful and NA steps in failed trajectories")
    for label in dict.fromkeys(r["run"] for r in all_rows):
        sel = [r for r in all_rows if r["run"] == label]
        u = [r["unreasonable_in_success"] for r in sel if r["unreasonable_in_success"] is not None]
        n = [r["na_in_failure"] for r in sel if r["na_in_failure"] is not None]
        print(f"{label}: {len(sel)} points ({sel[0]['source']}); unreasonable in successes "
              f"{_pct(sum(u) / len(u) if u else None)}, NA in failures {_pct(sum(n) / len(n) if n else None)} (mean)")
    print(f"table: {out / 'stats.csv'}  plot: {out / 'stats.png'}")
    return 0


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _esr(args) -> int:
    from rich.console import Console

    from proas.fileio import atomic_write_json
    from proas.probes.esr import esr_probe, summarise_esr
    from proas.probes.report import bar_plot, write_table

    policy, cfg, directory, make, env0, ids, temp, out, label = _setup(args)
    ks = args.k or [4]
    console = Console(stderr=True)
    rows = esr_probe(policy, make, ids, env_name=label, max_steps=int(cfg.env.max_steps or env0.max_steps), n=args.n,
                     ks=ks, cut=args.cut, temperature=temp, seed=args.seed, progress=console.print)
    if not rows:
        raise ProasError("esr probe: every probed task was already won at the cut; lower --cut")
    summary = summarise_esr(rows)
    out.mkdir(parents=True, exist_ok=True)
    write_table(rows, out / "esr", ["task_id", "task_type", "prefix", "k", "n", "budget", "same_state",
                                    "esr_clean", "esr_injected", "steps_clean", "steps_injected", "injected"])
    write_table(summary, out / "esr_summary")
    bar_plot(out / "esr.png", [f"K = {s['k']}" for s in summary],
             {"clean context": [s["esr_clean"] for s in summary],
              "injected unreasonable segment": [s["esr_injected"] for s in summary]},
             errors={"clean context": [s["se_clean"] for s in summary],
                     "injected unreasonable segment": [s["se_injected"] for s in summary]},
             ylabel=f"ESR over {args.n} continuations (%)",
             title=f"{cfg.env.name}: ESR from identical states, {len(ids)} tasks ({directory})")
    atomic_write_json(out / "esr.json", {"checkpoint": str(directory), "n": args.n, "temperature": temp,
                                         "cut": args.cut, "summary": summary})
    for s in summary:
        print(f"K={s['k']}: ESR clean {100 * s['esr_clean']:.1f}%  injected {100 * s['esr_injected']:.1f}%  "
              f"({s['tasks']} tasks, N={args.n})")
    print(f"table: {out / 'esr.csv'}  plot: {out / 'esr.png'}")
    return 0


def _fd(args) -> int:
    from rich.console import Console

    from proas.credit import ReferenceGraph
    from proas.fileio import atomic_write_json
    from proas.probes.fd import fd_bins, fd_probe, oracle_graph
    from proas.probes.report import bar_plot, write_table
    from proas.train import checkpoint as ckpt

    policy, cfg, directory, make, env0, ids, temp, out, label = _setup(args)
    max_steps = int(cfg.env.max_steps or env0.max_steps)
    if args.graph:
        graph = ReferenceGraph.load(args.graph)
    elif (directory / ckpt.GRAPH_FILE).exists():
        graph = ReferenceGraph.load(directory / ckpt.GRAPH_FILE)
    else:
        graph = oracle_graph(env0, list(env0.task_ids("train"))[:512], max_steps)
    console = Console(stderr=True)
    rows, counts = fd_probe(policy, make, ids, graph, env_name=label, max_steps=max_steps, n=args.n,
                            rollouts=args.rollouts, points=args.points, temperature=temp, seed=args.seed,
                            progress=console.print)
    if not rows:
        raise ProasError(f"fd probe: no failed trajectory in {counts['episodes']} episodes; probe more tasks")
    bins = fd_bins(rows)
    out.mkdir(parents=True, exist_ok=True)
    write_table(rows, out / "fd", ["task_id", "trajectory", "task_type", "t", "length", "fd", "pa", "action", "n",
                                   "esr", "forbid_failed"])
    write_table(bins, out / "fd_bins")
    bar_plot(out / "fd.png", [f"FD {b['fd_low']}–{b['fd_high']}" if b["fd_low"] != b["fd_high"] else f"FD {b['fd_low']}"
                              for b in bins], {"recovered ESR": [b["esr"] for b in bins]},
             ylabel=f"recovered ESR over {args.n} continuations (%)", xlabel="Future-Drift of the suppressed action",
             title=f"{cfg.env.name}: suppressing actions by FD, {counts['points']} points in {counts['failed']} "
                   "failed trajectories")
    atomic_write_json(out / "fd.json", {"checkpoint": str(directory), "n": args.n, "temperature": temp, **counts,
                                        "bins": bins})
    for b in bins:
        print(f"FD {b['fd_low']}-{b['fd_high']}: recovered ESR {100 * b['esr']:.1f}% ({b['points']} points)")
    print(f"table: {out / 'fd.csv'}  plot: {out / 'fd.png'}")
    return 0
