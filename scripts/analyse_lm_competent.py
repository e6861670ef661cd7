"""Tables of the `lm_competent` study (``scripts/run_lm_competent.sh``; issue #25, items 4 and 5).

    python scripts/analyse_lm_competent.py RUNS [--csv-dir DIR]

RUNS is the study's results directory (``lm_competent.tgz`` unpacked) or the copy results/lm/
keeps (``ENV/ROW/seedS/metrics.jsonl``, read as the held-out analysis reads runs: a torn last
line skipped, a resumed run's repeated step counted once, its last record). Printed as markdown:

1. **SFT** (item 4): per env and SFT row, each seed's validation SR by epoch (epoch 0 = untrained),
   its best over epochs 1 and on, and the minutes of training and validation up to that epoch
   (``time/train_s`` + ``time/val_s``, epoch 0's validation included), whether it ended on its own,
   and its training loss by epoch (``sft/nll``, the choice loss, and ``sft/sequence_nll`` where the
   whole-sequence loss is on); then the mean of the seeds' best, set against the scorer's SFT bar
   (household 44.0%, shop 61.7%).
2. **RL** (item 5), read as fixed before the runs: per start (competent, weak) and seed, GRPO and
   GRPO+ProAS, validation SR (temperature 0.4, the shipped 128 tasks) at step 0 and, as the
   primary figure, its mean over the validations after step 0 up to step K, where K is the last
   validated step that every run of that start reached (both arms, every seed), so both arms are
   read over the same steps; beside it the best and the last validation SR up to K, training SR
   over steps 1-10 and over the 10 steps up to K, and the env-error rate and the KL to the start
   (``loss/kl``) over those 10 steps. Then per start and arm the mean over seeds of the step-0 and the
   primary figure and their difference (did RL move held-out SR at all), and per seed GRPO+ProAS
   minus GRPO on the primary figure, and the mean of those differences.

With ``--csv-dir``, also writes ``sft_per_seed.csv`` and ``rl_per_seed.csv`` there: one line per
run, every figure above.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from proas.errors import ProasError
from proas.experiments.datafiles import csv_text
from proas.experiments.heldout import run_metrics
from proas.fileio import atomic_write_text

#: the scorer's SFT row, best validation SR, mean of seeds 0-2 (issue #25's bar)
BAR = {"household": 44.0, "shop": 61.7}
#: start -> (its SFT row, GRPO row, GRPO+ProAS row)
STARTS = {"competent": ("sft_seq_shop", "grpo_comp", "grpo_proas_comp"),
          "weak": ("sft_weak_shop", "grpo_weak", "grpo_proas_weak")}
ENV_RL = "shop"


def _seed(run: Path) -> int:
    return int(run.name.removeprefix("seed"))


def sft_rows(res: Path) -> list[dict]:
    """One dict per SFT run: env, row, seed, SR by epoch, best (epoch), minutes to the best."""
    out = []
    for m in sorted(res.glob("*/sft_*/seed*/metrics.jsonl")):
        run = m.parent
        recs = run_metrics(run)
        val = [(r["step"], 100 * r["val/sr"]) for r in recs if isinstance(r.get("val/sr"), (int, float))]
        trained = [v for v in val if v[0] >= 1]
        best = max(trained, key=lambda v: (v[1], -v[0])) if trained else None
        minutes = (sum(r.get("time/train_s", 0.0) + r.get("time/val_s", 0.0) for r in recs
                       if best is not None and r.get("step", 0) <= best[0]) / 60) if best else None
        out.append({"env": run.parent.parent.name, "row": run.parent.name, "seed": _seed(run),
                    "val": val, "best": best, "minutes": minutes, "finished": _finished(run),
                    "nll": [r["sft/nll"] for r in recs if isinstance(r.get("sft/nll"), (int, float))],
                    "seq_nll": [r["sft/sequence_nll"] for r in recs
                                if isinstance(r.get("sft/sequence_nll"), (int, float))]})
    return out


def _finished(run: Path) -> bool:
    """Whether an SFT run ended on its own: its ``summary.json``, or in a copy results/ keeps
    (no JSON there), the closing line of its log (``train.log`` or ``train.log.txt``)."""
    if (run / "summary.json").exists():
        return True
    log = next((run / n for n in ("train.log", "train.log.txt") if (run / n).is_file()), None)
    return log is not None and "best checkpoint:" in log.read_text(errors="replace")


def rl_runs(res: Path) -> dict[tuple[str, str, int], dict]:
    """(start, arm, seed) -> the run's validations {step: SR %} and training SR by step."""
    out = {}
    for start, (_, base, proas) in STARTS.items():
        for arm, row in (("GRPO", base), ("GRPO+ProAS", proas)):
            for m in sorted((res / ENV_RL / row).glob("seed*/metrics.jsonl")):
                recs = run_metrics(m.parent)
                out[(start, arm, _seed(m.parent))] = {
                    "row": row,
                    "val": {r["step"]: 100 * r["val/sr"] for r in recs if isinstance(r.get("val/sr"), (int, float))},
                    "train": {r["step"]: 100 * r["train/sr"] for r in recs
                              if isinstance(r.get("train/sr"), (int, float))},
                    "err": {r["step"]: 100 * r["train/error_rate"] for r in recs
                            if isinstance(r.get("train/error_rate"), (int, float))},
                    "kl": {r["step"]: r["loss/kl"] for r in recs if isinstance(r.get("loss/kl"), (int, float))},
                }
    return out


