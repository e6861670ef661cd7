"""A grid of lm RL runs side by side on one machine, against a reference copy of the code.

The lm study runs many ``proas train policy=lm`` processes at once on one GPU machine (one per
run, one CPU thread each). This benchmark times such a grid, ``--runs`` runs per env (seeds
0..runs-1), with the code under test and with a reference copy of the package (``--ref``: a
directory holding the ``proas`` package, e.g. ``git archive COMMIT src | tar x -C REF``), one
grid after the other on the same machine, and prints:

- each grid's wall time, the RL steps its runs logged and their mean seconds per step
  (rollout and update), as soon as that grid has run;
- the ratio of the reference grid's wall time to each other grid's, or with ``--window S``
  (each grid stopped after S seconds) the ratio of their throughputs, RL steps per second;
- whether each run's metrics of its first step (the rollout before any update: training SR,
  reward, episode length, env errors) equal the reference run's of the same env and seed.
  Later steps are not compared: GPU kernels with atomic additions (the embedding's backward)
  make two runs of the same code drift apart after the first update.

``--also KEY=VALUE ...`` adds a grid of the code under test with those overrides (for example
``policy.lm.sdpa_kernel=null``: the attention kernel left to PyTorch, as the reference's code
leaves it, which separates the kernel's share of the speed-up and shows first steps equal to the
reference's where the default's kernel changes their rounding).

With ``--mps`` another grid runs the code under test under the CUDA MPS daemon
(``nvidia-cuda-mps-control -d``, stopped afterwards), which lets the processes' kernels share
the GPU instead of taking turns.

One GPU machine (models built here with ``proas lm tokenizer`` / ``proas lm new-model``)::

    python benchmarks/lm_grid.py --ref /tmp/ref --runs 8 --steps 150 --window 150 --mps

A smoke run (what CI runs: CPU, one tiny run per env, one step of 2 tasks x 2, the reference
being this code)::

    python benchmarks/lm_grid.py --quick
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
#: the first step's metrics that must agree between the grids (the rollout before any update)
FIRST_STEP = ("train/sr", "train/reward", "train/steps", "train/error_rate", "train/trajectories")


def _env(src: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def _models(root: Path, envs: list[str], quick: bool, size: str = "small") -> dict[str, str]:
    """Each env's model directory: a tokenizer trained on the env's text and a from-scratch
    model (``size``; ``tiny`` for ``--quick``), made once with this code."""
    out = {}
    kind = "quick" if quick else size  # a --work directory keeps each kind apart
    for env in envs:
        model = root / "models" / f"{env}-{kind}"
        if not (model / "config.json").exists():
            span = "word" if env == "household" else "line"
            tok = root / "tok" / f"{env}-{'quick' if quick else 'study'}"
            for cmd in (["lm", "tokenizer", "--env", env, "--vocab", "512" if quick else "4096", "--max-tasks",
                         "20" if quick else "200", "--span", span, "--out", str(tok)],
                        ["lm", "new-model", "--tokenizer", str(tok), "--size", "tiny" if quick else size,
                         "--out", str(model)]):
                subprocess.run([sys.executable, "-m", "proas", *cmd], env=_env(SRC), check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out[env] = str(model)
    return out


def _grid(label: str, src: Path, out: Path, models: dict[str, str], args, base: dict | None = None,
          extra: list[str] | None = None) -> dict:
    """Run one grid; print its line (against ``base``, or as the reference when None). ``extra``:
    overrides for this grid's runs alone, after ``args.overrides``."""
    out.mkdir(parents=True)
    procs = []
    t0 = time.perf_counter()
    for seed in range(args.runs):
        for env, model in models.items():
            over = ["policy=lm", "policy.lm.mode=score", f"policy.lm.model_path={model}", f"env={env}", f"seed={seed}",
                    f"train.steps={args.steps}", "train.val_before_train=false", "train.val_every=0",
                    "train.save_every=100000", "train.rollout_log_every=0", "train.progress=false",
                    f"train.out_dir={out}", f"train.run_name={env}-s{seed}", *args.overrides, *(extra or [])]
            if env == "household" and args.household_max_steps:
                over.append(f"env.max_steps={args.household_max_steps}")
            log = open(out / f"{env}-s{seed}.log", "w")
            procs.append((subprocess.Popen([sys.executable, "-m", "proas", "train", *over], env=_env(src),
                                           stdout=log, stderr=subprocess.STDOUT), log))
    bad = cut = 0
    for p, log in procs:
        left = None if not args.window else max(0.0, args.window - (time.perf_counter() - t0))
        try:
            bad += p.wait(timeout=left) != 0
        except subprocess.TimeoutExpired:  # the window is over: the run is stopped where it is
            p.terminate()
            p.wait()
            cut += 1
        log.close()
    wall = time.perf_counter() - t0
    runs = {}
    for m in sorted(out.glob("*/metrics.jsonl")):
        recs = [json.loads(x) for x in m.read_text().splitlines() if x.strip()]
        runs[m.parent.name] = [r for r in recs if "time/step" in r]
    grid = {"label": label, "wall": wall, "failed": bad, "cut": cut, "runs": runs}
    _report(grid, grid if base is None else base, args)
    return grid


