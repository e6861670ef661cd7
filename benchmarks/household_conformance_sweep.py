"""A longer conformance sweep than the test suite's: fast simulator vs the real ALFWorld engine.

    python benchmarks/household_conformance_sweep.py --split valid_unseen --games-per-type 6 --steps 80
    python benchmarks/household_conformance_sweep.py --split train --offset 100 --games-per-type 5 --biased
    python benchmarks/household_conformance_sweep.py --quick    # 3 games (3 types), 10 steps: what CI runs

For each game: the oracle walkthrough, then a seeded random sequence of ``--steps`` actions
(75% admissible, 15% plausible inadmissible, 10% malformed; with ``--biased``, admissible picks
favour take/move/open/close/slice/use/heat/cool/clean/examine) replayed in both backends. Prints
the first difference of each failing game (observation, admissible list, reward, done, won) and
a final ``ok N/M``; exits 1 if any game differs.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time

from proas.envs.household import TASK_TYPES, make_household_env

MALFORMED = ["", "fly away", "GO TO the moon", "take", "go to  cabinet 1", " look "]
STATEFUL = ("take", "move", "open", "close", "slice", "use", "heat", "cool", "clean", "examine", "inventory", "look")


def differs(a, b) -> str | None:
    (o1, r1, d1, t1, i1), (o2, r2, d2, t2, i2) = a, b
    if o1 != o2:
        return f"observation\n  fast: {o1!r}\n  real: {o2!r}"
    if i1["admissible"] != i2["admissible"]:
        return (
            f"admissible: fast-only {set(i1['admissible']) - set(i2['admissible'])}, "
            f"real-only {set(i2['admissible']) - set(i1['admissible'])}"
        )
    if (r1, d1, t1, i1["won"]) != (r2, d2, t2, i2["won"]):
        return f"outcome: fast {(r1, d1, t1, i1['won'])}, real {(r2, d2, t2, i2['won'])}"
    return None


def sweep_game(fast, real, task_id: str, steps: int, biased: bool) -> str | None:
    fast.reset(task_id)
    real.reset(task_id)
    for a in fast.oracle(task_id):
        bad = differs(fast.step(a), real.step(a))
        if bad:
            return f"oracle {a!r}: {bad}"
    rng = random.Random(task_id)
    o1, i1 = fast.reset(task_id)
    o2, _ = real.reset(task_id)
    if o1 != o2:
        return "reset observation"
    for t in range(steps):
        u = rng.random()
        if u < 0.75:
            pri = [x for x in i1["admissible"] if x.split()[0] in STATEFUL]
            a = rng.choice(pri if biased and pri and rng.random() < 0.6 else i1["admissible"])
        elif u < 0.9:
            a = rng.choice(i1["invalid_candidates"] or ["look"])
        else:
            a = rng.choice(MALFORMED)
        out = fast.step(a)
        bad = differs(out, real.step(a))
        if bad:
            return f"step {t} {a!r}: {bad}"
        i1 = out[4]
        if out[2] or out[3]:  # terminated or truncated
            break
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", default="valid_unseen")
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--games-per-type", type=int, default=3)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--biased", action="store_true")
    ap.add_argument("--quick", action="store_true", help="1 game of each of 3 task types, 10 random steps: a smoke "
                    "run for CI (the real engine takes seconds a reset)")
    args = ap.parse_args()
    types = TASK_TYPES
    if args.quick:
        args.games_per_type, args.steps, types = 1, 10, list(TASK_TYPES)[:3]
    fast = make_household_env("fast")
    ok = total = 0
    t0 = time.time()
    with tempfile.TemporaryDirectory() as cache:
        real = make_household_env("alfworld", cache_dir=cache)
        for short in types:
            for i in range(args.games_per_type):
                task_id = f"{args.split}-{short}-{i + args.offset:04d}"
                bad = sweep_game(fast, real, task_id, args.steps, args.biased)
                total += 1
                if bad:
                    print(f"MISMATCH {task_id}: {bad}")
                else:
                    ok += 1
    print(
        f"ok {ok}/{total} games ({args.split}, offset {args.offset}, {args.steps} random steps, "
        f"biased={args.biased}) in {time.time() - t0:.0f}s"
    )
    return 0 if ok == total else 1


if __name__ == "__main__":
    sys.exit(main())
