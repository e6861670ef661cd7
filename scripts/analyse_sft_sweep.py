"""The table of results/lm/sft_sweep/ from the runs of scripts/lm_sft_sweep.sh.

Each row of the sweep is a run directory ``RUNS/ID`` (``proas sft``: ``metrics.jsonl``) with its
output ``RUNS/ID.log.txt`` or ``RUNS/ID.log``. What the row is (env, tokenizer span, model size,
score norm, peak rate, epochs, batch, seed) and how it ended come, in a pack fresh from the
device, from ``RUNS/ID.row`` (the sweep's row line) and ``RUNS/ID/summary.json``; ``--csv``
writes them as ``rows.csv``, one line per row, which is what results/ keeps (its rule holds no
JSON summaries) and what this script reads when it is there::

    python scripts/analyse_sft_sweep.py RUNS --csv RUNS/rows.csv    # on the unpacked pack
    python scripts/analyse_sft_sweep.py results/lm/sft_sweep/runs    # the kept copy: the same table
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
from pathlib import Path

from proas.errors import ProasError
from proas.experiments.datafiles import csv_text
from proas.experiments.heldout import run_metrics
from proas.fileio import atomic_write_text

FIELDS = ("id", "env", "span", "size", "norm", "lr", "epochs", "batch")
#: optional trailing fields of a row line, with the value a row without them ran
OPTIONAL = (("seed", "0"), ("seq_loss", "0"))
CSV_FIELDS = (*FIELDS, "seed", "seq_loss", "params", "ended", "wall_s")


def _row_spec(row_file: Path) -> dict:
    parts = row_file.read_text(encoding="utf-8").strip().split("|")
    if not len(FIELDS) <= len(parts) <= len(FIELDS) + len(OPTIONAL):
        raise ValueError(f"{row_file}: expected {len(FIELDS)} to {len(FIELDS) + len(OPTIONAL)} '|'-separated "
                         f"fields, got {len(parts)}")
    parts += [default for _, default in OPTIONAL[len(parts) - len(FIELDS):]]
    return dict(zip((*FIELDS, *(name for name, _ in OPTIONAL)), parts))


def _from_pack(runs: Path, row_file: Path) -> dict:
    """A row's spec, model size, end and wall time from the device's pack."""
    spec = _row_spec(row_file)
    log = _log(runs, spec["id"])
    text = log.read_text(encoding="utf-8", errors="replace") if log else ""
    params = re.search(r"model: ([\d.]+M) parameters", text)
    done = runs / spec["id"] / "summary.json"
    summary = json.loads(done.read_text(encoding="utf-8")) if done.exists() else None
    if summary is not None:
        ended = "done"
    elif "diverged" in text:
        ended = "diverged"
    elif "rc 124" in text:
        ended = "time limit"
    else:
        ended = "unknown"
    return {**spec, "params": params.group(1) if params else "", "ended": ended,
            "wall_s": f"{summary['wall_s']:.1f}" if summary else ""}


def _log(runs: Path, rid: str) -> Path | None:
    return next((p for p in (runs / f"{rid}.log.txt", runs / f"{rid}.log") if p.exists()), None)


def read_rows(runs: Path) -> list[dict]:
    """Every row's spec and end: from ``rows.csv`` when there, else from the pack."""
    kept = runs / "rows.csv"
    if kept.exists():
        with open(kept, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        if not rows or set(CSV_FIELDS) - set(rows[0]):
            raise ValueError(f"{kept}: expected the columns {', '.join(CSV_FIELDS)}")
        return rows
    row_files = sorted(runs.glob("*.row"))
    if not row_files:
        raise ValueError(f"no rows.csv and no *.row files in {runs}")
    rows = [_from_pack(runs, f) for f in row_files]
    # the model's size is logged by the row that wrote it; rows sharing the model take it from there
    params = {(r["env"], r["span"], r["size"]): r["params"] for r in rows if r["params"]}
    for r in rows:
        r["params"] = r["params"] or params.get((r["env"], r["span"], r["size"]), "")
    return rows


def with_metrics(runs: Path, row: dict) -> dict:
    """The row with its per-epoch validation SR and training NLL (``metrics.jsonl``)."""
    # a row stopped by the time limit may end on a torn line: the project's reader skips it
    recs = run_metrics(runs / row["id"])
    val = [(r["step"], r["val/sr"]) for r in recs if "val/sr" in r]
    return {**row, "val": val, "nll": [r["sft/nll"] for r in recs if "sft/nll" in r],
            "best": max(val, key=lambda v: (v[1], -v[0])) if val else None}


def table(rows: list[dict]) -> str:
    out = ["| env | tokenizer span | model | score norm | peak lr | epochs (planned) "
           "| val SR by epoch, % (epoch 0 = untrained) | best val SR % (epoch) | training NLL by epoch | wall min "
           "| ended |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["env"], -(r["best"][1] if r["best"] else -1))):
        vals = " / ".join(f"{100 * v:.1f}" for _, v in r["val"])
        nll = " / ".join(f"{x:.3f}" for x in r["nll"]) or "–"
        best = f"**{100 * r['best'][1]:.1f}** ({r['best'][0]})" if r["best"] else "–"
        wall = float(r["wall_s"]) if r["wall_s"] else math.nan
        wall_min = f"{wall / 60:.1f}" if math.isfinite(wall) else "–"
        seed = f", seed {r['seed']}" if r["seed"] not in ("", "0") else ""
        seq = f" + sequence {r['seq_loss']}" if r.get("seq_loss", "0") not in ("", "0") else ""
        out.append(f"| {r['env']}{seed} | {r['span']} | {r['size']} {r['params']} | {r['norm']}{seq} | {r['lr']} "
                   f"| {len(r['nll'])} ({r['epochs']}) | {vals} | {best} | {nll} | {wall_min} | {r['ended']} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, help="the sweep's runs directory (RUNS/ID, and RUNS/rows.csv or RUNS/ID.row)")
    ap.add_argument("--csv", type=Path, help="also write each row's spec and end here (rows.csv)")
    args = ap.parse_args(argv)
    try:
        rows = read_rows(args.runs)
        full = [with_metrics(args.runs, r) for r in rows]
    except (OSError, ValueError, KeyError, ProasError) as e:
        print(f"analyse_sft_sweep: {e}", file=sys.stderr)
        return 1
    if args.csv:
        atomic_write_text(args.csv, csv_text(CSV_FIELDS, rows))
    print(table(full))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
