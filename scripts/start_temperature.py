"""What an lm start scores before RL changes it, read as an RL run reads it (results/lm/README.md).

    python scripts/start_temperature.py .whl/lm_start/shop --env shop --temperatures 0 0.4 1.0
    python scripts/start_temperature.py .whl/lm_start/shop --env shop --temperatures \\
        --windows 1-10 73-82 --group 2

RL samples its training episodes at ``policy.temperature`` (1.0) on a fixed schedule of tasks
and validates at ``policy.val_temperature`` (0.4) on the fixed validation tasks. With the start's
weights and no update, this prints
- validation SR at each of ``--temperatures``, with the validation RNG that an RL run of that
  seed uses at step 0 (0 = greedy);
- training SR on the tasks that seed's schedule (or ``--schedule``) gives at the steps of each
  ``--windows`` (e.g. ``1-10``), ``--group`` episodes per task at temperature 1.0 (or
  ``--window-temperature``);
so a change in an RL run's training SR can be told apart from the temperature and from the
schedule's tasks. START is what ``policy.lm.init_from`` takes (a Hugging Face model directory
such as ``proas lm export`` writes, or an SFT run). Runs on the CPU: about 45 s per 128 shop
episodes with the 5M model on 2 cores.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path


def window(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition("-")
    try:
        a, b = int(lo), int(hi or lo)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a window is FIRST-LAST, e.g. 1-10") from None
    if not 1 <= a <= b:
        raise argparse.ArgumentTypeError(f"{text!r}: steps count from 1, FIRST <= LAST")
    return a, b


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("start", help="the start's weights: what policy.lm.init_from takes")
    ap.add_argument("--env", default="shop")
    ap.add_argument("--temperatures", type=float, nargs="*", default=[0.4, 1.0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--tasks", type=int, default=128, help="validation tasks (the fixed set's first N)")
    ap.add_argument("--windows", type=window, nargs="*", default=[])
    ap.add_argument("--group", type=int, default=8, help="episodes per scheduled task")
    ap.add_argument("--window-temperature", type=float, default=None,
                    help="temperature of the window readings (default: policy.temperature, 1.0; 0 = greedy)")
    ap.add_argument("--schedule", help="a schedule directory to read the windows on, instead of each "
                    "seed's shipped one (e.g. DATA_ROOT/fixed_train_set/seed0/shop, as "
                    "scripts/repeat_schedule.py --out DATA_ROOT writes it)")
    a = ap.parse_args(argv)

    from proas import tasksets
    from proas.train.config import build_config
    from proas.train.loop import Trainer, val_seed, validate

    val: dict[float, list[float]] = {t: [] for t in a.temperatures}
    train: dict[tuple[int, int], list[float]] = {w: [] for w in a.windows}
    episodes: dict[tuple[int, int], int] = {}
    for seed in a.seeds:
        cfg = build_config([f"env={a.env}", "policy=lm", "policy.lm.mode=score", "policy.lm.dtype=fp32",
                            f"policy.lm.init_from={a.start}", f"env.fixed_val_set.size={a.tasks}",
                            f"env.fixed_train_set.path={a.schedule or tasksets.schedule_dir(a.env, seed)}",
                            "train.progress=false", f"seed={seed}"])
        with tempfile.TemporaryDirectory() as tmp:
            t = Trainer(cfg, Path(tmp))
            common = dict(max_steps=t.max_steps, env_name=t.env_name, success_reward=cfg.env.success_reward)
            for temp in a.temperatures:  # the RNG of run_validation(0)
                res = validate(t.policy, t._env_pool(len(t.val_ids)), t.val_ids, seed=val_seed(seed, 0),
                               temperature=temp, **common)
                val[temp].append(100 * res.sr)
            wtemp = cfg.policy.temperature if a.window_temperature is None else a.window_temperature
            for lo, hi in a.windows:
                ids = [task for k in range(lo, hi + 1) for task in t.schedule.tasks_at(k - 1) for _ in range(a.group)]
                won = 0.0
                for c in range(0, len(ids), 128):  # 128 episodes at a time, as an RL step plays them
                    chunk = ids[c:c + 128]
                    res = validate(t.policy, t._env_pool(len(chunk)), chunk, seed=seed * 104729 + 1000 * lo + c,
                                   temperature=wtemp, **common)
                    won += res.sr * len(chunk)
                train[(lo, hi)].append(100 * won / len(ids))
                episodes[(lo, hi)] = len(ids)

    def row(name: str, xs: list[float], n: int) -> None:
        cells = " | ".join(f"{x:.1f}" for x in xs)
        print(f"| {name} | {cells} | {sum(xs) / len(xs):.1f} | {n} |", flush=True)

    print(f"start: {a.start}, env {a.env}\n")
    print("| reading | " + " | ".join(f"seed {s}" for s in a.seeds) + " | mean | episodes per seed |")
    print("|---|" + "---|" * (len(a.seeds) + 2))
    for temp, xs in val.items():
        row(f"validation SR, temperature {temp:g}" + (" (greedy)" if temp == 0 else ""), xs, a.tasks)
    for (lo, hi), xs in train.items():
        row(f"training SR, schedule steps {lo}-{hi}, temperature {wtemp:g}", xs, episodes[(lo, hi)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
