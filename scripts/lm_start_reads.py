"""The lm study's start readings (docs/lm-study-protocol.md, the 2026-12-08 amendment): each SFT
start of a screen validated again at further sampling seeds, so that the bar's reference is the
mean of several readings of the start instead of one.

    python scripts/lm_start_reads.py RESULTS --seeds 1 2 3 4 [--wait SECONDS]

For every finished SFT run RESULTS/<env>/sft_*/seed<N>/ (one with its summary.json), and every
seed of ``--seeds`` not read yet, `proas eval RUN --seed S --json` (the run's best checkpoint, its
own validation tasks and temperature) adds one line to RESULTS/start_reads.jsonl: env, row, the
run's seed, the evaluation's seed, SR and the checkpoint. The file is rewritten atomically after
each reading, and a reading already there is not made again, so the script can run beside a grid
and again later. ``--wait S`` keeps it going until no SFT run is left unfinished (or S seconds
have passed): start it as the grid starts, and it reads each start as soon as it exists.
`scripts/lm_screen_verdict.py` reads the file.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from proas.fileio import atomic_write_text

READS = "start_reads.jsonl"


def load_reads(results: Path) -> list[dict]:
    """The readings made so far; a line that is not a JSON object (a torn write cannot happen,
    the file is replaced whole, but a hand edit can) is an error."""
    path = results / READS
    if not path.is_file():
        return []
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if not isinstance(rec, dict):
            raise ValueError(f"{path}:{n}: not a JSON object")
        out.append(rec)
    return out


def sft_runs(results: Path) -> tuple[list[Path], list[Path]]:
    """(finished, unfinished) SFT run directories under RESULTS."""
    runs = sorted(p for p in results.glob("*/sft_*/seed*") if p.is_dir())
    return [p for p in runs if (p / "summary.json").is_file()], [p for p in runs if not (p / "summary.json").is_file()]


def read_once(results: Path, seeds: list[int], python: str = sys.executable) -> int:
    """Every missing reading of every finished SFT run; returns how many were made."""
    reads = load_reads(results)
    have = {(r.get("env"), r.get("row"), r.get("seed"), r.get("eval_seed")) for r in reads}
    made = 0
    for run in sft_runs(results)[0]:
        env, row, seed = run.parent.parent.name, run.parent.name, int(run.name.removeprefix("seed"))
        for s in seeds:
            if (env, row, seed, s) in have:
                continue
            out = subprocess.run([python, "-m", "proas", "eval", str(run), "--seed", str(s), "--json"],
                                 capture_output=True, text=True)
            lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
            if out.returncode != 0 or not lines:
                err = (out.stderr.strip().splitlines() or ["no output"])[-1]
                print(f"{env}/{row}/seed{seed}: eval at seed {s} failed: {err}", file=sys.stderr)
                continue
            res = json.loads(lines[-1])
            reads.append({"env": env, "row": row, "seed": seed, "eval_seed": s, "sr": res["sr"],
                          "checkpoint": res.get("checkpoint"), "step": res.get("step")})
            atomic_write_text(results / READS, "".join(json.dumps(r) + "\n" for r in reads))
            print(f"{env}/{row}/seed{seed}: seed {s}: SR {100 * res['sr']:.1f}%", flush=True)
            made += 1
    return made


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("--seeds", type=int, nargs="+", required=True, help="the evaluations' sampling seeds")
    ap.add_argument("--wait", type=float, default=0.0,
                    help="keep reading until no SFT run is unfinished, for at most this many seconds")
    args = ap.parse_args(argv)
    if min(args.seeds) < 0 or not args.wait >= 0:
        print(f"error: --seeds {' '.join(map(str, args.seeds))} --wait {args.wait:g}: seeds and seconds are "
              "numbers from 0", file=sys.stderr)
        return 2
    if not args.results.is_dir():
        print(f"error: {args.results} is not a directory", file=sys.stderr)
        return 2
    end = time.monotonic() + args.wait
    try:
        while True:
            read_once(args.results, args.seeds)
            done, pending = sft_runs(args.results)
            if (done and not pending) or time.monotonic() >= end:
                break
            time.sleep(10)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
