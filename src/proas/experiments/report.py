"""The report: a results directory of runs turned into the paper's tables, CSV files and curves.

For every study saved under ``RESULTS/studies/`` (the runner copies each study's config there)
and every row of it, the runs at ``RESULTS/<env>/<row>/seed<N>/`` are read from their
``metrics.jsonl``. One run contributes the validation record with the best ``val/sr`` among
those at steps <= the budget (ties: the earliest), i.e. the best validation checkpoint within the
budget, as the paper does; a row is the mean ± sample std (ddof 1) of that over its seeds.

Columns follow the paper: household SR per task type (Pick, Look, Clean, Heat, Cool, Pick2) and
overall, shop TS and SR, all in percent. In a ``main`` study a ``+ProAS`` row (one with a
``base``) is bold where its mean beats the base's and gets Spd.@K: on the seed-mean validation
curve, the first step at which the base reaches K% SR divided by the first step at which the
+ProAS row does (K = 70 household, 50 shop). When one of them never reaches K within the budget
the cell says so (a bound, or "n/r") and a note explains it. In an ``ablation`` study a cell is
bold where it beats the reference row (GRPO). A second Spd.@K column uses half the paper's K (35
household, 25 shop): this study's small policy stays below the paper's K (best validations of
roughly 15-55%), where the first column is "n/r" and says nothing.

Beside the best validation, figures that tell an effect from seed noise: per env, "Final" (the
last validation SR within the budget), "Train SR a-b" (per run the mean ``train/sr`` over steps a =
budget//3 + 1 to b = budget, 51-150 for 150 steps: 100 steps of 128 training episodes each, far
less noisy than the best of 16 validations) and "Δ train SR", the difference of that from the base
(main) or the reference row (ablation) with a 95% Welch t confidence interval over seeds.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proas.errors import ProasError
from proas.experiments.datafiles import csv_text, load_yaml, output_file
from proas.experiments.spec import RowSpec, Study, env_dir, load_study
from proas.fileio import atomic_write_all, atomic_write_bytes

__all__ = ["RunCurve", "best_within", "collect_runs", "first_reach", "last_within", "make_report", "speedup",
           "summarise", "t_quantile", "train_curve", "train_sr_mean", "train_window", "welch_ci"]

#: household task types in the paper's column order, with the paper's column names
HOUSEHOLD_TYPES = [
    ("pick_and_place_simple", "Pick"),
    ("look_at_obj_in_light", "Look"),
    ("pick_clean_then_place_in_recep", "Clean"),
    ("pick_heat_then_place_in_recep", "Heat"),
    ("pick_cool_then_place_in_recep", "Cool"),
    ("pick_two_obj_and_place", "Pick2"),
]
#: Spd.@K thresholds (% SR): the paper's
SPEEDUP_K = {"household": 70.0, "shop": 50.0}
#: a second Spd.@K at half the paper's K: this study's small policy stays below the paper's K,
#: where the speed-up is "n/r" everywhere and says nothing
SPEEDUP_K_LOW = {env: k / 2 for env, k in SPEEDUP_K.items()}


def speedup_ks(env: str) -> tuple[float, float]:
    """The two Spd.@K thresholds of an env: the paper's K and half of it."""
    k = SPEEDUP_K.get(env, 50.0)
    return k, SPEEDUP_K_LOW.get(env, k / 2)


def env_columns(env: str) -> list[tuple[str, str]]:
    """(metric key in metrics.jsonl, column name) of an env's block, values in percent."""
    if env == "household":
        return [(f"val/sr/{t}", name) for t, name in HOUSEHOLD_TYPES] + [("val/sr", "All")]
    if env == "shop":
        return [("val/ts", "TS"), ("val/sr", "SR")]
    return [("val/sr", "SR")]


def _percent(key: str, value: float) -> float:
    # val/ts is already mean score x 100; success rates are fractions
    return float(value) if key == "val/ts" else 100.0 * float(value)