def _steps(grid: dict) -> int:
    return sum(len(steps) for steps in grid["runs"].values())


def _report(g: dict, base: dict, args) -> None:
    """One grid's line, printed as soon as it has run (a call cut short keeps what it printed)."""
    if args.window:  # throughput: RL steps the grid's runs logged in the window
        ratio = (_steps(g) / g["wall"]) / (_steps(base) / base["wall"]) if _steps(base) else float("nan")
    else:
        ratio = base["wall"] / g["wall"] if g["wall"] else float("nan")
    same = sum(1 for name, steps in g["runs"].items() if steps and base["runs"].get(name)
               and all(steps[0].get(k) == base["runs"][name][0].get(k) for k in FIRST_STEP))
    runs = g["runs"]
    print(f"  {g['label']:<12} wall {g['wall']:7.1f} s  steps {_steps(g):4d}  x{ratio:5.2f}  step "
          f"{_mean(runs, 'time/step'):6.2f} s (rollout {_mean(runs, 'time/rollout'):6.2f}, update "
          f"{_mean(runs, 'time/update'):6.2f})  runs {len(runs)} failed {g['failed']} cut {g['cut']}  "
          f"first step equal to the reference: {same}/{len(runs)}", flush=True)


def _mean(runs: dict, key: str) -> float:
    vals = [r[key] for steps in runs.values() for r in steps[1:] or steps]
    return sum(vals) / len(vals) if vals else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", default=None, help="a directory holding the reference proas package (default: this code)")
    ap.add_argument("--runs", type=int, default=8, help="runs per env (seeds 0..N-1)")
    ap.add_argument("--steps", type=int, default=3, help="RL steps per run")
    ap.add_argument("--envs", nargs="+", default=["household", "shop"])
    ap.add_argument("--household-max-steps", type=int, default=0, help="household episode limit (0: the env's)")
    ap.add_argument("--size", default="small", help="the runs' from-scratch architecture (the lm study's: small)")
    ap.add_argument("--mps", action="store_true", help="a third grid under the CUDA MPS daemon")
    ap.add_argument("--window", type=float, default=0, help="stop each grid after this many seconds and compare "
                    "throughput (RL steps logged per second) instead of wall time (0: run every run to the end)")
    ap.add_argument("--work", default=None, help="where models and runs go (default: a temporary directory)")
    ap.add_argument("--quick", action="store_true", help="CPU smoke run: one tiny run per env, one step of 2 tasks x 2")
    ap.add_argument("--also", nargs="+", metavar="KEY=VALUE", default=None,
                    help="one more grid of the code under test with these overrides, e.g. "
                         "policy.lm.sdpa_kernel=null (PyTorch's kernel choice, as the reference's code makes)")
    ap.add_argument("overrides", nargs="*", help="config overrides key=value for every run")
    args = ap.parse_args(argv)
    if args.quick:
        args.runs, args.steps, args.household_max_steps = 1, 1, 3
        args.overrides = ["env.tasks_per_step=2", "env.group_size=2", "policy.lm.device=cpu",
                          "algo.graph.oracle_tasks=20", *args.overrides]
    ref = Path(args.ref).resolve() if args.ref else SRC
    if not (ref / "proas" / "__init__.py").exists():
        print(f"--ref {ref}: no proas package there", file=sys.stderr)
        return 2
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="lm_grid_"))
    try:
        models = _models(work, args.envs, args.quick, args.size)
        print(f"lm grid: {args.runs} run(s) x {args.envs}, {args.steps} steps each"
              f"{f', cut at {args.window:.0f} s' if args.window else ''}; reference {ref}", flush=True)
        base = _grid("reference", ref, work / "ref", models, args)
        _grid("this code", SRC, work / "new", models, args, base)
        if args.also:
            _grid("this + also", SRC, work / "also", models, args, base, extra=args.also)
        if args.mps:
            _mps_grid(work, models, args, base)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _mps_grid(work: Path, models: dict[str, str], args, base: dict) -> dict | None:
    ctl = shutil.which("nvidia-cuda-mps-control")
    if ctl is None:
        print("  no nvidia-cuda-mps-control: no MPS grid")
        return None
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(work / "mps"), CUDA_MPS_LOG_DIRECTORY=str(work / "mpslog"))
    for d in ("mps", "mpslog"):
        (work / d).mkdir(exist_ok=True)
    if subprocess.run([ctl, "-d"], env=env).returncode != 0:
        print("  the MPS daemon did not start: no MPS grid")
        return None
    saved = {k: os.environ.get(k) for k in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")}
    os.environ.update({k: env[k] for k in saved})
    try:
        return _grid("this + MPS", SRC, work / "mps_runs", models, args, base)
    finally:
        subprocess.run([ctl], input="quit\n", text=True, env=env)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


if __name__ == "__main__":
    sys.exit(main())
