"""The lm study's divergence screen, read by the rules that docs/lm-study-protocol.md fixed before it
ran ("Narrowing", rules 1 and 2).

For each env, start (weak, mid, comp) and setting (minibatch x AdamW rate x KL coefficient) of
`lm_screen.yaml`: the step-0 validation SR, the mean validation SR over the validations at steps
20-40, their difference, for a run that went on past step 40 the same over steps 50-150 (the
primary metric's window, as far as it got), how far the run got, and the verdict: **dropped**
when the mean lies more than 10 points below step 0 or the run stopped on a non-finite loss, else
**kept**. Then the KL rule: for each
rate, the KL-0 and KL-0.01 runs' steps-20-40 means per env and start, and whether every such pair
lies within 2 points (then KL stays at 0.01). Also the SFT starts' best validation SR.

    python scripts/lm_screen_verdict.py RESULTS [--csv FILE] [--steps FILE] [--diagnostics FILE] > screen.md
    python scripts/lm_screen_verdict.py STEPS.csv [--diagnostics FILE]   # the diagnostics table alone

RESULTS is the screen's `--out` (RESULTS/<env>/<row>/seed200/metrics.jsonl). ``--steps`` also
writes every run's metrics per step (SFT runs per epoch): validation SR, training SR and score,
entropy, KL, gradient norm, env-error rate, seconds a step, and the trainer's group and
length-bias diagnostics where the run recorded them.

Where RESULTS holds start_reads.jsonl (scripts/lm_start_reads.py: each SFT start validated again
at further sampling seeds), a second table reads the primary metric against the mean of the
start's readings (the run's step-0 reading and those), the bar's reference since the protocol's
2026-12-08 amendment; the CSV's ``start_mean``, ``n_start`` and ``delta_50_150_vs_start`` hold it.

The report ends with the diagnostics the protocol names for a start that RL does not lift, one
row per RL run, read from those per-step metrics: training SR and score over the first and the
last ten steps, the entropy of a decision over the first and last five, the largest mean KL to
the start over an aligned ten-step window (1-10, 11-20, ...), the share of groups holding a
success (and of groups whose rewards are all equal), the env-error rate, and how often a
shortest candidate was chosen against a uniform choice's rate. Given a per-step CSV that
``--steps`` wrote (such as the shipped ``results/lm/screen/*_steps.csv``) instead of RESULTS, it
prints that table alone. ``--block N`` adds each RL run's training SR (mean) and seconds a step
(median) over aligned N-step blocks.
"""

from __future__ import annotations

import argparse
import csv
import re
import statistics
import sys
from pathlib import Path

from proas.errors import ProasError
from proas.experiments.datafiles import csv_text
from proas.experiments.heldout import WINDOW as PRIMARY  # the primary metric's validations (steps 50-150)
from proas.experiments.heldout import run_metrics
from proas.fileio import atomic_write_text
from proas.train.config import AlgoConfig

ROW = re.compile(r"^grpo_(weak|mid5|mid|comp)(?:_mb(\d+))?_lr([0-9.e-]+)_kl([0-9.]+)$")
DROP_PTS = 10.0
KL_PTS = 2.0
WINDOW = (20, 40)
#: the minibatch of a row that names none (algo.minibatch_size's default)
DEFAULT_MB = str(AlgoConfig().minibatch_size)


def stop_reason(run: Path) -> str:
    """The last line naming an error in the run's log since its last start, or ''. An error of
    an earlier attempt that the run resumed from (the trainer's "resuming run:" line) is not
    how the run stopped: a run that ran out of GPU memory, then resumed and stopped at the time
    limit, stopped at the time limit."""
    for name in ("train.log.txt", "train.log"):
        log = run / name
        if log.exists():
            text = log.read_text(errors="replace").splitlines()
            starts = [i for i, x in enumerate(text) if x.startswith("resuming run:")]
            lines = [x for x in text[starts[-1] if starts else 0:] if "not finite" in x or "Error" in x]
            if lines:
                return lines[-1].strip()[:160]
    return ""