@dataclass
class RunCurve:
    """A run's validation records (step -> metrics) and training SR per step (``train/sr``, a
    fraction), as read from its metrics.jsonl."""

    path: Path
    val: list[dict[str, Any]]
    steps_done: int
    steps_planned: int | None = None
    train_sr: dict[int, float] = field(default_factory=dict)

    def sr_curve(self, budget: int) -> list[tuple[int, float]]:
        return [(int(r["step"]), 100.0 * float(r["val/sr"])) for r in self.val if int(r["step"]) <= budget]


#: the metrics the report reads from a run's records: each must be a finite number where present
REPORT_KEYS = ("val/sr", "val/ts", "train/sr", *(f"val/sr/{t}" for t, _ in HOUSEHOLD_TYPES))


def read_run(run_dir: Path) -> RunCurve | None:
    """The run's validation records; None when it has none yet. Corrupt lines, and a figure the
    report reads (``REPORT_KEYS``) that is not a finite number, are one-line errors."""
    from proas.fileio import read_utf8

    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return None
    val: list[dict[str, Any]] = []
    train_sr: dict[int, float] = {}
    steps_done = 0
    lines = read_utf8(path, "a run's metrics.jsonl is UTF-8").splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            if n == len(lines):  # a record cut off by a kill mid-write: the run stopped there
                break
            raise ProasError(f"{path}:{n}: not a metrics record") from None
        step = rec.get("step") if isinstance(rec, dict) else None
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ProasError(f"{path}:{n}: not a metrics record (a JSON object with an integer 'step' >= 0)")
        for key in REPORT_KEYS:
            v = rec.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
                raise ProasError(f"{path}:{n}: {key} is {str(v)[:40]!r}, not a finite number")
            if v is not None and key != "val/ts" and not 0.0 <= v <= 1.0:  # a success rate, not a percentage
                raise ProasError(f"{path}:{n}: {key} is {v!r}, not a success rate in [0, 1]")
        steps_done = max(steps_done, step)
        if rec.get("val/sr") is not None:
            val.append(rec)
        if rec.get("train/sr") is not None:
            train_sr[step] = float(rec["train/sr"])  # a resumed run repeats steps: the last record counts
    planned = None
    cfg = run_dir / "config.yaml"
    if cfg.exists():
        try:
            planned = int(load_yaml(cfg, "run config")["train"]["steps"])
        except (ProasError, KeyError, TypeError, ValueError, OverflowError):  # the budget note is informative only
            planned = None
    if not val:
        return None
    # a resumed run may repeat steps; keep the last record of each step
    by_step = {int(r["step"]): r for r in val}
    return RunCurve(run_dir, [by_step[s] for s in sorted(by_step)], steps_done, planned, train_sr)


def best_within(run: RunCurve, budget: int) -> dict[str, Any] | None:
    """The validation record with the highest SR at a step <= budget (earliest on ties)."""
    cands = [r for r in run.val if int(r["step"]) <= budget]
    if not cands:
        return None
    return max(cands, key=lambda r: (float(r["val/sr"]), -int(r["step"])))


def last_within(run: RunCurve, budget: int) -> dict[str, Any] | None:
    """The last validation record at a step <= budget (the final checkpoint's validation)."""
    cands = [r for r in run.val if int(r["step"]) <= budget]
    return cands[-1] if cands else None


def train_window(budget: int) -> tuple[int, int]:
    """The steps whose training SR a row is judged on: those > budget/3 up to the budget (51-150
    for 150 steps), past the first third where every method is still near its starting SR."""
    return budget // 3 + 1, budget


def train_sr_mean(run: RunCurve, lo: int, hi: int) -> tuple[float | None, int]:
    """Mean training SR (%) over the run's steps lo..hi that have a ``train/sr`` record, and how
    many steps that was (None, 0: none)."""
    vals = [v for s, v in run.train_sr.items() if lo <= s <= hi]
    if not vals:
        return None, 0
    return 100.0 * sum(vals) / len(vals), len(vals)


