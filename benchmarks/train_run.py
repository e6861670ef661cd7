"""A whole ``proas train`` run, this checkout against a reference commit, one CPU thread each.

    python benchmarks/train_run.py                       # household, 150 steps, against REF
    python benchmarks/train_run.py --env shop --pairs 2
    python benchmarks/train_run.py --quick               # 5 steps, what CI runs

The reference is the commit before the held-out study's throughput work (``REF`` below): its
``src/`` is taken with ``git archive`` into a temporary folder, and each pair runs the same
command once from there and once from this checkout (order alternating pair by pair), each in its
own process with one thread (``OMP_NUM_THREADS=1``, ``torch.set_num_threads(1)`` through
``OMP``/``MKL`` variables), on the study's setting: the env's fixed schedule of the seed, the
fixed validation set every 10 steps, the scorer, GRPO+ProAS, SGD at rate 1 (the reference's
default, pinned: the trainer's defaults are the tuned per-env setting since, docs/training.md).
Extra ``key=value`` arguments are config overrides for both.

Printed: per pair, each side's wall and CPU seconds (user + system of the child) and the ratio
reference / new; the median ratio; and whether the two runs' ``metrics.jsonl`` agree on every
key of the reference's records that is not a wall time (``time/*``): the throughput work must
not change what a run computes. Needs a git checkout (``git archive``); exits 1 when the metrics differ.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the last commit before the throughput work of the held-out study
REF = "70b29b7"
#: the scorer's optimiser and rate as the reference's defaults set them
REF_SETTING = ("policy.scorer.optimizer=sgd", "policy.scorer.lr=1.0")


def _child_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _run(src: Path, out: Path, args: list[str]) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=str(src), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", PYTHONHASHSEED="0")
    cmd = [sys.executable, "-m", "proas", "train", f"train.out_dir={out}", "train.run_name=run",
           "train.progress=false", *args]
    cpu0, t0 = _child_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=out.parent, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, _child_cpu() - cpu0
    if proc.returncode != 0:
        sys.exit(f"train_run: {src} failed (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    return wall, cpu


def _metrics(run_dir: Path) -> list[dict]:
    rows = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        rows.append({k: v for k, v in rec.items() if not k.startswith("time/")})
    return rows


def _agree(ref: list[dict], new: list[dict]) -> bool:
    """Every record of the reference, every key it has, with the same value in the new run (the
    new code may record more keys, e.g. the validation's error rate and entropy)."""
    return len(ref) == len(new) and all(n.get(k, object()) == v for r, n in zip(ref, new) for k, v in r.items())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="household", choices=["household", "shop"])
    ap.add_argument("--steps", type=int, default=150, help="RL steps of each run (default 150)")
    ap.add_argument("--seed", type=int, default=0, help="run seed; its shipped schedule is used (default 0)")
    ap.add_argument("--pairs", type=int, default=1, help="reference/new pairs (default 1)")
    ap.add_argument("--ref", default=REF, help=f"reference commit (default {REF})")
    ap.add_argument("--quick", action="store_true", help="5 steps, one pair: a smoke run for CI")
    ap.add_argument("overrides", nargs="*", help="config overrides key=value, for both sides")
    args = ap.parse_args(argv)
    steps = 5 if args.quick else args.steps
    # both sides on the reference's defaults: an unset optimiser means another one since
    run_args = [f"env={args.env}", f"seed={args.seed}", f"train.steps={steps}", *REF_SETTING, *args.overrides]
    with tempfile.TemporaryDirectory(prefix="proas-train-run-") as tmp:
        tmp = Path(tmp)
        ref_src = tmp / "ref"
        ref_src.mkdir()
        try:
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.ref, "src"], check=True,
                                     capture_output=True).stdout
        except (subprocess.CalledProcessError, FileNotFoundError) as exc:
            if not args.quick:
                sys.exit(f"train_run: cannot take {args.ref} from git ({exc})")
            # a smoke run in a clone without that commit (a shallow one): the new side alone
            print(f"train_run: {args.ref} is not in this clone; running this checkout alone")
            out = tmp / "new" / "runs"
            out.mkdir(parents=True)
            sched = ROOT / "src" / "proas" / "data" / "fixed_train_set" / f"seed{args.seed}" / args.env
            wall, cpu = _run(ROOT / "src", out, [*run_args, f"env.fixed_train_set.path={sched}"])
            print(f"this checkout: {wall:.1f} s wall, {cpu:.1f} s CPU, {len(_metrics(out / 'run'))} records")
            return 0
        subprocess.run(["tar", "-x", "-C", str(ref_src)], input=archive, check=True)
        sides = {"ref": ref_src / "src", "new": ROOT / "src"}
        print(f"proas train, {args.env}, {steps} steps, seed {args.seed}, one thread; reference {args.ref}")
        print(f"{'pair':<6}{'ref wall':>10}{'new wall':>10}{'ref cpu':>10}{'new cpu':>10}{'ratio':>8}")
        ratios, same = [], True
        for k in range(args.pairs):
            res = {}
            for side in (("ref", "new") if k % 2 == 0 else ("new", "ref")):
                out = tmp / f"{side}{k}" / "runs"
                out.mkdir(parents=True)
                sched = sides[side] / "proas" / "data" / "fixed_train_set" / f"seed{args.seed}" / args.env
                res[side] = _run(sides[side], out, [*run_args, f"env.fixed_train_set.path={sched}"])
                res[side + "_metrics"] = _metrics(out / "run")
            ratio = res["ref"][0] / res["new"][0]
            ratios.append(ratio)
            same = same and _agree(res["ref_metrics"], res["new_metrics"])
            print(f"{k:<6}{res['ref'][0]:>10.1f}{res['new'][0]:>10.1f}{res['ref'][1]:>10.1f}{res['new'][1]:>10.1f}"
                  f"{ratio:>7.2f}x")
        print(f"median speed-up (reference wall / new wall): {statistics.median(ratios):.2f}x over {len(ratios)} "
              f"pair(s)")
        print(f"metrics (every key but time/*): {'identical' if same else 'DIFFERENT'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
