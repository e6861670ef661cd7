"""Tables and curves of the lm study (results/lm/README.md) from its run directories.

    python scripts/analyse_lm.py results/lm/runs --png results/lm/lm_curves.png > results/lm/analysis.md

Prints markdown:
- the SFT candidates per env (validation SR at each validated epoch, the start chosen);
- per RL run: steps reached, validation SR at step 0, its best and its last, training SR and
  env-error rate over the first and the last 10 steps, PPO clip fraction and candidate entropy
  over the same windows, seconds per step, how it ended;
- per env and row, over seeds: training SR over the first 10 steps and over steps K-9..K, where K
  is the fewest steps any run of that setting (a GRPO row and its GRPO+ProAS twin: same rate, same
  KL) reached in that env, so both are read over the same steps, and validation SR at step 0 and
  at the last step every run of the setting validated; then GRPO+ProAS minus GRPO per setting.
With ``--png``, writes the curves there: per env and setting, validation SR and 10-step means of
training SR, each seed thin and the seeds' mean thick (a run of fewer than 10 steps shows each
step's).

RUNS is the results directory of ``scripts/run_lm_study.sh`` (its ``lm_study.tgz`` unpacked) or
the copy of it kept under results/lm/runs, which holds only what results/ allows: a run counts
as finished when it has a summary.json or its log (``train.log``, or the excerpt
``train.log.txt``) ends with the trainer's ``done:`` line, and the SFT start chosen is read from
``lm_start/choice_ENV.json`` or, failing that, from the runner's ``log_choice_ENV.txt``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

ENVS = ("household", "shop")
#: settings: (GRPO row, GRPO+ProAS row, what they share)
SETTINGS = (("grpo_lm", "grpo_proas_lm", "lr 1e-3, no KL"),
            ("grpo_lm_lr3e-4", "grpo_proas_lm_lr3e-4", "lr 3e-4, no KL"),
            ("grpo_lm_kl", "grpo_proas_lm_kl", "lr 1e-3, KL 0.01"),
            ("grpo_lm_kl_lr3e-4", "grpo_proas_lm_kl_lr3e-4", "lr 3e-4, KL 0.01"),
            ("grpo_lm_kl_lr3e-4_rep16", "grpo_proas_lm_kl_lr3e-4_rep16", "lr 3e-4, KL 0.01, same 16 tasks"))
RL_ROWS = tuple(row for base, proas, _ in SETTINGS for row in (base, proas))
LABELS = {row: f"{name}, {what}" for base, proas, what in SETTINGS
          for row, name in ((base, "GRPO"), (proas, "GRPO+ProAS"))}
SETTING_OF = {row: i for i, (base, proas, _) in enumerate(SETTINGS) for row in (base, proas)}
WIN = 10


def mean(a, lo: int, hi: int, digits: int = 1, scale: float = 1.0) -> str:
    """The mean of ``a[lo:hi]`` (times ``scale``), or a dash when the window is empty."""
    part = np.asarray(a[lo:hi], dtype=float)
    return f"{scale * part.mean():.{digits}f}" if part.size else "–"


def records(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # a line cut by a stop mid-write
            pass
    return out


def choices(res: Path) -> dict[str, dict]:
    """Per env, the runner's choice of SFT start: ``{"chosen": row, "best_val_sr": {row: fraction}}``."""
    got = {}
    for env in ENVS:
        f = res / "lm_start" / f"choice_{env}.json"
        log = res / f"log_choice_{env}.txt"
        if f.exists():
            got[env] = json.loads(f.read_text())
        elif log.exists():  # the runner printed the same JSON into its log
            text = log.read_text(errors="replace")
            chosen = re.search(r'"chosen": "([^"]+)"', text)
            block = re.search(r'"best_val_sr": (\{[^}]*\})', text)
            if chosen and block:
                got[env] = {"chosen": chosen.group(1), "best_val_sr": json.loads(block.group(1))}
    return got


def run_log(run: Path) -> str:
    """The run's log: the full ``train.log``, or the excerpt ``train.log.txt`` that results/ keeps."""
    for name in ("train.log", "train.log.txt"):
        if (run / name).exists():
            return (run / name).read_text(errors="replace")
    return ""


def ended(run: Path, runner_logs: str) -> str:
    log = run_log(run)
    key = "/".join(run.parts[-3:])
    if (run / "summary.json").exists() or re.search(r"^done: ", log, re.MULTILINE):
        return "finished"
    if "OutOfMemoryError" in log:
        return "CUDA out of memory"
    if f"failed {key}" in runner_logs:
        return "failed"
    return "stopped at the time limit"


