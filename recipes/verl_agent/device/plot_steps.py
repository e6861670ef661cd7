#!/usr/bin/env python3
"""The learning run's plot (results/verl_agent/): validation and training success per step, one
line per run, from steps_csv.py's CSV.

A run that was cut and resumed prints some steps twice (and its validation before training
again at the step it resumed from): per run and step, the last non-empty value of a column wins.

    python recipes/verl_agent/device/plot_steps.py learn_steps.csv --out learn.png
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

PANELS = [("val/success_rate", "validation success (held-out games)"),
          ("episode/success_rate", "training success (the step's rollouts)")]


def series(rows: list[dict[str, str]], column: str) -> dict[str, list[tuple[int, float]]]:
    """``{run: [(step, value), ...]}`` of one column, steps ascending, the last value of a step kept."""
    merged: dict[str, dict[int, float]] = {}
    for row in rows:
        value = (row.get(column) or "").strip()
        if value:
            merged.setdefault(row["run"], {})[int(row["step"])] = float(value)
    return {run: sorted(steps.items()) for run, steps in merged.items()}


def read(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise SystemExit(f"plot_steps: cannot read {path}: {e.strerror}") from None
    if not rows or not {"run", "step"} <= set(rows[0]):
        raise SystemExit(f"plot_steps: {path} is not steps_csv.py's CSV (no run and step columns)")
    try:
        for row in rows:
            int(row["step"])
            for column, _ in PANELS:
                float(row.get(column) or 0)
    except (TypeError, ValueError):
        raise SystemExit(f"plot_steps: {path}: a step or a success value that is not a number") from None
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", type=Path, help="steps_csv.py's output")
    ap.add_argument("--out", type=Path, required=True, help="the PNG to write")
    ap.add_argument("--title", default="verl-agent's trainer on alfworld/AlfredTWEnv")
    args = ap.parse_args(argv)
    rows = read(args.csv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(11, 4), sharey=True)
    runs = list(dict.fromkeys(row["run"] for row in rows))  # one colour a run, in both panels
    colours = {run: f"C{i % 10}" for i, run in enumerate(runs)}
    plotted = 0
    for ax, (column, label) in zip(axes, PANELS):
        for run, points in sorted(series(rows, column).items(), key=lambda item: runs.index(item[0])):
            steps, values = zip(*points)
            ax.plot(steps, [100 * v for v in values], marker="o" if column.startswith("val/") else ".",
                    markersize=4, color=colours[run], label=run)
            plotted += 1
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("success (%)")
    for ax in axes:
        if ax.lines:
            ax.legend(fontsize=8)
    if not plotted:
        print(f"plot_steps: {args.csv} has no success values", file=sys.stderr)
        return 1
    fig.suptitle(args.title, fontsize=11)
    fig.tight_layout()
    tmp = args.out.with_name(args.out.name + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    tmp.replace(args.out)
    print(f"{plotted} lines -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
