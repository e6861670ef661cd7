"""Per-step metrics of verl-agent trainer logs as one CSV (results/verl_agent/*_steps.csv).

verl-agent's console logger prints one line a training step, ``step:N - key:value - ...``;
this keeps the columns below for each ``RUN=LOG`` given, in order::

    python recipes/verl_agent/device/steps_csv.py full=full.log resumed=resumed.log > steps.csv
"""

from __future__ import annotations

import argparse
import csv
import re
import sys

COLUMNS = ["val/success_rate", "episode/success_rate", "episode/valid_action_ratio", "proas/changed_step_rate",
           "proas/reasonable_rate", "proas/future_drift_mean", "critic/advantages/min", "actor/pg_loss",
           "actor/grad_norm", "actor/kl_loss", "actor/ppo_kl", "actor/entropy_loss", "response_length/mean",
           "timing_s/gen", "timing_s/update_actor", "timing_s/step"]

_STEP = re.compile(r"\bstep:(\d+) - (.*)$")


def steps(lines) -> list[tuple[int, dict[str, str]]]:
    """``(step, metrics)`` of every console metrics line, in the log's order."""
    out = []
    for line in lines:
        m = _STEP.search(line.rstrip("\n"))
        if not m:
            continue
        pairs = (part.split(":", 1) for part in m.group(2).split(" - ") if ":" in part)
        out.append((int(m.group(1)), {k.strip(): v.strip() for k, v in pairs}))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", metavar="RUN=LOG", help="a run's name and its trainer log")
    args = ap.parse_args(argv)
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(["run", "step", *COLUMNS])
    for spec in args.runs:
        name, sep, path = spec.partition("=")
        if not sep:
            ap.error(f"{spec!r}: expected RUN=LOG")
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                rows = steps(f)
        except OSError as e:
            print(f"steps_csv: cannot read {path}: {e.strerror}", file=sys.stderr)
            return 1
        if not rows:
            print(f"steps_csv: {path} has no 'step:N - key:value' lines", file=sys.stderr)
            return 1
        for step, m in rows:
            w.writerow([name, step, *(m.get(c, "") for c in COLUMNS)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
