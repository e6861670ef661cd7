"""The table of results/lm/sft_sweep/ from the runs of scripts/lm_sft_sweep.sh.

Each row of the sweep is a run directory ``RUNS/ID`` (``proas sft``: metrics.jsonl, summary.json
when it finished) with ``RUNS/ID.row`` (the sweep's row: env, tokenizer span, model size, score
norm, peak rate, epochs, batch, optionally the seed) and ``RUNS/ID.log.txt`` or ``RUNS/ID.log`` (its output)::

    python scripts/analyse_sft_sweep.py results/lm/sft_sweep/runs
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

FIELDS = ("id", "env", "span", "size", "norm", "lr", "epochs", "batch")


def read_run(runs: Path, row_file: Path) -> dict:
    """One row: its spec, per-epoch validation SR and training NLL, wall time and how it ended."""
    parts = row_file.read_text(encoding="utf-8").strip().split("|")
    if len(parts) == len(FIELDS):
        parts.append("0")  # rows without a seed ran seed 0
    if len(parts) != len(FIELDS) + 1:
        raise ValueError(f"{row_file}: expected {len(FIELDS)} or {len(FIELDS) + 1} '|'-separated fields, "
                         f"got {len(parts)}")
    spec = dict(zip((*FIELDS, "seed"), parts))
    run = runs / spec["id"]
    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()] \
        if (run / "metrics.jsonl").exists() else []
    log = next((p for p in (runs / f"{spec['id']}.log.txt", runs / f"{spec['id']}.log") if p.exists()), None)
    text = log.read_text(encoding="utf-8", errors="replace") if log else ""
    params = re.search(r"model: ([\d.]+M) parameters", text)
    done = run / "summary.json"
    summary = json.loads(done.read_text(encoding="utf-8")) if done.exists() else None
    if summary is not None:
        ended = "done"
    elif "diverged" in text:
        ended = "diverged"
    elif "rc 124" in text:
        ended = "time limit"
    else:
        ended = "unknown"
    val = [(r["step"], r["val/sr"]) for r in recs if "val/sr" in r]
    best = max(val, key=lambda v: (v[1], -v[0])) if val else None
    return {**spec, "params": params.group(1) if params else "", "ended": ended,
            "val": val, "nll": [r["sft/nll"] for r in recs if "sft/nll" in r], "best": best,
            "wall_s": summary["wall_s"] if summary else None}


def table(rows: list[dict]) -> str:
    out = ["| env | tokenizer span | model | score norm | peak lr | epochs (planned) "
           "| val SR by epoch, % (epoch 0 = untrained) | best val SR % (epoch) | training NLL by epoch | wall min "
           "| ended |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["env"], -(r["best"][1] if r["best"] else -1))):
        vals = " / ".join(f"{100 * v:.1f}" for _, v in r["val"])
        nll = " / ".join(f"{x:.3f}" for x in r["nll"]) or "–"
        best = f"**{100 * r['best'][1]:.1f}** ({r['best'][0]})" if r["best"] else "–"
        wall = f"{r['wall_s'] / 60:.1f}" if r["wall_s"] is not None and math.isfinite(r["wall_s"]) else "–"
        out.append(f"| {r['env']} | {r['span']} | {r['size']} {r['params']} | {r['norm']} | {r['lr']} "
                   f"| {len(r['nll'])} ({r['epochs']}) | {vals} | {best} | {nll} | {wall} | {r['ended']} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, help="the sweep's runs directory (RUNS/ID, RUNS/ID.row)")
    args = ap.parse_args(argv)
    rows_files = sorted(args.runs.glob("*.row"))
    if not rows_files:
        print(f"analyse_sft_sweep: no *.row files in {args.runs}", file=sys.stderr)
        return 1
    try:
        rows = [read_run(args.runs, f) for f in rows_files]
        # the model's size is logged by the row that wrote it; rows sharing the model take it from there
        params = {(r["env"], r["span"], r["size"]): r["params"] for r in rows if r["params"]}
        for r in rows:
            r["params"] = r["params"] or params.get((r["env"], r["span"], r["size"]), "")
    except (OSError, ValueError, KeyError) as e:
        print(f"analyse_sft_sweep: {e}", file=sys.stderr)
        return 1
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
