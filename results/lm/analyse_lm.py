"""Tables and curves of the lm study (results/lm/README.md) from its run directories.

    python results/lm/analyse_lm.py results/lm/runs > results/lm/analysis.md

Prints markdown: the SFT candidates (validation SR at each validated epoch, the start chosen),
then per RL run the steps reached, validation SR at step 0 and at its last validation, training
SR over steps 1-20 and over the last 20 steps reached, the env-error rate over the same windows
and seconds per step. Writes lm_curves.png beside this script (validation SR and 10-step means of
training SR, per run).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def w(a: np.ndarray, lo: int, hi: int, digits: int = 1) -> str:
    """The mean of ``a[lo:hi]``, or a dash when the window is empty."""
    return f"{np.mean(a[lo:hi]):.{digits}f}" if len(a[lo:hi]) else "–"


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main(root: str) -> int:
    res = Path(root)
    choice = json.loads((res / "lm_start" / "choice.json").read_text())
    print("## SFT candidates (seed 0)\n")
    print("| env | run | validation SR by epoch | best | chosen |")
    print("|---|---|---|---|---|")
    for env in ("household", "shop"):
        for run in sorted(res.glob(f"{env}/sft_*/seed0/metrics.jsonl")):
            row = run.parent.parent.name
            recs = records(run)
            vals = ", ".join(f"{r['step']}: {100 * r['val/sr']:.1f}" for r in recs if "val/sr" in r)
            done = (run.parent / "summary.json").exists()
            best = f"{100 * choice[env]['best_val_sr'][row]:.1f}" if row in choice[env]["best_val_sr"] else \
                "CUDA out of memory" if "OutOfMemoryError" in (run.parent / "train.log").read_text(errors="replace") \
                else "failed" if not done else "?"
            print(f"| {env} | {row} | {vals} | {best} | {'yes' if choice[env]['chosen'] == row else ''} |")
    print("\n## RL runs\n")
    print("| env | row | seed | steps | val SR step 0 | last val SR (step) | train SR 1-20 | train SR last 20 "
          "| error rate 1-20 / last 20 | s/step | ended |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    curves = {}
    runner_log = (res / "log_rl.txt").read_text() if (res / "log_rl.txt").exists() else ""
    for env in ("household", "shop"):
        for row in ("grpo_lm", "grpo_proas_lm"):
            for run in sorted(res.glob(f"{env}/{row}/seed*/metrics.jsonl")):
                recs = records(run)
                train = [r for r in recs if "train/sr" in r]
                vals = [(r["step"], 100 * r["val/sr"]) for r in recs if "val/sr" in r]
                sr = np.array([100 * r["train/sr"] for r in train])
                er = np.array([r["train/error_rate"] for r in train])
                n = len(train)
                logf = run.parent / "train.log"
                log = logf.read_text(errors="replace") if logf.exists() else ""
                key = f"{env}/{row}/{run.parent.name}"
                ended = ("finished" if (run.parent / "summary.json").exists() else
                         "CUDA out of memory" if "OutOfMemoryError" in log else
                         "killed by hand (SIGTERM)" if f"{key} (exit -15" in runner_log else
                         "stopped when the machine was given back")
                last = f"{vals[-1][1]:.1f} ({vals[-1][0]})" if vals else "–"
                sps = f"{np.mean([r['time/step'] for r in train]):.0f}" if train else "–"
                print(f"| {env} | {row} | {run.parent.name[4:]} | {n} | {vals[0][1]:.1f} | {last} | {w(sr, 0, 20)} | "
                      f"{w(sr, max(0, n - 20), n)} | {w(er, 0, 20, 2)} / {w(er, max(0, n - 20), n, 2)} | "
                      f"{sps} | {ended} |")
                curves[(env, row, run.parent.name)] = (vals, sr)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return 0
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
    colours = {"grpo_lm": "tab:blue", "grpo_proas_lm": "tab:orange"}
    for (env, row, seed), (vals, sr) in curves.items():
        if env != "shop" or len(sr) < 10:
            continue
        label = f"{'GRPO+ProAS' if row == 'grpo_proas_lm' else 'GRPO'} {seed}"
        axes[0].plot([s for s, _ in vals], [v for _, v in vals], marker=".", color=colours[row], alpha=0.7, label=label)
        means = np.convolve(sr, np.ones(10) / 10, mode="valid")
        axes[1].plot(np.arange(10, len(sr) + 1), means, color=colours[row], alpha=0.7, label=label)
    axes[0].set(title="shop: validation SR", xlabel="RL step", ylabel="%")
    axes[1].set(title="shop: training SR, 10-step means", xlabel="RL step", ylabel="%")
    for a in axes:
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(Path(__file__).with_name("lm_curves.png"), dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).with_name("runs"))))