#: the per-step CSV's columns: (column, metrics key, scale)
STEP_COLUMNS = (("val_sr", "val/sr", 100), ("train_sr", "train/sr", 100), ("train_score", "train/score", 1),
                ("entropy", "loss/entropy", 1), ("kl", "loss/kl", 1), ("grad_norm", "loss/grad_norm", 1),
                ("error_rate", "train/error_rate", 1), ("step_s", "time/step", 1),
                ("groups_flat", "train/groups_flat", 1), ("groups_no_success", "train/groups_no_success", 1),
                ("chose_shortest", "rollout/chose_shortest", 1),
                ("shortest_by_chance", "rollout/shortest_by_chance", 1))


def step_rows(results: Path, seed: int = 200) -> list[dict]:
    """Every run's records (RESULTS/<env>/<row>/seed<seed>), one row a step; a metric a record
    lacks is empty, and a column no run recorded is left out."""
    rows = []
    for mfile in sorted(results.glob(f"*/*/seed{seed}/metrics.jsonl")):
        env, row = mfile.parent.parent.parent.name, mfile.parent.parent.name
        for r in run_metrics(mfile.parent):
            out = {"env": env, "row": row, "seed": seed, "step": r.get("step")}
            for name, key, scale in STEP_COLUMNS:
                v = r.get(key)
                out[name] = round(v * scale, 4) if isinstance(v, (int, float)) and not isinstance(v, bool) else ""
            rows.append(out)
    used = [name for name, _, _ in STEP_COLUMNS if any(r[name] != "" for r in rows)]
    return [{k: r[k] for k in ("env", "row", "seed", "step", *used)} for r in rows]


