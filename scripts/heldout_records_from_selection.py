"""Recover the run records of the first tuning session from its selection table.

The first device session's tuning runs (commit 19a7d3c) were kept under
``results/heldout/tuning/runs/``, which ``.gitignore`` (``runs/``) kept out of the repository, so
their files were lost with that checkout. What survives is the table that
``proas heldout select`` rendered from them (``results/heldout/tuning/selection.md`` at commit
836d5bc): each run's tuning metric, rounded to 0.1 point. This script turns that table into run
records (``proas.experiments.heldout.RECORD_FIELDS``), with no validation curve and a ``source``
that says where the figure comes from.

    python scripts/heldout_records_from_selection.py SELECTION_MD OUT_CSV
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from proas.experiments.heldout import TUNING_SEEDS, write_records

COMMIT = "19a7d3c3963bc6c630b7c843d0cb596cd530cfc1"
SOURCE = "selection.md of 836d5bc (tuning metric rounded to 0.1 point; run files not kept)"


def parse(text: str) -> dict:
    out = {}
    env = arm = None
    for line in text.splitlines():
        m = re.match(r"## (\w+) (\w+):", line)
        if m:
            env, arm = m.groups()
            continue
        m = re.match(r"\| ([\w.]+) \| (.*) \|$", line)
        if not m or env is None or m.group(1) == "setting":
            continue
        cells = [c.strip() for c in m.group(2).split("|")][: len(TUNING_SEEDS)]
        for seed, cell in zip(TUNING_SEEDS, cells):
            if cell in ("–", "-"):
                continue
            row = f"{arm}_{m.group(1)}"
            out[(env, row, seed)] = {"env": env, "row": row, "seed": seed, "commit": COMMIT,
                                     "tuning_metric": float(cell) / 100.0, "source": SOURCE}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("selection", type=Path, help="the selection table (selection.md of 836d5bc)")
    ap.add_argument("out", type=Path, help="the run records to write (CSV)")
    a = ap.parse_args(argv)
    records = parse(a.selection.read_text(encoding="utf-8"))
    write_records(records, a.out)
    print(f"{len(records)} records -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