def _betacf(a: float, b: float, x: float) -> float:
    # continued fraction of the incomplete beta function (modified Lentz; Numerical Recipes 6.4)
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    # the continued fraction converges fast only below (a+1)/(a+b+2); above, use the symmetry
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """CDF of Student's t with ``df`` (real, > 0) degrees of freedom."""
    tail = 0.5 * _betai(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Quantile of Student's t (real df, as Welch's df is), by bisection on ``t_cdf``; scipy is no
    dependency of the package for this one number."""
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"t_quantile: p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, 2.0 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def welch_ci(a: list[float], b: list[float],
             level: float = 0.95) -> tuple[float, float | None, float | None, float | None]:
    """mean(a) - mean(b) with its Welch confidence interval: (difference, low, high, df).

    The seeds of two rows are independent samples with possibly different spreads, hence Welch's
    unequal-variance t rather than the pooled one. With fewer than two values on a side there is no
    spread to estimate: low, high and df are None. When both sides have zero spread the interval is
    the difference itself (df None)."""
    if not a or not b:
        raise ValueError("welch_ci: an empty sample")
    ma, va = mean_std(a)
    mb, vb = mean_std(b)
    diff = ma - mb
    if len(a) < 2 or len(b) < 2:
        return diff, None, None, None
    qa, qb = va ** 2 / len(a), vb ** 2 / len(b)
    se2 = qa + qb
    if se2 <= 0.0:
        return diff, diff, diff, None
    df = se2 ** 2 / (qa ** 2 / (len(a) - 1) + qb ** 2 / (len(b) - 1))  # Welch-Satterthwaite
    half = t_quantile(0.5 + level / 2.0, df) * math.sqrt(se2)
    return diff, diff - half, diff + half, df


def mean_std(values: list[float]) -> tuple[float, float]:
    n = len(values)
    m = sum(values) / n
    if n < 2:
        return m, 0.0
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))


def mean_curve(runs: list[RunCurve], budget: int) -> list[tuple[int, float, float]]:
    """(step, mean SR %, std) over seeds, at the validation steps every run has."""
    curves = [dict(r.sr_curve(budget)) for r in runs]
    if not curves:
        return []
    common = sorted(set.intersection(*(set(c) for c in curves)))
    out = []
    for s in common:
        m, sd = mean_std([c[s] for c in curves])
        out.append((s, m, sd))
    return out


def train_curve(runs: list[RunCurve], budget: int, width: int = 10) -> list[tuple[int, float, float]]:
    """(bin's last step, mean training SR %, std) over seeds: per run the mean ``train/sr`` over
    steps 1-10, 11-20, ... (the last bin ends at the budget), so the points line up with the
    validations every 10 steps and one step's 128 episodes do not make the curve jagged; only
    bins every run has a record in."""
    per_run = []
    for run in runs:
        bins: dict[int, list[float]] = {}
        for step, v in run.train_sr.items():
            if 1 <= step <= budget:
                bins.setdefault(min(budget, -(-step // width) * width), []).append(100.0 * v)
        per_run.append({end: sum(vs) / len(vs) for end, vs in bins.items()})
    if not per_run:
        return []
    out = []
    for end in sorted(set.intersection(*(set(b) for b in per_run))):
        m, sd = mean_std([b[end] for b in per_run])
        out.append((end, m, sd))
    return out


def first_reach(curve: list[tuple[int, float, float]], k: float) -> int | None:
    """First step at which the mean SR reaches k% (None: never within the curve)."""
    for step, m, _ in curve:
        if m >= k - 1e-9:
            return step
    return None


def speedup(base_curve, proas_curve, k: float, budget: int) -> tuple[str, str | None]:
    """Spd.@K cell text and, when one side never reaches K, the note saying so.

    Step 0 (the untrained policy) reaching K counts as reaching it after one step, so the ratio
    stays finite.
    """
    b, p = first_reach(base_curve, k), first_reach(proas_curve, k)
    last = min(base_curve[-1][0] if base_curve else budget, proas_curve[-1][0] if proas_curve else budget)
    if b is not None and p is not None:
        return f"{max(b, 1) / max(p, 1):.2f}×", None
    if b is None and p is not None:
        return (f"≥{last / max(p, 1):.2f}×",
                f"the base never reaches {k:g}% within {last} steps; +ProAS does at step {p} (lower bound)")
    if b is not None and p is None:
        return (f"≤{max(b, 1) / last:.2f}×",
                f"+ProAS never reaches {k:g}% within {last} steps; the base does at step {b} (upper bound)")
    return "n/r", f"neither reaches {k:g}% within {last} steps"


@dataclass
class Cell:
    mean: float | None = None
    std: float = 0.0
    n: int = 0


@dataclass
class RowResult:
    row: RowSpec
    cells: dict[str, dict[str, Cell]] = field(default_factory=dict)  # env -> column -> cell
    seeds: dict[str, list[int]] = field(default_factory=dict)
    steps: dict[str, list[int]] = field(default_factory=dict)  # env -> steps each run reached
    best_steps: dict[str, list[int]] = field(default_factory=dict)
    curves: dict[str, list[tuple[int, float, float]]] = field(default_factory=dict)
    train_curves: dict[str, list[tuple[int, float, float]]] = field(default_factory=dict)
    speedup: dict[str, dict[float, tuple[str, str | None]]] = field(default_factory=dict)  # env -> K -> cell
    final: dict[str, Cell] = field(default_factory=dict)  # env -> last validation SR within the budget
    final_steps: dict[str, list[int]] = field(default_factory=dict)
    train: dict[str, Cell] = field(default_factory=dict)  # env -> training SR over train_window
    train_runs: dict[str, list[float]] = field(default_factory=dict)  # env -> that, per seed (%)
    train_window: dict[str, tuple[int, int]] = field(default_factory=dict)
    delta: dict[str, tuple[float, float | None, float | None, float | None]] = field(default_factory=dict)
    train_short: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # env -> (seed, steps found)


def collect_runs(results: Path, env: str, row: str) -> list[tuple[int, RunCurve]]:
    folder = results / env_dir(env) / row
    out = []
    if not folder.is_dir():
        return out
    for d in sorted(folder.iterdir()):
        if d.is_dir() and d.name.startswith("seed") and d.name[4:].isdigit():
            run = read_run(d)
            if run is not None:
                out.append((int(d.name[4:]), run))
    return out


def env_budgets(study: Study, results: Path, budget: int) -> dict[str, int]:
    """Per env, the step budget every row is compared within: ``budget``, or less when some run of
    the table stopped earlier (killed, a time limit): then the last validation step that every run
    reached, so that no row is judged on more training than another."""
    out = {}
    for env in study.envs:
        reached = [r.val[-1]["step"] for row in study.rows
                   if not row.hidden and not row.not_run and row.sft is None
                   for s, r in collect_runs(results, env, row.id) if s in study.seeds]
        out[env] = min([budget] + [int(x) for x in reached])
    return out


def summarise(study: Study, results: Path, budget: int, *, equalise: bool = True) -> list[RowResult]:
    """One RowResult per visible row of the study (``equalise``: see ``env_budgets``)."""
    budgets = env_budgets(study, results, budget) if equalise else {e: budget for e in study.envs}
    rows: list[RowResult] = []
    for row in study.rows:
        if row.hidden:
            continue
        rr = RowResult(row)
        for env in study.envs:
            source = row.untrained_of or row.id
            runs = [] if row.not_run else [(s, r) for s, r in collect_runs(results, env, source) if s in study.seeds]
            if not runs:
                continue
            budget = budgets[env]
            if row.untrained_of:
                bests = [(s, r, r.val[0] if int(r.val[0]["step"]) == 0 else None) for s, r in runs]
            elif row.sft is not None:  # epochs of supervised training, not RL steps: all of them count
                bests = [(s, r, best_within(r, r.steps_done)) for s, r in runs]
            else:
                bests = [(s, r, best_within(r, budget)) for s, r in runs]
            bests = [(s, r, b) for s, r, b in bests if b is not None]
            if not bests:
                continue
            rr.seeds[env] = [s for s, _, _ in bests]
            rr.steps[env] = [min(r.steps_done, budget) for _, r, _ in bests]
            rr.best_steps[env] = [int(b["step"]) for _, _, b in bests]
            cols = {}
            for key, name in env_columns(env):
                vals = [_percent(key, b[key]) for _, _, b in bests if b.get(key) is not None]
                if vals:
                    m, sd = mean_std(vals)
                    cols[name] = Cell(m, sd, len(vals))
            rr.cells[env] = cols
            # Final: the untrained row's only validation is step 0; SFT's last epoch; RL: the last
            # validation within the budget
            if row.untrained_of:
                finals = [(s, b) for s, _, b in bests]
            else:
                finals = [(s, last_within(r, r.steps_done if row.sft is not None else budget)) for s, r, _ in bests]
            finals = [(s, f) for s, f in finals if f is not None]
            if finals:
                m, sd = mean_std([100.0 * float(f["val/sr"]) for _, f in finals])
                rr.final[env] = Cell(m, sd, len(finals))
                rr.final_steps[env] = [int(f["step"]) for _, f in finals]
            if not row.untrained_of and row.sft is None:
                rr.curves[env] = mean_curve([r for _, r, _ in bests], budget)
                rr.train_curves[env] = train_curve([r for _, r, _ in bests], budget)
                lo, hi = train_window(budget)
                rr.train_window[env] = (lo, hi)
                per_run = [(s, *train_sr_mean(r, lo, hi)) for s, r, _ in bests]
                vals = [v for _, v, _ in per_run if v is not None]
                if vals:
                    m, sd = mean_std(vals)
                    rr.train[env] = Cell(m, sd, len(vals))
                    rr.train_runs[env] = vals
                short = [(s, n) for s, v, n in per_run if n < hi - lo + 1]
                if short:
                    # a mean over fewer steps is noisier and, on a rising curve, biased: say so
                    rr.train_short[env] = short
        rows.append(rr)
    by_id = {r.row.id: r for r in rows}
    for rr in rows:
        if study.kind == "main":
            cmp = by_id.get(rr.row.base) if rr.row.base else None
        else:
            cmp = by_id.get(study.reference) if rr.row.id != study.reference else None
        if cmp is None:
            continue
        for env in study.envs:
            if study.kind == "main" and env in rr.curves and env in cmp.curves:
                rr.speedup[env] = {k: speedup(cmp.curves[env], rr.curves[env], k, budgets[env])
                                   for k in speedup_ks(env)}
            if env in rr.train_runs and env in cmp.train_runs:
                rr.delta[env] = welch_ci(rr.train_runs[env], cmp.train_runs[env])
    return rows


def _beats(rr: RowResult, other: RowResult | None, env: str, col: str) -> bool:
    if other is None:
        return False
    a, b = rr.cells.get(env, {}).get(col), other.cells.get(env, {}).get(col)
    return a is not None and b is not None and a.mean is not None and b.mean is not None and a.mean > b.mean + 1e-9


def _fmt(cell: Cell | None, bold: bool) -> str:
    if cell is None or cell.mean is None:
        return "–"
    # one seed has no spread to show; "±0.0" would claim one
    text = f"{cell.mean:.1f}±{cell.std:.1f}" if cell.n > 1 else f"{cell.mean:.1f}"
    return f"**{text}**" if bold else text


def _signed(x: float, plus: bool) -> str:
    """One decimal, a true minus sign for negatives, "+" on positives when ``plus``; never "-0.0"."""
    text = f"{x:.1f}"
    if text in ("-0.0", "0.0"):
        return "0.0"
    if text.startswith("-"):
        return "−" + text[1:]
    return ("+" + text) if plus else text


def _fmt_delta(d: tuple[float, float | None, float | None, float | None] | None) -> str:
    if d is None:
        return "–"
    diff, lo, hi, _ = d
    if lo is None or hi is None:
        return _signed(diff, True)
    return f"{_signed(diff, True)} [{_signed(lo, False)}, {_signed(hi, False)}]"


def train_column(window: tuple[int, int] | None) -> str:
    return f"Train SR {window[0]}-{window[1]}" if window else "Train SR"


def render_table(study: Study, rows: list[RowResult],
                 budgets: dict[str, int] | None = None) -> tuple[str, list[list[str]], list[str]]:
    """Markdown table, CSV rows, notes. ``budgets``: each env's compared budget (names the training
    SR window in the header; without it the window of the rows is used)."""
    by_id = {r.row.id: r for r in rows}
    ref = by_id.get(study.reference) if study.kind == "ablation" else None
    windows: dict[str, tuple[int, int] | None] = {}
    for env in study.envs:
        if budgets and env in budgets:
            windows[env] = train_window(budgets[env])
        else:
            windows[env] = next((rr.train_window[env] for rr in rows if env in rr.train_window), None)
    header = ["Method"]
    csv_header = ["method", "row", "env", "seeds", "steps_reached", "best_steps", "final_steps", "train_window"]
    for env in study.envs:
        for _, name in env_columns(env):
            header.append(f"{env} {name}")
            csv_header += [f"{env}_{name}_mean", f"{env}_{name}_std"]
        if study.kind == "main":
            for k in speedup_ks(env):
                header.append(f"{env} Spd.@{k:g}")
                csv_header.append(f"{env}_Spd@{k:g}")
        header += [f"{env} Final", f"{env} {train_column(windows[env])}", f"{env} Δ train SR"]
        csv_header += [f"{env}_Final_mean", f"{env}_Final_std", f"{env}_TrainSR_mean", f"{env}_TrainSR_std",
                       f"{env}_dTrainSR", f"{env}_dTrainSR_lo", f"{env}_dTrainSR_hi"]
    # columns per env after the best-validation block: Spd.@K x2 (main), Final, Train SR, Δ train SR
    extra = 5 if study.kind == "main" else 3
    notes: list[str] = []
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    csv_rows: list[list[str]] = [csv_header]
    for rr in rows:
        cmp = by_id.get(rr.row.base) if study.kind == "main" and rr.row.base else ref
        if rr is ref:
            cmp = None
        cells = [rr.row.label]
        if rr.row.not_run:
            width = len(header) - 1
            cells += ["not run"] + [""] * (width - 1)
            notes.append(f"{rr.row.label}: not run ({rr.row.not_run}).")
            lines.append("| " + " | ".join(cells) + " |")
            continue
        for env in study.envs:
            if env not in rr.cells:
                cells += ["not run"] + [""] * (len(env_columns(env)) - 1 + extra)
                continue
            for _, name in env_columns(env):
                cells.append(_fmt(rr.cells[env].get(name), _beats(rr, cmp, env, name)))
            if study.kind == "main":
                for k in speedup_ks(env):
                    sp = rr.speedup.get(env, {}).get(k)
                    if sp is None:
                        cells.append("–")
                    else:
                        cells.append(sp[0])
                        if sp[1]:
                            notes.append(f"{rr.row.label}, {env} Spd.@{k:g}: {sp[1]}.")
            cells.append(_fmt(rr.final.get(env), False))
            cells.append(_fmt(rr.train.get(env), False))
            d = rr.delta.get(env)
            cells.append(_fmt_delta(d))
            if d is not None and d[1] is None and cmp is not None:
                notes.append(f"{rr.row.label}, {env} Δ train SR: no confidence interval, "
                             f"{rr.row.label if len(rr.train_runs[env]) < 2 else cmp.row.label} has one seed.")
            for seed, n in rr.train_short.get(env, []):
                lo, hi = rr.train_window[env]
                notes.append(f"{rr.row.label}, {env} {train_column((lo, hi))}: seed {seed} has training "
                             f"records for {n} of its {hi - lo + 1} steps; its mean is over those.")
            seeds = rr.seeds[env]
            if len(seeds) < len(study.seeds):
                notes.append(f"{rr.row.label}, {env}: only seeds {', '.join(map(str, seeds))} have results.")
        if rr.row.untrained_of and rr.cells:
            notes.append(f"{rr.row.label}: the untrained policy, i.e. the step-0 validation (before any update) "
                         f"of the {study.row(rr.row.untrained_of).label} runs of the same seeds.")
        if rr.row.sft is not None and rr.cells:
            epochs = sorted({n for env in rr.steps for n in rr.steps[env]})
            notes.append(f"{rr.row.label}: `proas sft` (supervised training on the oracle's actions in the training "
                         f"tasks), best validation over its {'/'.join(map(str, epochs))} epochs.")
        lines.append("| " + " | ".join(cells) + " |")
        for env in study.envs:
            if env not in rr.cells:
                continue
            win = rr.train_window.get(env)
            row = [rr.row.label, rr.row.id, env, " ".join(map(str, rr.seeds[env])),
                   " ".join(map(str, rr.steps[env])), " ".join(map(str, rr.best_steps[env])),
                   " ".join(map(str, rr.final_steps.get(env, []))), f"{win[0]}-{win[1]}" if win else ""]
            for e2 in study.envs:
                for _, name in env_columns(e2):
                    c = rr.cells[env].get(name) if e2 == env else None
                    row += ["" if c is None else f"{c.mean:.4f}", "" if c is None else f"{c.std:.4f}"]
                if study.kind == "main":
                    for k in speedup_ks(e2):
                        sp = rr.speedup.get(env, {}).get(k) if e2 == env else None
                        row.append("" if sp is None else sp[0])
                for c in ((rr.final.get(env), rr.train.get(env)) if e2 == env else (None, None)):
                    row += ["" if c is None else f"{c.mean:.4f}", "" if c is None else f"{c.std:.4f}"]
                d = rr.delta.get(env) if e2 == env else None
                row += ["" if x is None else f"{x:.4f}" for x in (d[:3] if d is not None else (None,) * 3)]
            csv_rows.append(row)
    return "\n".join(lines), csv_rows, notes


def plot_study(study: Study, rows: list[RowResult], path: Path, budget: int) -> bool:
    """Write :func:`plot_png`'s figure to ``path``; False (nothing written) when there is nothing to plot."""
    png = plot_png(study, rows, budget)
    if png is None:
        return False
    atomic_write_bytes(path, png)
    return True


