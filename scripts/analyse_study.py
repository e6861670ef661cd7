"""Figures behind the faithful study (results/history/faithful/) that the paper-layout report does not show.

    python scripts/analyse_study.py RESULTS_DIR [--prune] > results/history/faithful/analysis.md

RESULTS_DIR is a results directory of `proas experiment run ... --out RESULTS_DIR` (run
directories RESULTS_DIR/<env>/<row>/seed<N>/ with their metrics.jsonl).

For every env and row with runs in RESULTS_DIR (mean ± std over the seeds found):

- ``train SR 51-150``: the training success rate (128 episodes a step, temperature 1.0) averaged
  over steps 51-150, a far less noisy measure than the best of 16 validations;
- ``last val``: the mean of the last three validation SRs;
- ``|A| 1-50``, ``grad 1-50``: mean absolute step advantage and gradient norm over steps 1-50;
- ``err``: the share of env-rejected actions in the training rollouts over steps 51-150;
- ``unreas. in succ.``: the share of unreasonable steps (Rea = 0) in successful trajectories,
  and, from the rollout logs where a run has them, how many of those were env errors.

``--prune`` also builds each env's oracle ARG for seeds 0-2 and prunes 40% of its state-action
pairs as the Incomplete ablation does, printing its size before and after and how many of the
oracle's own steps each reasonableness rule then marks unreasonable.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import statistics
import sys
import tempfile
from pathlib import Path


def _ms(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    """Mean ± sample std as the report computes them (one value: no ±)."""
    from proas.experiments.report import mean_std

    if not values:
        return "–"
    m, sd = mean_std(values)
    if len(values) == 1:
        return f"{m * scale:.{digits}f}"
    return f"{m * scale:.{digits}f}±{sd * scale:.{digits}f}"


def _records(run: Path) -> list[dict]:
    out = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            break  # a record cut off by a kill
    by_step = {r["step"]: r for r in out}
    return [by_step[s] for s in sorted(by_step)]


def _mean(recs: list[dict], key: str, lo: int, hi: int) -> float | None:
    vals = [r[key] for r in recs if lo <= r["step"] <= hi and r.get(key) is not None]
    return statistics.mean(vals) if vals else None


def _error_share(run: Path) -> tuple[int, int]:
    """(unreasonable steps in successful trajectories, of which env errors) over the rollout logs."""
    unreasonable = errors = 0
    for f in sorted(glob.glob(str(run / "rollouts" / "step_*.jsonl.gz"))):
        with gzip.open(f, "rt", encoding="utf-8") as fh:
            for line in fh:
                traj = json.loads(line)
                if not traj.get("won"):
                    continue
                for s in traj["steps"]:
                    if s.get("rea") == 0:
                        unreasonable += 1
                        errors += bool(s.get("error"))
    return unreasonable, errors


def table(results: Path) -> None:
    for env_dir in sorted(p for p in results.iterdir() if p.is_dir() and p.name != "studies"):
        print(f"\n## {env_dir.name}\n")
        print("| row | seeds | train SR 51-150 | last val | |A| 1-50 | grad 1-50 | err 51-150 "
              "| unreas. in succ. 51-150 | of those, env errors (rollout logs) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for row in sorted(p for p in env_dir.iterdir() if p.is_dir()):
            runs = sorted(r for r in row.glob("seed*") if (r / "metrics.jsonl").exists())
            if not runs:
                continue
            cols: dict[str, list[float]] = {k: [] for k in ("tr", "last", "a", "g", "err", "un")}
            unreasonable = errors = 0
            for run in runs:
                recs = _records(run)
                vals = [r["val/sr"] for r in recs if r.get("val/sr") is not None]
                for key, value in (("tr", _mean(recs, "train/sr", 51, 150)),
                                   ("last", statistics.mean(vals[-3:]) if vals else None),
                                   ("a", _mean(recs, "adv/abs_mean", 1, 50)),
                                   ("g", _mean(recs, "loss/grad_norm", 1, 50)),
                                   ("err", _mean(recs, "train/error_rate", 51, 150)),
                                   ("un", _mean(recs, "train/unreasonable_in_success", 51, 150))):
                    if value is not None:
                        cols[key].append(value)
                u, e = _error_share(run)
                unreasonable, errors = unreasonable + u, errors + e
            share = f"{100 * errors / unreasonable:.1f}% of {unreasonable}" if unreasonable else "–"
            print(f"| {row.name} | {len(runs)} | {_ms(cols['tr'], 100)} | {_ms(cols['last'], 100)} | "
                  f"{_ms(cols['a'], 1, 3)} | {_ms(cols['g'], 1, 3)} | {_ms(cols['err'], 100)} | "
                  f"{_ms(cols['un'], 100)} | {share} |")


def prune_check() -> None:
    """What the Incomplete ablation does to each env's oracle ARG: its size before and after
    pruning 40% of the state-action pairs, and the share of the oracle's own steps (the
    trajectories that built it; every one reasonable before) that each Rea rule then marks
    unreasonable."""
    from proas.credit import CreditBatch, annotate
    from proas.envs.replay import replay_oracles
    from proas.tasksets import default_root
    from proas.train.config import build_config
    from proas.train.loop import Trainer

    print("\n## Incomplete ARG: 40% of the oracle ARG's state-action pairs pruned\n")
    print("Sizes as nodes / transitions (state pairs) / state-action pairs / edges; the last three columns: the "
          "share of the oracle's steps that each rule marks unreasonable after pruning.\n")
    print("| env | seed | before | after | transition | state_action | node |")
    print("|---|---|---|---|---|---|---|")
    for env in ("household", "shop"):
        for seed in (0, 1, 2):
            cfg = build_config([f"env={env}", f"seed={seed}", "policy=scorer", "train.progress=false",
                                f"env.fixed_train_set.path={default_root() / 'fixed_train_set' / f'seed{seed}' / env}"])
            t = Trainer(cfg, Path(tempfile.mkdtemp()))
            graph = t.graph
            ids = sorted({task for step in t.schedule.steps for task in step})
            oracle, _ = replay_oracles(t.envs[0], ids, int(t.envs[0].max_steps))
            batch = CreditBatch.from_trajectories(oracle)

            def size(g) -> str:
                return f"{g.num_nodes} / {g.num_transitions} / {g.num_state_actions} / {g.num_edges}"

            before = size(graph)
            graph.prune(0.4, seed=seed)  # what algo.graph.prune=0.4 does to the run's graph
            shares = [100 * (1 - annotate(batch, graph, rule).rea.mean())
                      for rule in ("transition", "state_action", "node")]
            print(f"| {env} | {seed} | {before} | {size(graph)} | " + " | ".join(f"{x:.1f}%" for x in shares) + " |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, help="a results directory of `proas experiment run --out`")
    p.add_argument("--prune", action="store_true", help="also check what pruning does to the oracle ARGs")
    args = p.parse_args(argv)
    if not args.results.is_dir():
        print(f"error: {args.results}: no such results directory", file=sys.stderr)
        return 2
    table(args.results)
    if args.prune:
        prune_check()
    return 0


if __name__ == "__main__":
    sys.exit(main())
