"""Training-side credit figures of held-out runs: window means over training steps 51-150.

For each finished run under RES/<env>/<row>/seed<N>/ (a results directory of `proas experiment
run`), the mean over steps 51-150 of the training metrics that show what ProAS's credit acts on:
the share of steps in successful episodes that are unreasonable (what MUI masks), the share of
non-advancing steps in failed ones (what APR spreads its penalty over), the env-error rate,
episode length, the mean absolute advantage, and DAPO's generation batches a step. Writes one
CSV row per run and prints the mean per row.

    python scripts/heldout_train_means.py RES... --out CSV
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from proas.errors import ProasError
from proas.experiments.datafiles import csv_text
from proas.experiments.heldout import run_metrics
from proas.fileio import atomic_write_text

KEYS = ("train/sr", "train/unreasonable_in_success", "train/unreasonable", "train/na_in_failure",
        "train/error_rate", "train/steps", "adv/abs_mean", "train/gen_batches")
WINDOW = (51, 150)


def run_means(run_dir: Path, window: tuple[int, int] = WINDOW) -> dict[str, float | None]:
    """Mean of each key over the run's training records whose step lies in the window (the
    records as the held-out analysis reads them: a resumed run's repeated step counts once)."""
    recs = [r for r in run_metrics(run_dir) if window[0] <= r["step"] <= window[1]]
    vals = {k: [float(r[k]) for r in recs if isinstance(r.get(k), (int, float))] for k in KEYS}
    return {k: statistics.fmean(v) if v else None for k, v in vals.items()}


def collect(sources: list[Path]) -> list[dict]:
    rows = []
    for src in sources:
        if not src.is_dir():
            raise SystemExit(f"{src}: no such results directory")
        for summary in sorted(src.glob("*/*/seed*/summary.json")):
            run = summary.parent
            env, row, seed = run.parent.parent.name, run.parent.name, int(run.name.removeprefix("seed"))
            rows.append({"env": env, "row": row, "seed": seed, **run_means(run)})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sources", nargs="+", type=Path, metavar="RES")
    ap.add_argument("--out", type=Path, required=True, metavar="CSV")
    args = ap.parse_args(argv)
    try:
        rows = collect(args.sources)
    except ProasError as exc:  # a damaged metrics.jsonl: one line, nothing written
        raise SystemExit(str(exc)) from None
    if not rows:
        raise SystemExit("no finished runs under " + " ".join(map(str, args.sources)))
    atomic_write_text(args.out, csv_text(["env", "row", "seed", *KEYS], rows))
    by: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        by.setdefault((r["env"], r["row"]), []).append(r)
    print("env,row,seeds," + ",".join(KEYS))
    for (env, row), rs in sorted(by.items()):
        cells = []
        for k in KEYS:
            v = [r[k] for r in rs if r[k] is not None]
            cells.append(f"{statistics.fmean(v):.3f}" if v else "")
        print(f"{env},{row},{len(rs)}," + ",".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
