"""``proas experiment run|list`` (the grid runner) and ``proas report`` (tables and curves)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from proas.errors import ProasError
from proas.fileio import refuse_non_directory
from proas.ranges import SECONDS, integer, number, seed

RUN_HELP = """\
Run a study's grid of `proas train` runs in parallel processes.

CONFIG is a study config file or the name of a shipped study (`proas experiment list`).
Finished runs are skipped, interrupted ones resumed, so the same command can be repeated
until everything is done. Runs land in OUT/<env>/<row>/seed<N>/; `proas report OUT` then
writes the tables.
"""


def register(sub) -> None:
    p = sub.add_parser("experiment", help="run a study (one of the paper's tables) over seeds")
    esub = p.add_subparsers(dest="experiment_command", metavar="COMMAND")
    esub.required = True
    r = esub.add_parser("run", help="run a study's grid", description=RUN_HELP,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("config", metavar="CONFIG", help="study config (.yaml) or shipped study name")
    r.add_argument("--seeds", type=seed(), nargs="+", help="seeds (default: the study's)")
    r.add_argument("--rows", nargs="+", metavar="ROW", help="row ids to run (default: every runnable row)")
    r.add_argument("--envs", nargs="+", metavar="ENV", help="environments (default: the study's)")
    r.add_argument("--steps", type=integer("[1, INT32]"),
                   help="step budget (default: the study's; a smaller one is a reduced "
                   "setting and the report says so)")
    r.add_argument("--jobs", "-j", type=integer("[1, 4096]"), default=None, help="runs at a time (default: CPU cores)")
    r.add_argument("--out", default="results/runs", metavar="DIR", help="results directory (default: results/runs)")
    r.add_argument("--time-limit", type=number(SECONDS), metavar="SECONDS", help="stop every run after this long "
                   "(checkpoints kept; run the command again to resume)")
    r.add_argument("--dry-run", action="store_true", help="list the runs and their status, run nothing")
    r.set_defaults(func=_run)

    ls = esub.add_parser("list", help="list the shipped studies and their rows")
    ls.set_defaults(func=_list)

    rep = sub.add_parser("report", help="tables (Markdown, CSV) and learning curves of a results directory")
    rep.add_argument("results", metavar="RESULTS_DIR", help="the --out of `proas experiment run`")
    rep.add_argument("--out", metavar="DIR", help="where to write report.md, CSVs and PNGs (default: RESULTS_DIR)")
    rep.add_argument("--steps", type=integer("[1, INT32]"),
                     help="step budget for 'best checkpoint within' (default: each study's)")
    rep.add_argument("--studies", nargs="+", metavar="STUDY", help="only these saved studies")
    rep.add_argument("--no-plots", action="store_true", help="skip the PNG curves")
    rep.set_defaults(func=_report)

    h = sub.add_parser("heldout", help="the held-out study (docs/study-protocol.md): configs, tuning selection")
    hsub = h.add_subparsers(dest="heldout_command", metavar="COMMAND")
    hsub.required = True
    hc = hsub.add_parser("configs", help="write the tuning study configs from the protocol's constants")
    hc.add_argument("--check", action="store_true", help="only check that the shipped configs are up to date")
    hc.set_defaults(func=_heldout_configs)
    hs = hsub.add_parser("select", help="each arm's tuned setting from a tuning results directory")
    hs.add_argument("sources", nargs="+", metavar="SOURCE",
                    help="tuning results directories (the --out of `proas experiment run heldout_tune`) and/or "
                         "run-records CSVs (--records); a later source's run replaces an earlier one's")
    hs.add_argument("--start", choices=["random", "sft", "other"], default="random",
                    help="which tuning grid (default random; other: PPO and MiGPO from random weights)")
    hs.add_argument("--out", metavar="FILE", help="write the selection as Markdown here (default: print it)")
    hs.add_argument("--records", metavar="CSV", help="write every run's record (validation curve, tuning metric, "
                                                     "commit) here: the per-run data behind the selection")
    hs.add_argument("--extension", metavar="YAML", help="write the study of the grid's extension past an edge "
                                                        "for the arms that wait on it")
    hs.add_argument("--eval-config", metavar="YAML", help="write the evaluation study (every arm at its chosen "
                                                          "setting); refused while an arm has none")
    hs.add_argument("--eval-envs", nargs="+", metavar="ENV", default=None,
                    help="only these envs' arms in the evaluation study (default: both)")
    hs.add_argument("--ablation-config", metavar="YAML", help="write the ablation study (MUI only, APR only, "
                                                              "rea=node at GRPO+ProAS's setting)")
    hs.set_defaults(func=_heldout_select)
    ha = hsub.add_parser("analyse", help="per-seed CSV, paired intervals and verdicts of an evaluation grid")
    ha.add_argument("sources", nargs="+", metavar="SOURCE",
                    help="evaluation results directories (the --out of `proas experiment run heldout_main`) and/or "
                         "per-seed CSVs written by an earlier analyse; a later source's run replaces an earlier one's")
    ha.add_argument("--study", nargs="+", metavar="YAML", help="the evaluation study config(s) (default: the "
                    "heldout_main*/heldout_sft*/heldout_other* configs saved under the results directories' studies/)")
    ha.add_argument("--out", required=True, metavar="DIR", help="directory for STUDY_per_seed.csv and STUDY_pairs.md")
    ha.set_defaults(func=_heldout_analyse)


def _heldout_configs(args) -> int:
    from proas.experiments.heldout import config_path, study_yaml

    stale = []
    for start in ("random", "sft", "other"):
        path, text = config_path(start), study_yaml(start)
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        if args.check:
            stale.append(path.name)
            continue
        from proas.fileio import atomic_write_bytes

        atomic_write_bytes(path, text.encode("utf-8"))
        print(f"wrote {path}")
    if stale:
        raise ProasError(f"out of date with the protocol's constants: {', '.join(stale)} (proas heldout configs)")
    return 0


def _heldout_select(args) -> int:
    import yaml

    from proas.experiments.heldout import (
        ENVS,
        ablation_study,
        evaluation_study,
        extension_study,
        extensions_needed,
        load_records,
        render_selection,
        select,
        selection_json,
        write_records,
    )
    from proas.fileio import atomic_write_bytes

    if args.ablation_config and args.start != "random":  # before the records are read or anything written
        raise ProasError("the ablations run from random weights: --ablation-config needs --start random")
    records = load_records(Path(s) for s in args.sources)
    choices = select(records, args.start)
    text = render_selection(choices, args.start)

    def write(path: str, body: str) -> None:
        atomic_write_bytes(Path(path), body.encode("utf-8"))
        print(f"wrote {path}")

    if args.eval_config:
        envs = args.eval_envs or [c.arm.env for c in choices]
        open_arms = [f"{c.arm.env}/{c.arm.name}" for c in choices if c.chosen is None and c.arm.env in envs]
        if open_arms:
            raise ProasError(f"no evaluation config while arms have no setting: {', '.join(open_arms)}")
    if args.out:
        write(args.out, text + "\n")
    else:
        print(text)
    if args.records:
        write_records(records, Path(args.records))
        print(f"wrote {args.records} ({len(records)} runs)")
    if args.extension:
        need = extensions_needed(choices)
        if not need:
            print("no arm waits on an extension: nothing written")
        else:
            write(args.extension, yaml.safe_dump(extension_study(need, args.start), sort_keys=False, width=110))
    if args.eval_config:
        head = (f"# Written by `proas heldout select --eval-config` from the tuning records "
                f"({', '.join(map(str, args.sources))}).\n")
        body = yaml.safe_dump(evaluation_study(selection_json(choices), args.start, envs), sort_keys=False, width=110)
        write(args.eval_config, head + body)
    if args.ablation_config:
        envs = args.eval_envs or list(ENVS)
        body = yaml.safe_dump(ablation_study(selection_json(choices), envs), sort_keys=False, width=110)
        write(args.ablation_config, f"# Written by `proas heldout select --ablation-config`.\n{body}")
    return 0


def _heldout_analyse(args) -> int:
    from proas.experiments.datafiles import csv_text, load_yaml, output_file
    from proas.experiments.heldout import (
        CSV_FIELDS,
        analyse,
        render_pairs,
        render_rows,
        render_secondary,
        secondary,
    )
    from proas.experiments.spec import parse_study
    from proas.fileio import atomic_write_all

    sources = [Path(x) for x in args.sources]
    for src in sources:  # before the search for saved studies, whose absence would be the error
        if not (src.is_dir() or src.is_file()):
            raise ProasError(f"{src}: no such results directory or per-seed CSV")
    if args.study:
        saved = [Path(x) for x in args.study]
        for path in saved:
            if not path.is_file():
                raise ProasError(f"{path}: no such study config")
    else:
        saved = []
        for src in sources:
            if src.is_dir():
                saved += [p for kind in ("main", "sft", "other")
                          for p in sorted((src / "studies").glob(f"heldout_{kind}*.yaml"))]
        if not saved:
            raise ProasError("no heldout_main, heldout_sft or heldout_other study config under the sources' studies/ "
                             "(run the grid first, or name it with --study)")
    out = Path(args.out)
    # every study checked and analysed before anything is written: the study's name makes the
    # output files' names, so it goes through the study checker (a plain name, never a path)
    files: list[tuple[Path, bytes]] = []
    lines = []
    for path in saved:
        data = load_yaml(path, "study config")
        name = parse_study(data, str(path), check_overrides=False).name
        rows, pairs = analyse(sources, data)
        per_seed = output_file(out, f"{name}_per_seed.csv")
        files.append((per_seed, csv_text(CSV_FIELDS, rows, lineterminator="\r\n").encode("utf-8")))
        text = (render_pairs(pairs) + "\n\nSecondary readings, Δ = compared − reference, mean [95% CI] over the "
                "paired seeds (SR and errors in points, length in steps, entropy in nats):\n\n"
                + render_secondary(secondary(rows, pairs)) + "\n\nPer row, mean over the seeds run (± std over "
                "seeds for the primary), in points:\n\n" + render_rows(rows) + "\n")
        files.append((output_file(out, f"{name}_pairs.md"), text.encode("utf-8")))
        lines.append(f"{name}: {len(rows)} runs; wrote {per_seed} and _pairs.md")
    atomic_write_all(files)
    print("\n".join(lines))
    return 0


def _run(args) -> int:
    from proas.experiments.runner import estimate, plan, run_grid
    from proas.experiments.spec import load_study

    study = load_study(args.config)
    if args.steps is not None:
        study.steps = args.steps
    jobs = args.jobs if args.jobs is not None else (os.cpu_count() or 1)
    out = Path(args.out)
    refuse_non_directory(out, "--out")
    specs = study.runs(out, seeds=args.seeds, rows=args.rows, envs=args.envs)
    status = plan(study, specs, out.resolve())
    if args.dry_run:
        for s in specs:
            print(f"{status[s.key]:8s} {s.key}")
    # said before anything starts: how long the grid will take, and on what the figure rests
    print(f"{study.name}: {estimate(study, specs, out, status, jobs).line()}", flush=True)
    if args.dry_run:
        return 0
    res = run_grid(study, specs, out, jobs=jobs, time_limit=args.time_limit)
    print(f"{study.name}: {len(res.done)} finished now, {len(res.skipped)} already finished, {len(res.failed)} failed"
          + (f", {len(res.stopped)} stopped at the time limit" if res.stopped else ""))
    return 1 if res.failed else 0


def _list(args) -> int:
    from proas.experiments.spec import load_study, shipped_studies

    for name in shipped_studies():
        st = load_study(name)
        print(
            f"{name}: {st.title} — envs {', '.join(st.envs)}, seeds {', '.join(map(str, st.seeds))}, {st.steps} steps"
        )
        for r in st.rows:
            tag = f"not run: {r.not_run}" if r.not_run else ("hidden helper run" if r.hidden else "")
            print(f"  {r.id:24s} {r.label}" + (f"  [{tag}]" if tag else ""))
    return 0


def _report(args) -> int:
    from proas.experiments.report import make_report

    path = make_report(Path(args.results), Path(args.out) if args.out else None, budget=args.steps,
                       studies=args.studies, plots=not args.no_plots)
    print(f"report: {path}")
    return 0
