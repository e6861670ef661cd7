"""Household env speed: the fast simulator against the real ALFWorld engine, same games, same actions.

    python benchmarks/household_env.py [--games-per-type 2] [--steps 40] [--repeats 5]
    python benchmarks/household_env.py --quick     # 3 games (3 types), 10 steps, 1 repeat: what CI runs

Action sequences are drawn once (seeded: 80% admissible commands, 10% plausible inadmissible
ones, 10% malformed text) and replayed in both backends through ``HouseholdEnv``, so both pay
for the same protocol work (abstract state, admissible list, invalid candidates). Step time
excludes resets, which are reported apart. The fast backend's figure is the best of
``--repeats`` replays (the machine is shared); the real engine's is one replay. The replay
also checks that both backends return the same observations. Goal: fast >= 500x real.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time

from proas.envs.household import TASK_TYPES, make_household_env

MALFORMED = ["", "fly away", "take", "put it down!"]


def draw_sequences(games: list[str], steps: int) -> dict[str, list[str]]:
    env = make_household_env("fast")
    out = {}
    for task_id in games:
        rng = random.Random(f"bench:{task_id}")
        _, info = env.reset(task_id)
        seq = []
        for _ in range(steps):
            u = rng.random()
            if u < 0.8:
                action = rng.choice(info["admissible"])
            elif u < 0.9:
                action = rng.choice(info["invalid_candidates"] or ["look"])
            else:
                action = rng.choice(MALFORMED)
            seq.append(action)
            _, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            if done:
                break
        out[task_id] = seq
    return out


def replay(env, sequences: dict[str, list[str]]) -> tuple[float, float, int, dict[str, list[str]]]:
    """(seconds in steps, seconds in resets, steps, observations)."""
    t_step = t_reset = 0.0
    n = 0
    seen: dict[str, list[str]] = {}
    for task_id, seq in sequences.items():
        t0 = time.perf_counter()
        obs, _ = env.reset(task_id)
        t_reset += time.perf_counter() - t0
        seen[task_id] = [obs]
        t0 = time.perf_counter()
        for action in seq:
            obs, _, _, _, _ = env.step(action)
            seen[task_id].append(obs)
        t_step += time.perf_counter() - t0
        n += len(seq)
    return t_step, t_reset, n, seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--games-per-type", type=int, default=2)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="1 game of each of 3 task types, 10 steps, 1 repeat: a "
                    "smoke run for CI (the real engine takes seconds a reset)")
    args = ap.parse_args()
    types = TASK_TYPES
    if args.quick:
        args.games_per_type, args.steps, args.repeats, types = 1, 10, 1, list(TASK_TYPES)[:3]

    games = [f"train-{short}-{i:04d}" for short in types for i in range(args.games_per_type)]
    sequences = draw_sequences(games, args.steps)
    fast = make_household_env("fast")
    with tempfile.TemporaryDirectory() as cache:
        real = make_household_env("alfworld", cache_dir=cache)
        for task_id in games:  # write the game files and load the engine once, untimed
            real.reset(task_id)
        r_step, r_reset, n, r_obs = replay(real, sequences)
    best = None
    for _ in range(args.repeats):
        res = replay(fast, sequences)
        if best is None or res[0] < best[0]:
            best = res
    assert best is not None
    f_step, f_reset, _, f_obs = best
    same = f_obs == r_obs
    f_rate, r_rate = n / f_step, n / r_step
    print(f"games: {len(games)} ({args.games_per_type} of each of {len(types)} types), steps replayed: {n}, "
          f"same observations: {same}")
    print(f"{'backend':<10} {'steps/s':>12} {'ms/step':>10} {'ms/reset':>10}")
    print(f"{'fast':<10} {f_rate:>12.0f} {1000 / f_rate:>10.4f} {1000 * f_reset / len(games):>10.3f}")
    print(f"{'alfworld':<10} {r_rate:>12.1f} {1000 / r_rate:>10.2f} {1000 * r_reset / len(games):>10.1f}")
    ratio = f_rate / r_rate
    print(f"step speed ratio fast/alfworld: {ratio:.0f}x (goal >= 500x): {'met' if ratio >= 500 else 'NOT met'}")
    print(f"reset speed ratio fast/alfworld: {r_reset / f_reset:.0f}x")


if __name__ == "__main__":
    main()
