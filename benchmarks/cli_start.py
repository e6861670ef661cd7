"""How long the command line takes to answer before any work: a config typo, ``--help`` and
``--show-config``, each a fresh ``proas`` process, against the time of importing torch alone
(what every command paid before its config was checked first; issue #27, item 12: a typo took
8-12 s to report).

    python benchmarks/cli_start.py [--repeats 5]
    python benchmarks/cli_start.py --quick        # 1 repeat: what CI runs

Printed: the median wall seconds of each command and of ``python -c "import torch"``, and the
goal: a config typo is reported in under half the time torch takes to import (a ratio, which
holds on a busy machine as on an idle one: 0.65 s against 2.5 s idle). Exits 1 when a command
does not answer as expected (exit status 2 and one line for the typo).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")

COMMANDS = {
    "config typo (train algo.estimater=grpo)": (["train", "algo.estimater=grpo"], 2),
    "config typo of a baseline (direct env.nme=shop)": (["direct", "env.nme=shop"], 2),
    "proas --help": (["--help"], 0),
    "proas train --show-config": (["train", "--show-config"], 0),
}


def _timed(argv: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p))
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, timeout=300)
    return time.perf_counter() - t0, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5, help="runs of each command (the median is shown)")
    ap.add_argument("--quick", action="store_true", help="1 repeat: a smoke run for CI")
    args = ap.parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    ok = True
    times = {}
    for name, (cmd, rc) in COMMANDS.items():
        runs = [_timed(["-m", "proas", *cmd]) for _ in range(repeats)]
        times[name] = statistics.median(t for t, _ in runs)
        out = runs[-1][1]
        good = out.returncode == rc and (rc == 0 or len(out.stderr.strip().splitlines()) == 1)
        ok &= good
        print(f"{name:<50} {times[name]:6.2f} s" + ("" if good else f"  UNEXPECTED: exit {out.returncode}, "
                                                               f"{out.stderr.strip()[-200:]!r}"))
    torch_s = statistics.median(_timed(["-c", "import torch"])[0] for _ in range(repeats))
    print(f"{'import torch alone':<50} {torch_s:6.2f} s")
    typo = times["config typo (train algo.estimater=grpo)"]
    met = typo < 0.5 * torch_s
    print(f"goal: a config typo reported in under half of torch's import time: "
          f"{'met' if met else 'NOT met'} ({typo:.2f} s against {torch_s:.2f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
