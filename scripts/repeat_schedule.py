"""Write a training schedule that gives an RL run the same tasks at every step (results/lm/README.md).

    python scripts/repeat_schedule.py --env shop --seed 0 --step 0 --out DATA_ROOT

The tasks are the ones the shipped schedule of ``--seed`` gives at ``--step`` (0-based; 16 on
shop), and every step of the new schedule is those tasks again (in a shuffled order). It is a
control for the lm study: RL that cannot raise the success rate on tasks it sees at every step
cannot be expected to raise it on held-out ones. The schedule is written as ``proas schedule
make`` writes one, hash-checked against the shipped validation set (copied beside it), under
``OUT/fixed_train_set/seed{seed}/{env}``, which ``env.fixed_train_set.path`` takes. The same
arguments write the same files, so they are not kept: scripts/run_lm_study.sh writes the lm
study's (shop, seeds 0-2, step 0) under its results directory before the runs read them.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="shop")
    ap.add_argument("--seed", type=int, default=0, help="the shipped schedule the tasks come from")
    ap.add_argument("--step", type=int, default=0, help="its step (0-based) whose tasks are repeated")
    ap.add_argument("--steps", type=int, default=200, help="steps of the new schedule")
    ap.add_argument("--out", required=True, help="data root to write under")
    a = ap.parse_args(argv)

    from proas import tasksets
    from proas.errors import ProasError

    try:
        shipped = tasksets.load_schedule(tasksets.schedule_dir(a.env, a.seed))
        if not 0 <= a.step < len(shipped.steps):
            raise ProasError(f"--step {a.step}: the schedule of seed {a.seed} has steps 0-{len(shipped.steps) - 1}")
        tasks = shipped.tasks_at(a.step)
        val = tasksets.load_val_set(a.env)
        where = tasksets.make_schedule(
            a.env, tasks, seed=a.seed, steps=a.steps, per_step=len(tasks), root=a.out, val_ids=val.task_ids,
            source=f"shipped fixed_val_set/{a.env}.jsonl",
            made_by=f"scripts/repeat_schedule.py: the tasks of step {a.step} of the shipped seed-{a.seed} "
                    f"schedule, at every step",
        )
    except ProasError as e:
        print(f"repeat_schedule: {e}", file=sys.stderr)
        return 2
    print(f"{where}: {a.steps} steps of the same {len(tasks)} tasks: {' '.join(tasks)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