def fmt_ms(vals: list[float]) -> str:
    if not vals:
        return "–"
    a = np.asarray(vals)
    return f"{a.mean():.1f} ± {a.std(ddof=1):.1f}" if len(a) > 1 else f"{a[0]:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path, help="the lm study's results directory, e.g. results/lm/runs")
    ap.add_argument("--png", type=Path, help="write the curves to this PNG (needs matplotlib)")
    a = ap.parse_args(argv)
    if not a.runs.is_dir():
        print(f"analyse_lm: {a.runs}: no such directory", file=sys.stderr)
        return 2
    return report(a.runs, a.png)


def report(res: Path, png: Path | None) -> int:
    chosen = choices(res)
    runner_logs = "".join(p.read_text(errors="replace") for p in res.glob("log_*.txt"))
    print("## SFT candidates (seed 0)\n")
    print("| env | run | validation SR by epoch | best | chosen |")
    print("|---|---|---|---|---|")
    for env in ENVS:
        for run in sorted(res.glob(f"{env}/sft_*/seed0/metrics.jsonl")):
            row = run.parent.parent.name
            recs = records(run)
            vals = ", ".join(f"{r['step']}: {100 * r['val/sr']:.1f}" for r in recs if "val/sr" in r)
            best = chosen.get(env, {}).get("best_val_sr", {}).get(row)
            best_s = f"{100 * best:.1f}" if best is not None else ended(run.parent, runner_logs)
            mark = "yes" if chosen.get(env, {}).get("chosen") == row else ""
            print(f"| {env} | {row} | {vals} | {best_s} | {mark} |")

    runs: dict[tuple[str, str, str], dict] = {}
    for env in ENVS:
        for row in RL_ROWS:
            for m in sorted(res.glob(f"{env}/{row}/seed*/metrics.jsonl")):
                recs = records(m)
                train = [r for r in recs if "train/sr" in r]
                runs[(env, row, m.parent.name)] = {
                    "dir": m.parent,
                    "val": [(r["step"], 100 * r["val/sr"]) for r in recs if "val/sr" in r],
                    "sr": np.array([100 * r["train/sr"] for r in train]),
                    "err": np.array([r["train/error_rate"] for r in train]),
                    "clip": np.array([r.get("loss/clipfrac", np.nan) for r in train]),
                    "ent": np.array([r.get("loss/entropy", np.nan) for r in train]),
                    "sps": np.array([r["time/step"] for r in train]),
                }

    print("\n## RL runs\n")
    print(f"First and last {WIN} steps each run reached. Clip fraction in % of decisions; entropy of the "
          "candidate softmax in nats.\n")
    print("| env | row | seed | steps | val SR: step 0 / best / last (step) | train SR first / last | "
          "error rate first / last | clip % first / last | entropy first / last | s/step | ended |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (env, row, seed), r in runs.items():
        n = len(r["sr"])
        v = r["val"]
        vs = (f"{v[0][1]:.1f} / {max(x for _, x in v):.1f} / {v[-1][1]:.1f} ({v[-1][0]})" if v else "–")
        lo = max(0, n - WIN)
        print(f"| {env} | {LABELS[row]} | {seed[4:]} | {n} | {vs} | {mean(r['sr'], 0, WIN)} / {mean(r['sr'], lo, n)} | "
              f"{mean(r['err'], 0, WIN, 2)} / {mean(r['err'], lo, n, 2)} | "
              f"{mean(r['clip'], 0, WIN, 1, 100)} / {mean(r['clip'], lo, n, 1, 100)} | "
              f"{mean(r['ent'], 0, WIN, 2)} / {mean(r['ent'], lo, n, 2)} | {mean(r['sps'], 0, n, 0)} | "
              f"{ended(r['dir'], runner_logs)} |")

    print("\n## Per row, over seeds (mean ± sd)\n")
    print(f"K: the fewest steps any run of the setting (GRPO and GRPO+ProAS at one rate and KL) reached in "
          f"the env; training SR over steps 1-{WIN} and over steps K-{WIN - 1}..K; validation SR at step 0 and "
          "at the last step every run of the setting validated.\n")
    print("| env | row | seeds | K | train SR first | train SR at K | change | val SR step 0 | val SR (step) "
          "| change |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    summary: dict[tuple[str, str], list[float]] = {}
    for env in ENVS:
        for base, proas, _ in SETTINGS:
            mine = {k: r for k, r in runs.items() if k[0] == env and k[1] in (base, proas) and len(r["sr"]) >= WIN}
            if not mine:
                continue
            k_steps = min(len(r["sr"]) for r in mine.values())
            common = set.intersection(*({s for s, _ in r["val"]} for r in mine.values()))
            vstep = max(common) if common else None
            for row in (base, proas):
                sel = [r for (e, ro, _), r in mine.items() if ro == row]
                if not sel:
                    continue
                first = [float(r["sr"][:WIN].mean()) for r in sel]
                at_k = [float(r["sr"][k_steps - WIN:k_steps].mean()) for r in sel]
                delta = [b - a for a, b in zip(first, at_k)]
                v0 = [dict(r["val"]).get(0, np.nan) for r in sel]
                vk = [dict(r["val"]).get(vstep, np.nan) for r in sel] if vstep is not None else []
                vdelta = [b - a for a, b in zip(v0, vk)]
                summary[(env, row)] = at_k
                print(f"| {env} | {LABELS[row]} | {len(sel)} | {k_steps} | {fmt_ms(first)} | {fmt_ms(at_k)} | "
                      f"{fmt_ms(delta)} | {fmt_ms(v0)} | {fmt_ms(vk)} ({vstep}) | {fmt_ms(vdelta)} |")
    print("\n## GRPO+ProAS minus GRPO (training SR at K, per setting)\n")
    for env in ENVS:
        for base, proas, what in SETTINGS:
            a, b = summary.get((env, base)), summary.get((env, proas))
            if a and b:
                d = np.mean(b) - np.mean(a)
                se = (np.sqrt(np.var(a, ddof=1) / len(a) + np.var(b, ddof=1) / len(b))
                      if min(len(a), len(b)) > 1 else np.nan)
                err = f"standard error {se:.1f}" if np.isfinite(se) else "no standard error"
                print(f"- {env}, {what}: {d:+.1f} points ({err}; {len(a)} and {len(b)} seeds)")

    if png is None:
        return 0
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return 0
    panels = sorted({(env, SETTING_OF[row]) for env, row, _ in runs}, key=lambda k: (ENVS.index(k[0]), k[1]))
    if not panels:
        return 0
    fig, axes = plt.subplots(2, len(panels), figsize=(4.2 * len(panels), 7), squeeze=False)
    colours = {0: "tab:blue", 1: "tab:orange"}  # GRPO, GRPO+ProAS
    for col, (env, setting) in enumerate(panels):
        base, proas, what = SETTINGS[setting]
        for which, row in enumerate((base, proas)):
            mine = [r for (e, ro, _), r in runs.items() if e == env and ro == row]
            name = "GRPO+ProAS" if which else "GRPO"
            c = colours[which]
            for r in mine:
                v = r["val"]
                axes[0, col].plot([s for s, _ in v], [x for _, x in v], color=c, alpha=0.3, lw=0.8)
                if len(r["sr"]) >= WIN:
                    means = np.convolve(r["sr"], np.ones(WIN) / WIN, mode="valid")
                    axes[1, col].plot(np.arange(WIN, len(r["sr"]) + 1), means, color=c, alpha=0.3, lw=0.8)
                elif len(r["sr"]):  # too few steps for a mean: each step's own
                    axes[1, col].plot(np.arange(1, len(r["sr"]) + 1), r["sr"], marker=".", color=c, alpha=0.3)
            if not mine:
                continue
            # the seeds' mean, over the steps every seed reached
            steps = sorted(set.intersection(*({s for s, _ in r["val"]} for r in mine)))
            axes[0, col].plot(steps, [np.mean([dict(r["val"])[s] for r in mine]) for s in steps], color=c, lw=2,
                              marker=".", label=f"{name} (mean of {len(mine)})")
            n = min(len(r["sr"]) for r in mine)
            if n >= WIN:
                means = np.mean([np.convolve(r["sr"][:n], np.ones(WIN) / WIN, mode="valid") for r in mine], axis=0)
                axes[1, col].plot(np.arange(WIN, n + 1), means, color=c, lw=2, label=f"{name} (mean of {len(mine)})")
        axes[0, col].set(title=f"{env}, {what}\nvalidation SR", xlabel="RL step", ylabel="%")
        axes[1, col].set(title=f"{env}, {what}\ntraining SR ({WIN}-step means)", xlabel="RL step", ylabel="%")
    for a in axes.flat:
        a.grid(alpha=0.3)
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    return 0


if __name__ == "__main__":
    sys.exit(main())