def plot_png(study: Study, rows: list[RowResult], budget: int) -> bytes | None:
    """Validation SR vs step, seed mean with a ±1 std band; one panel per env (and per base/+ProAS
    pair in a main study), each with the training SR (10-step means, see ``train_curve``) beside
    it, the Train SR column's window shaded, as PNG bytes. None when there is nothing to plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_id = {r.row.id: r for r in rows}
    panels: list[tuple[str, str, list[RowResult]]] = []
    for env in study.envs:
        if study.kind == "main":
            for rr in rows:
                base = by_id.get(rr.row.base) if rr.row.base else None
                group = [x for x in (base, rr) if x is not None and env in x.curves]
                if base is not None and group:
                    panels.append((env, f"{env}: {base.row.label} vs {rr.row.label}", group))
        else:
            group = [rr for rr in rows if env in rr.curves]
            if group:
                panels.append((env, f"{env}: {study.title}", group))
    if not panels:
        return None
    # each panel is a (validation, training) pair of axes side by side, two pairs to a figure row
    pairs = 2 if len(panels) >= 2 else 1
    ncols = 2 * pairs
    nrows = math.ceil(len(panels) / pairs)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.8 * nrows), dpi=100, squeeze=False)
    for ax in axes.flat[2 * len(panels):]:
        ax.set_visible(False)
    flat = list(axes.flat)
    for n, (env, title, group) in enumerate(panels):
        ax, tax = flat[2 * n], flat[2 * n + 1]
        window = next((rr.train_window[env] for rr in group if env in rr.train_window), None)
        for i, rr in enumerate(group):
            color = plt.cm.tab10(i % 10)
            for a, curve in ((ax, rr.curves[env]), (tax, rr.train_curves.get(env, []))):
                if not curve:
                    continue
                xs = [c[0] for c in curve]
                ms = [c[1] for c in curve]
                sds = [c[2] for c in curve]
                a.plot(xs, ms, "-o", ms=3, color=color, lw=1.6, label=f"{rr.row.label} (n={len(rr.seeds[env])})")
                a.fill_between(xs, [m - s for m, s in zip(ms, sds)], [m + s for m, s in zip(ms, sds)],
                               color=color, alpha=0.18, lw=0)
        if study.kind == "main" and env in SPEEDUP_K:
            for k in speedup_ks(env):
                ax.axhline(k, color="grey", ls=":", lw=1)
        if window:
            tax.axvspan(window[0] - 1, window[1], color="grey", alpha=0.08, lw=0)
        ax.set_title(title, fontsize=9)
        tax.set_title(f"{title}: training SR" + (f" (shaded: steps {window[0]}-{window[1]})" if window else ""),
                      fontsize=9)
        ax.set_ylabel("validation SR (%)")
        tax.set_ylabel("training SR (%), 10-step means")
        for a in (ax, tax):
            a.set_xlabel("RL step")
            a.set_xlim(0, budget)
            a.set_ylim(-2, 102)
            a.grid(alpha=0.3)
            a.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def load_saved_studies(results: Path, names: list[str] | None = None) -> list[Study]:
    folder = results / "studies"
    if not folder.is_dir():
        raise ProasError(f"{results}: no studies/ folder (is this a results directory of `proas experiment run`?)")
    files = sorted(folder.glob("*.yaml"))
    studies = [load_study(str(f)) for f in files]
    order = {"main": 0, "ablation_shaping": 1, "ablation_arg": 2}
    studies.sort(key=lambda s: (order.get(s.name, 9), s.name))
    if names:
        missing = set(names) - {s.name for s in studies}
        if missing:
            raise ProasError(f"{results}: no saved study {', '.join(sorted(missing))}")
        studies = [s for s in studies if s.name in names]
    if not studies:
        raise ProasError(f"{results}/studies: no study configs")
    return studies


def make_report(results: Path, out: Path | None = None, *, budget: int | None = None,
                studies: list[str] | None = None, plots: bool = True) -> Path:
    """Write ``report.md``, one ``<study>.csv`` and one ``<study>_curves.png`` per study; return
    the path of report.md. Every study is read and checked before any file is written, and the
    files are written all or none."""
    results = Path(results)
    if not results.is_dir():
        raise ProasError(f"{results}: no such results directory")
    out = Path(out) if out is not None else results
    files: list[tuple[Path, bytes]] = []
    parts = ["# Results", ""]
    for study in load_saved_studies(results, studies):
        b = budget or study.steps
        rows = summarise(study, results, b)
        budgets = env_budgets(study, results, b)
        table, csv_rows, notes = render_table(study, rows, budgets)
        parts += [f"## {study.title}", ""]
        if study.description:
            parts += [study.description, ""]
        parts.append(f"Best validation checkpoint within the step budget, mean ± std over seeds "
                     f"{', '.join(map(str, study.seeds))} (percent; a value without ± comes from one seed).")
        for env in study.envs:
            if budgets[env] < b:
                parts.append(f"**Reduced budget ({env}):** some runs stopped at step {budgets[env]}, so every "
                             f"row is compared within {budgets[env]} steps, not the {b} steps of "
                             f"the study (the paper's setting is 150).")
            elif b < study.steps:
                parts.append(f"**Reduced budget ({env}):** compared within {b} steps, not the paper's 150.")
            else:
                parts.append(f"{env}: within {b} steps.")
        if study.kind == "main":
            parts.append("Bold: +ProAS beats its base (best validation). Spd.@K: steps the base needs to first "
                         "reach K% mean validation SR over the steps +ProAS needs (K = 70 household, 50 shop, "
                         "the paper's; and half of it, 35 and 25).")
            against = "its base"
        else:
            parts.append(f"Bold: higher than {study.row(study.reference).label} (best validation).")
            against = study.row(study.reference).label
        windows = ", ".join(f"{env} steps {train_window(budgets[env])[0]}-{train_window(budgets[env])[1]}"
                            for env in study.envs)
        parts.append(f"Final: the last validation SR within the budget. Train SR: the training episodes' SR "
                     f"averaged over the last two thirds of the budget ({windows}), mean ± std over seeds. "
                     f"Δ train SR: its difference from {against} with a 95% Welch confidence interval "
                     f"over seeds.")
        parts += ["", table, ""]
        if notes:
            parts += ["Notes:", ""] + [f"- {n}" for n in notes] + [""]
        files.append((output_file(out, f"{study.name}.csv"), csv_text(csv_rows[0], csv_rows[1:]).encode("utf-8")))
        png = plot_png(study, rows, b) if plots else None
        if png is not None:
            files.append((output_file(out, f"{study.name}_curves.png"), png))
            parts += [f"![{study.title}]({study.name}_curves.png)", ""]
    path = out / "report.md"
    files.append((path, "\n".join(parts).encode("utf-8")))
    atomic_write_all(files)
    return path