def _num(v) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(v) if v not in ("", None) else None
    except (TypeError, ValueError):
        return None


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _rl_runs(steps: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """Per-step records grouped by RL run (rows named grpo_*): (env, row) -> records."""
    runs: dict[tuple[str, str], list[dict]] = {}
    for r in steps:
        if str(r.get("row", "")).startswith("grpo_"):
            runs.setdefault((str(r["env"]), str(r["row"])), []).append(r)
    return runs


def diagnostics(steps: list[dict]) -> list[dict]:
    """One row per RL run (rows named grpo_*) of per-step records as step_rows gives them or as
    its CSV holds them: the diagnostics of the module docstring. Percentages are in points; a
    diagnostic no record holds is None."""
    out = []
    for (env, row), recs in sorted(_rl_runs(steps).items()):
        def series(col: str) -> list[tuple[int, float]]:
            pts = []
            for r in recs:
                step, v = _num(r.get("step")), _num(r.get(col))
                if step is not None and step >= 1 and v is not None:
                    pts.append((int(step), v))
            return sorted(pts)

        def ends(col: str, k: int, scale: float = 1.0) -> tuple[float | None, float | None]:
            pts = series(col)
            first = _mean([v * scale for _, v in pts[:k]])
            return first, (_mean([v * scale for _, v in pts[-k:]]) if len(pts) >= 2 * k else None)

        def whole(col: str, scale: float = 1.0) -> float | None:
            return _mean([v * scale for _, v in series(col)])

        sr0, sr1 = ends("train_sr", 10)
        sc0, sc1 = ends("train_score", 10)
        en0, en1 = ends("entropy", 5)
        windows: dict[int, list[float]] = {}
        for step, v in series("kl"):
            windows.setdefault((step - 1) // 10, []).append(v)
        full = {w: _mean(v) for w, v in windows.items() if len(v) == 10}
        kl_w = max(full, key=lambda w: full[w]) if full else None
        no_success = whole("groups_no_success", 100.0)
        last = max((int(s) for s, _ in series("train_sr")), default=None)
        out.append({"env": env, "row": row, "last_step": last,
                    "train_sr_first10": sr0, "train_sr_last10": sr1,
                    "score_first10": sc0, "score_last10": sc1,
                    "entropy_first5": en0, "entropy_last5": en1,
                    "kl_max10": None if kl_w is None else full[kl_w],
                    "kl_max10_steps": "" if kl_w is None else f"{10 * kl_w + 1}-{10 * kl_w + 10}",
                    "groups_with_success": None if no_success is None else 100.0 - no_success,
                    "groups_flat": whole("groups_flat", 100.0),
                    "error_rate": whole("error_rate", 100.0),
                    "chose_shortest": whole("chose_shortest", 100.0),
                    "shortest_by_chance": whole("shortest_by_chance", 100.0)})
    return out


def blocks(steps: list[dict], size: int) -> list[dict]:
    """Per RL run and aligned block of ``size`` steps (1-size, size+1-2*size, ...): the mean
    training SR (%) and the median seconds a step, from per-step records as ``diagnostics``
    reads them."""
    out = []
    for (env, row), recs in sorted(_rl_runs(steps).items()):
        by: dict[int, list[dict]] = {}
        for r in recs:
            step = _num(r.get("step"))
            if step is not None and step >= 1:
                by.setdefault((int(step) - 1) // size, []).append(r)
        for b, rs in sorted(by.items()):
            sr = [v for v in (_num(r.get("train_sr")) for r in rs) if v is not None]
            sec = [v for v in (_num(r.get("step_s")) for r in rs) if v is not None]
            last = max(int(_num(r["step"])) for r in rs)
            out.append({"env": env, "row": row, "steps": f"{b * size + 1}-{last}", "train_sr": _mean(sr),
                        "step_s_median": statistics.median(sec) if sec else None})
    return out


def print_blocks(rows: list[dict], size: int) -> None:
    print(f"\nBy {size}-step block (training SR in %, the mean; seconds a step, the median):\n")
    print("| env | run | steps | training SR | seconds a step |")
    print("|---|---|---|---|---|")
    for r in rows:
        sec = "–" if r["step_s_median"] is None else f"{r['step_s_median']:.1f}"
        print(f"| {r['env']} | {r['row']} | {r['steps']} | {fmt(r['train_sr'])} | {sec} |")


def print_diagnostics(diag: list[dict]) -> None:
    f2 = lambda x: "–" if x is None else f"{x:.2f}"  # noqa: E731
    print("\nDiagnostics (per-step metrics of each RL run; SR, shares and rates in %):\n")
    print("| env | run | last step | training SR, steps 1-10 → last 10 | score, first 10 → last 10 "
          "| entropy, first 5 → last 5 | largest KL, 10-step window | groups with a success "
          "| flat groups | env errors | shortest chosen (by chance) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for d in diag:
        kl = f"{f2(d['kl_max10'])} ({d['kl_max10_steps']})" if d["kl_max10"] is not None else "–"
        short = (f"{fmt(d['chose_shortest'])} ({fmt(d['shortest_by_chance'])})"
                 if d["chose_shortest"] is not None else "–")
        print(f"| {d['env']} | {d['row']} | {d['last_step'] if d['last_step'] is not None else '–'} "
              f"| {fmt(d['train_sr_first10'])} → {fmt(d['train_sr_last10'])} "
              f"| {f2(d['score_first10'])} → {f2(d['score_last10'])} "
              f"| {f2(d['entropy_first5'])} → {f2(d['entropy_last5'])} | {kl} "
              f"| {fmt(d['groups_with_success'])} | {fmt(d['groups_flat'])} | {fmt(d['error_rate'])} | {short} |")


def _write_diagnostics(path: Path, diag: list[dict]) -> None:
    cols = list(diag[0]) if diag else ["env", "row"]
    rows = [{k: ("" if v is None else round(v, 4) if isinstance(v, float) else v) for k, v in d.items()} for d in diag]
    atomic_write_text(path, csv_text(cols, rows))


def screen_rows(results: Path, seed: int = 200) -> list[dict]:
    rows = []
    for mfile in sorted(results.glob(f"*/grpo_*/seed{seed}/metrics.jsonl")):
        m = ROW.match(mfile.parent.parent.name)
        if not m:
            continue
        recs = run_metrics(mfile.parent)
        val = {r["step"]: r["val/sr"] for r in recs if isinstance(r.get("val/sr"), (int, float))}
        last = max((r.get("step", 0) for r in recs), default=0)
        window = [100 * v for s, v in val.items() if WINDOW[0] <= s <= WINDOW[1]]
        primary = [100 * v for s, v in val.items() if PRIMARY[0] <= s <= PRIMARY[1] and s % 10 == 0]
        step0 = 100 * val[0] if 0 in val else None
        mean = sum(window) / len(window) if window else None
        reason = stop_reason(mfile.parent)
        nonfinite = "not finite" in reason
        complete = WINDOW[1] in val
        if nonfinite:
            verdict = "dropped (non-finite)"
        elif step0 is None or mean is None:
            verdict = "no reading"
        elif mean < step0 - DROP_PTS:
            verdict = "dropped" if complete else "dropped (so far)"
        else:
            verdict = "kept" if complete else "kept (so far)"
        later = sum(primary) / len(primary) if primary else None
        rows.append({"env": mfile.parent.parent.parent.name, "start": m.group(1), "mb": m.group(2) or DEFAULT_MB,
                     "lr": m.group(3), "kl": m.group(4), "step0": step0, "mean_20_40": mean,
                     "n_val_20_40": len(window), "delta": None if step0 is None or mean is None else mean - step0,
                     "mean_50_150": later, "n_val_50_150": len(primary),
                     "delta_50_150": None if step0 is None or later is None else later - step0,
                     "last_step": last, "verdict": verdict, "stop": reason})
    return rows


def start_readings(results: Path, seed: int = 200) -> dict[tuple[str, str], list[float]]:
    """(env, start) -> the SR (%) readings of that start at further sampling seeds, from
    RESULTS/start_reads.jsonl (scripts/lm_start_reads.py, whose reader this is); {} when there is
    none."""
    from lm_start_reads import READS, load_reads  # this script's folder is on sys.path

    try:
        reads = load_reads(results)
    except (ValueError, OSError) as exc:
        raise ProasError(str(exc)) from None
    out: dict[tuple[str, str], list[float]] = {}
    for n, rec in enumerate(reads, 1):
        sr = rec.get("sr")
        if not isinstance(sr, (int, float)) or isinstance(sr, bool):
            raise ProasError(f"{results / READS}: reading {n}: not a start reading (no numeric sr)")
        m = re.match(r"^sft_(.+)_" + re.escape(str(rec.get("env"))) + "$", str(rec.get("row", "")))
        if m and rec.get("seed") == seed:
            out.setdefault((str(rec["env"]), m.group(1)), []).append(100 * float(sr))
    return out


def add_start_reference(rows: list[dict], reads: dict[tuple[str, str], list[float]]) -> None:
    """The bar's reference by the 2026-12-08 amendment: the mean of the start's readings, the
    run's step-0 reading and those of start_reads.jsonl; and the primary metric against it."""
    for r in rows:
        more = reads.get((r["env"], r["start"]), [])
        pts = ([r["step0"]] if r["step0"] is not None else []) + more
        r["start_mean"] = sum(pts) / len(pts) if more else None
        r["n_start"] = len(pts) if more else 0
        r["delta_50_150_vs_start"] = (None if r["start_mean"] is None or r["mean_50_150"] is None
                                      else r["mean_50_150"] - r["start_mean"])


def sft_rows(results: Path, seed: int = 200) -> list[tuple[str, str, float | None, int]]:
    out = []
    for mfile in sorted(results.glob(f"*/sft_*/seed{seed}/metrics.jsonl")):
        vals = [100 * r["val/sr"] for r in run_metrics(mfile.parent) if isinstance(r.get("val/sr"), (int, float))]
        out.append((mfile.parent.parent.parent.name, mfile.parent.parent.name, max(vals) if vals else None, len(vals)))
    return out


def fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path, help="the screen's --out, or a per-step CSV that --steps wrote")
    ap.add_argument("--seed", type=int, default=200)
    ap.add_argument("--csv", type=Path, help="also write the per-run rows here")
    ap.add_argument("--steps", type=Path, help="also write every run's metrics per step here")
    ap.add_argument("--diagnostics", type=Path, help="also write the diagnostics table here (CSV)")
    ap.add_argument("--block", type=int, default=0, metavar="N",
                    help="also print each RL run's training SR and seconds a step by N-step block")
    args = ap.parse_args(argv)
    if args.block < 0:
        print(f"error: --block {args.block}: give a number of steps, or 0 for no blocks", file=sys.stderr)
        return 2
    if args.results.is_file() and args.results.suffix == ".csv":
        try:
            with args.results.open(newline="") as fh:
                steps = list(csv.DictReader(fh))
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            print(f"error: {args.results}: {exc}", file=sys.stderr)
            return 2
        if not steps or not {"env", "row", "step"} <= set(steps[0]):
            print(f"error: {args.results} is no per-step CSV (needs the columns env, row, step)", file=sys.stderr)
            return 2
        diag = diagnostics(steps)
        print(f"# lm screen diagnostics: {args.results}")
        print_diagnostics(diag)
        if args.block > 0:
            print_blocks(blocks(steps, args.block), args.block)
        if args.diagnostics:
            _write_diagnostics(args.diagnostics, diag)
        return 0
    if not args.results.is_dir():
        print(f"error: {args.results} is not a directory", file=sys.stderr)
        return 2
    try:  # the trainer's reader: a torn last line skipped, a resumed step's last record kept
        rows = screen_rows(args.results, args.seed)
        sfts = sft_rows(args.results, args.seed)
        reads = start_readings(args.results, args.seed)
        add_start_reference(rows, reads)
    except ProasError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"# lm screen, seed {args.seed}: validation SR (%) on the tuning tasks\n")
    print("SFT starts (best validation SR over the epochs):\n")
    for env, row, best, n in sfts:
        print(f"- {env} {row}: {fmt(best)} ({n} validations)")
    print("\n| env | start | minibatch | AdamW rate | KL | step 0 | mean, steps 20-40 | difference "
          "| mean, steps 50-150 (n) | difference | last step | verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    key = lambda r: (r["env"], r["start"], -int(r["mb"]), float(r["lr"]), float(r["kl"]))  # noqa: E731
    for r in sorted(rows, key=key):
        later = f"{fmt(r['mean_50_150'])} ({r['n_val_50_150']})" if r["n_val_50_150"] else "–"
        print(f"| {r['env']} | {r['start']} | {r['mb']} | {r['lr']} | {r['kl']} | {fmt(r['step0'])} "
              f"| {fmt(r['mean_20_40'])} | {fmt(r['delta'])} | {later} | {fmt(r['delta_50_150'])} "
              f"| {r['last_step']} | {r['verdict']} |")
    if reads:
        print("\nAgainst the start's readings (its step-0 reading and those of start_reads.jsonl, "
              "the bar's reference):\n")
        print("| env | start | minibatch | AdamW rate | KL | start (readings) | mean, steps 50-150 | difference |")
        print("|---|---|---|---|---|---|---|---|")
        for r in sorted(rows, key=key):
            ref = f"{fmt(r['start_mean'])} ({r['n_start']})" if r["start_mean"] is not None else "–"
            print(f"| {r['env']} | {r['start']} | {r['mb']} | {r['lr']} | {r['kl']} | {ref} "
                  f"| {fmt(r['mean_50_150'])} | {fmt(r['delta_50_150_vs_start'])} |")
    print(f"\nKL rule (steps 20-40 means, KL 0 minus KL 0.01; within {KL_PTS:g} points on every pair keeps KL 0.01):\n")
    by = {(r["env"], r["start"], r["mb"], r["lr"], r["kl"]): r["mean_20_40"] for r in rows}
    diffs = []
    for (env, start, mb, lr, kl), mean in sorted(by.items()):
        other = by.get((env, start, mb, lr, "0.01"))
        if kl == "0" and mean is not None and other is not None:
            diffs.append(mean - other)
            print(f"- {env} {start}{'' if mb == DEFAULT_MB else f' minibatch {mb}'} lr {lr}: {mean - other:+.1f}")
    if diffs:
        within = all(abs(d) <= KL_PTS for d in diffs)
        print(f"\nKL rule: {'every pair within' if within else 'not every pair within'} {KL_PTS:g} points "
              f"({len(diffs)} pairs)" + (" -> KL stays 0.01" if within else " -> both KL values go on"))
    steps = step_rows(args.results, args.seed)
    diag = diagnostics(steps)
    if diag:
        print_diagnostics(diag)
    if args.block > 0:
        print_blocks(blocks(steps, args.block), args.block)
    if args.diagnostics:
        _write_diagnostics(args.diagnostics, diag)
    if args.csv:
        atomic_write_text(args.csv, csv_text(list(rows[0]) if rows else ["env"], sorted(rows, key=key)))
    if args.steps:
        atomic_write_text(args.steps, csv_text(list(steps[0]) if steps else ["env"], steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