def _steps(by_step: dict[int, float], after: int, upto: int) -> list[float]:
    """The values of the steps in (after, upto]."""
    return [x for step, x in by_step.items() if after < step <= upto]


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _f(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def rl_reads(runs: dict[tuple[str, str, int], dict]) -> list[dict]:
    """Per run: step-0 SR, the primary mean over (0, K], best and last up to K, training SR over
    the 10 steps up to K; K is shared by every run of a start."""
    out = []
    for start in STARTS:
        mine = {k: v for k, v in runs.items() if k[0] == start}
        if not mine:
            continue
        k_last = min(max(v["val"]) if v["val"] else 0 for v in mine.values())
        for (_, arm, seed), v in sorted(mine.items(), key=lambda kv: (kv[0][2], kv[0][1])):
            window = [sr for step, sr in sorted(v["val"].items()) if 0 < step <= k_last]
            train = _steps(v["train"], k_last - 10, k_last)
            out.append({"start": start, "arm": arm, "row": v["row"], "seed": seed, "K": k_last,
                        "val0": v["val"].get(0), "primary": _mean(window), "n_val": len(window),
                        "best": max(window) if window else None, "last": window[-1] if window else None,
                        "train_last10": _mean(train),
                        "train_first10": _mean(_steps(v["train"], 0, 10)),
                        "err_last10": _mean(_steps(v["err"], k_last - 10, k_last)),
                        "kl_last10": _mean(_steps(v["kl"], k_last - 10, k_last))})
    return out


def report(res: Path, csv_dir: Path | None) -> str:
    lines = ["## SFT (item 4)", "",
             "| env | row | seed | val SR by epoch, % | best % (epoch) | minutes to the best | finished "
             "| training NLL by epoch: choice; whole sequence |",
             "|---|---|---|---|---|---|---|---|"]
    sft = sft_rows(res)
    for r in sft:
        by_epoch = " / ".join(f"{sr:.1f}" for _, sr in r["val"])
        best = f"**{r['best'][1]:.1f}** ({r['best'][0]})" if r["best"] else "–"
        nll = " / ".join(f"{x:.3f}" for x in r["nll"]) or "–"
        if r["seq_nll"]:
            nll += "; " + " / ".join(f"{x:.3f}" for x in r["seq_nll"])
        lines.append(f"| {r['env']} | {r['row']} | {r['seed']} | {by_epoch} | {best} | {_f(r['minutes'])} "
                     f"| {'yes' if r['finished'] else 'no'} | {nll} |")
    lines += ["", "| env | row | seeds | mean of the seeds' best % | the bar % |", "|---|---|---|---|---|"]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in sft:
        groups.setdefault((r["env"], r["row"]), []).append(r)
    for (env, row), rs in groups.items():
        bests = [r["best"][1] for r in rs if r["best"]]
        lines.append(f"| {env} | {row} | {' '.join(str(r['seed']) for r in rs if r['best'])} | {_f(_mean(bests))} "
                     f"| {_f(BAR.get(env))} |")
    reads = rl_reads(rl_runs(res))
    lines += ["", f"## RL on {ENV_RL} (item 5)", "",
              "| start | seed | arm | K | val SR step 0 | mean val SR (0, K] (n) | best | last "
              "| train SR, steps 1-10 | train SR, 10 steps to K | error rate %, 10 steps to K | KL, 10 steps to K |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in reads:
        lines.append(f"| {r['start']} | {r['seed']} | {r['arm']} | {r['K']} | {_f(r['val0'])} | "
                     f"{_f(r['primary'])} ({r['n_val']}) | {_f(r['best'])} | {_f(r['last'])} "
                     f"| {_f(r['train_first10'])} | {_f(r['train_last10'])} | {_f(r['err_last10'])} "
                     f"| {_f(r['kl_last10'], 3)} |")
    lines += ["", "| start | arm | seeds | val SR step 0, mean | mean val SR (0, K], mean | change from step 0 |",
              "|---|---|---|---|---|---|"]
    for start in STARTS:
        for arm in ("GRPO", "GRPO+ProAS"):
            rs = [r for r in reads if r["start"] == start and r["arm"] == arm and r["primary"] is not None
                  and r["val0"] is not None]
            if rs:
                v0, prim = _mean([r["val0"] for r in rs]), _mean([r["primary"] for r in rs])
                lines.append(f"| {start} | {arm} | {' '.join(str(r['seed']) for r in rs)} | {_f(v0)} | {_f(prim)} "
                             f"| {prim - v0:+.1f} |")
    lines += ["", "| start | per-seed GRPO+ProAS − GRPO, mean val SR (0, K] | mean |", "|---|---|---|"]
    for start in STARTS:
        by = {(r["seed"], r["arm"]): r["primary"] for r in reads if r["start"] == start}
        diffs = [(s, by[(s, "GRPO+ProAS")] - by[(s, "GRPO")]) for s in sorted({s for s, _ in by})
                 if by.get((s, "GRPO+ProAS")) is not None and by.get((s, "GRPO")) is not None]
        if diffs:
            lines.append(f"| {start} | {', '.join(f'seed {s}: {d:+.1f}' for s, d in diffs)} "
                         f"| {_mean([d for _, d in diffs]):+.1f} |")
    if csv_dir is not None:
        csv_dir.mkdir(parents=True, exist_ok=True)
        _write_csv(csv_dir / "sft_per_seed.csv", ["env", "row", "seed", "best_epoch", "best_sr", "minutes_to_best",
                                                  "finished", "val_sr_by_epoch", "train_nll_by_epoch",
                                                  "sequence_nll_by_epoch"],
                   [[r["env"], r["row"], r["seed"], r["best"][0] if r["best"] else "",
                     f"{r['best'][1]:.4f}" if r["best"] else "", _f(r["minutes"], 2), int(r["finished"]),
                     " ".join(f"{sr:.4f}" for _, sr in r["val"]), " ".join(f"{x:.4f}" for x in r["nll"]),
                     " ".join(f"{x:.4f}" for x in r["seq_nll"])] for r in sft])
        _write_csv(csv_dir / "rl_per_seed.csv", ["start", "arm", "row", "seed", "K", "val_sr_step0", "mean_val_sr",
                                                 "n_val", "best_val_sr", "last_val_sr", "train_sr_first10",
                                                 "train_sr_last10", "error_rate_last10", "kl_last10"],
                   [[r["start"], r["arm"], r["row"], r["seed"], r["K"], _f(r["val0"], 4), _f(r["primary"], 4),
                     r["n_val"], _f(r["best"], 4), _f(r["last"], 4), _f(r["train_first10"], 4),
                     _f(r["train_last10"], 4), _f(r["err_last10"], 4), _f(r["kl_last10"], 4)] for r in reads])
    return "\n".join(lines)


def _write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    atomic_write_text(path, csv_text(header, rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, help="the study's results directory (ENV/ROW/seedS/metrics.jsonl)")
    ap.add_argument("--csv-dir", type=Path, help="also write sft_per_seed.csv and rl_per_seed.csv here")
    args = ap.parse_args(argv)
    if not args.runs.is_dir():
        print(f"analyse_lm_competent: {args.runs}: no such directory", file=sys.stderr)
        return 1
    if not any(args.runs.glob("*/*/seed*/metrics.jsonl")):
        print(f"analyse_lm_competent: {args.runs}: no run (ENV/ROW/seedS/metrics.jsonl)", file=sys.stderr)
        return 1
    try:
        print(report(args.runs, args.csv_dir))
    except (OSError, ProasError) as e:  # an unreadable metrics file, a CSV that cannot be written
        print(f"analyse_lm_competent: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
