"""The held-out study (docs/study-protocol.md): its grids, its configs, tuning selection, analysis.

The protocol's fixed choices live here once, as constants. The shipped study configs
(``configs/heldout_tune.yaml``, ...) are written from them by ``proas heldout configs``, and a
test checks that the shipped files are what these constants give, so a config cannot drift from
the protocol unseen. ``select`` reads a tuning results directory and names each arm's setting;
``analyse`` reads an evaluation results directory and writes the per-seed CSV, the paired
intervals and the verdicts.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from proas.errors import ProasError

__all__ = [
    "ESTIMATORS", "EVAL_SEEDS", "SHAPINGS", "TUNING_SEEDS", "WINDOW", "Arm", "Setting", "arms", "mean_val",
    "select", "settings", "tuning_study",
]

#: seeds (docs/study-protocol.md, "Seeds and tasks")
TUNING_SEEDS = (200, 201)
EVAL_SEEDS = tuple(range(100, 110))
EVAL_SEEDS_SHORT = tuple(range(100, 105))
#: the validations the primary metric averages (steps 50, 60, ..., 150)
WINDOW = (50, 150)
STEPS = 150
ENVS = ("household", "shop")
ESTIMATORS = ("grpo", "dapo", "gigpo")
SHAPINGS = ("none", "proas")
#: the optimiser grid from random weights, and from the SFT start
SGD_LRS = (0.1, 0.3, 1.0, 3.0)
ADAMW_LRS = (0.001, 0.003, 0.01)
SFT_SGD_LRS = (0.03, 0.1, 0.3, 1.0)
SFT_ADAMW_LRS = (0.0003, 0.001, 0.003)
#: GiGPO's modes tuned on shop (household keeps verl-agent's ALFWorld mode, mean_std_norm)
GIGPO_SHOP_MODES = ("mean_norm", "mean_std_norm")
FINAL_TEMPERATURES = (1.0, 0.0)
#: the other baselines (protocol, "What is run", item 5), tuned from random weights by the same
#: rules (``start="other"``): PPO, as verl-agent runs it (128 single-trajectory tasks a step, the
#: PPO schedules, gamma 1) with the trainer's GAE lambda 0.95 and state critic (docs/credit.md,
#: "GAE and its critic"), and MiGPO; neither shaped
OTHER_ESTIMATORS = ("ppo", "migpo")
OTHER_OVERRIDES = {"ppo": ("env.group_size=1", "env.tasks_per_step=128", "algo.gamma=1.0"), "migpo": ()}
OTHER_SCHEDULES = {"ppo": "ppo"}
STARTS = ("random", "sft", "other")
#: what each start's grids are, in their titles and selections
START_TITLES = {"random": "random weights", "sft": "SFT start", "other": "the other baselines, random weights"}
#: the SFT start of the SFT-start grids (the ``sft_start`` row of ``main_warm``). SFT trains the
#: scorer with Adam whatever its RL optimiser; the RL setting it records is pinned to the one the
#: study ran with (SGD at 1), not the tuned per-env defaults that came later, so its run config
#: is the study's (docs/training.md, "Tuned defaults")
SFT_START_ROW = {"id": "sft_start", "label": "SFT start (1 epoch, 80 tasks)", "hidden": True,
                 "sft": ["--epochs", "1", "--max-tasks", "80"],
                 "overrides": ["policy.scorer.optimizer=sgd", "policy.scorer.lr=1"]}


def _rates(start: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(SGD rates, AdamW rates) of the grid from ``start`` (``random``, ``sft``, or ``other``: the other
    baselines from random weights)."""
    return (SFT_SGD_LRS, SFT_ADAMW_LRS) if start == "sft" else (SGD_LRS, ADAMW_LRS)


@dataclass(frozen=True)
class Setting:
    """One point of the tuning grid."""

    optimizer: str
    lr: float
    gigpo_mode: str | None = None  # None: the env's default

    @property
    def tag(self) -> str:
        mode = {"mean_norm": "_mn", "mean_std_norm": "_msn", None: ""}[self.gigpo_mode]
        return f"{self.optimizer}{self.lr:g}{mode}"

    def overrides(self) -> list[str]:
        out = [f"policy.scorer.optimizer={self.optimizer}", f"policy.scorer.lr={self.lr:g}"]
        if self.gigpo_mode is not None:
            out.append(f"algo.gigpo_mode={self.gigpo_mode}")
        return out


@dataclass(frozen=True)
class Arm:
    """What is tuned on its own: an env, a base estimator and a shaping."""

    env: str
    estimator: str
    shaping: str

    @property
    def name(self) -> str:
        return f"{self.estimator}_{self.shaping}"


def arms(envs: Iterable[str] = ENVS, start: str = "random") -> list[Arm]:
    """The arms of the ``start`` grid: the main ones (each base with and without ProAS), or for
    ``other`` the other baselines, unshaped."""
    if start == "other":
        return [Arm(e, est, "none") for e in envs for est in OTHER_ESTIMATORS]
    return [Arm(e, est, sh) for e in envs for est in ESTIMATORS for sh in SHAPINGS]


def _row(arm: Arm, s: Setting, start: str) -> dict[str, Any]:
    """The study row of ``arm`` at setting ``s`` (without ``envs``)."""
    over = [f"algo.estimator={arm.estimator}", f"algo.shaping={arm.shaping}", *OTHER_OVERRIDES.get(arm.estimator, ()),
            *s.overrides()]
    rid = row_id(arm, s)
    row: dict[str, Any] = {"id": rid, "label": rid, "overrides": over}
    if arm.estimator in OTHER_SCHEDULES:
        row["schedule"] = OTHER_SCHEDULES[arm.estimator]
    if start == "sft":
        row["needs"] = ["sft_start"]
        row["overrides"] = over + ["policy.scorer.init_from={out}/{env}/sft_start/seed{seed}"]
    return row


def settings(arm: Arm, start: str = "random") -> list[Setting]:
    """The tuning grid of ``arm`` from ``start`` (``random`` or ``sft``)."""
    sgd, adamw = _rates(start)
    base = [Setting("sgd", lr) for lr in sgd] + [Setting("adamw", lr) for lr in adamw]
    if arm.estimator == "gigpo" and arm.env == "shop":
        return [Setting(s.optimizer, s.lr, m) for m in GIGPO_SHOP_MODES for s in base]
    return base


def row_id(arm: Arm, setting: Setting) -> str:
    return f"{arm.name}_{setting.tag}"


#: the grid's edges and the one rate beyond each (protocol, "Ties and edges": a factor of about 3)
BEYOND = {0.1: 0.03, 3.0: 10.0, 0.001: 0.0003, 0.01: 0.03, 0.03: 0.01, 1.0: 3.0, 0.0003: 0.0001, 0.003: 0.01}


def beyond_edge(s: Setting, start: str = "random") -> Setting | None:
    """The setting one step past the grid's edge that ``s`` lies on (None when ``s`` is inside)."""
    sgd, adamw = _rates(start)
    grid = sgd if s.optimizer == "sgd" else adamw
    for edge in (grid[0], grid[-1]):
        if math.isclose(s.lr, edge):
            return Setting(s.optimizer, BEYOND[edge], s.gigpo_mode)
    return None


def extension_study(extend: Iterable[tuple[Arm, Setting]], start: str = "random") -> dict[str, Any]:
    """The tuning grid's one extension (protocol, "Ties and edges") as a study config: for each
    (arm, edge setting), the setting beyond that edge on the tuning seeds and tuning tasks. Its
    runs land beside the grid's (same ``--out``), and ``select`` reads them."""
    base = tuning_study(start)
    rows = []
    for arm, s in extend:
        past = beyond_edge(s, start)
        if past is None:
            raise ProasError(f"{arm.env}/{arm.name} {s.tag} is not at the edge of its grid")
        rows.append({**_row(arm, past, start), "envs": [arm.env]})
    if start == "sft":
        rows.insert(0, dict(SFT_START_ROW))
    return {**base, "study": base["study"] + "_ext", "title": base["title"] + ", extension past an edge",
            "reference": rows[0]["id"], "rows": rows}


def tuning_study(start: str = "random") -> dict[str, Any]:
    """The tuning grid as a study config (``proas experiment run``): one row per arm and setting,
    an ``env_overrides`` split so that each env runs only its own arms' rows."""
    if start not in STARTS:
        raise ProasError(f"start must be one of {', '.join(STARTS)}, got {start!r}")
    rows: list[dict[str, Any]] = []
    seen: dict[str, dict[str, Any]] = {}
    for arm in arms(start=start):
        for s in settings(arm, start):
            rid = row_id(arm, s)
            if rid in seen:
                seen[rid]["_envs"].append(arm.env)
                continue
            row = {**_row(arm, s, start), "_envs": [arm.env]}
            seen[rid] = row
            rows.append(row)
    for row in rows:
        row_envs = row.pop("_envs")
        if sorted(row_envs) != sorted(ENVS):
            row["envs"] = row_envs
    if start == "sft":
        rows.insert(0, dict(SFT_START_ROW))
    name = config_path(start).stem
    what = START_TITLES[start]
    description = ("docs/study-protocol.md: every arm (env x estimator x shaping) over its optimiser grid, "
                   "on the tuning seeds, validated on the tuning tasks")
    if start == "other":
        description = ("docs/study-protocol.md, What is run, item 5: PPO (GAE lambda 0.95, the state critic, "
                       "verl-agent's 128 single-trajectory tasks a step) and MiGPO over the optimiser grid of "
                       "random weights, on the tuning seeds, validated on the tuning tasks")
    return {
        "study": name,
        "title": f"Held-out study: tuning grid ({what})",
        "kind": "ablation",
        "reference": rows[1]["id"] if start == "sft" else rows[0]["id"],
        "description": description,
        "envs": list(ENVS),
        "seeds": list(TUNING_SEEDS),
        "steps": STEPS,
        "common": ["policy=scorer", "train.progress=false", "env.fixed_val_set.path={data}/tuning_val_set/{env}.jsonl"],
        "rows": rows,
    }


def study_yaml(start: str = "random") -> str:
    """The shipped text of the tuning study config (``configs/heldout_tune*.yaml``)."""
    import yaml

    head = ("# Written by `proas heldout configs` from proas.experiments.heldout (the protocol's constants,\n"
            "# docs/study-protocol.md); tests/test_heldout.py checks that this file is what they give.\n")
    return head + yaml.safe_dump(tuning_study(start), sort_keys=False, width=110)


def config_path(start: str = "random") -> Path:
    name = {"random": "heldout_tune", "sft": "heldout_tune_sft", "other": "heldout_tune_other"}[start]
    return Path(__file__).resolve().parent / "configs" / f"{name}.yaml"


# --------------------------------------------------------------------------- reading runs


#: the metrics the selection and the analysis read from a run's records
FIGURE_KEYS = ("val/sr", "val/ts", "train/sr", "train/error_rate", "train/steps",
               *(f"{key}/{m}" for key in ("val", "val_t1", "val_t0") for m in ("sr", "errors", "entropy")))


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_share(key: str) -> bool:
    """Whether a figure (a metrics key or a CSV column) is a success rate, a share in [0, 1]:
    one out of range is a damaged file, which would otherwise decide a selection or a verdict."""
    return (key in ("tuning_metric", "primary", "best_val", "last_val", "train_sr")
            or key.endswith(("_sr", "/sr")) or re.fullmatch(r"val[0-9]+", key) is not None)


def run_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """A run's metrics records by step (the trainer's reader; a resumed run repeats steps, the
    last record of each counts). A figure the study reads (``FIGURE_KEYS``) that is not a finite
    number is a one-line error, never a NaN in a table."""
    from proas.train.checkpoint import read_metrics

    path = run_dir / "metrics.jsonl"
    by_step: dict[int, dict[str, Any]] = {}
    for n, rec in enumerate(read_metrics(path), 1):
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
            raise ProasError(f"{path}: record {n} is not an object with an integer 'step'")
        for key in FIGURE_KEYS:
            if rec.get(key) is not None and not _finite(rec[key]):
                raise ProasError(f"{path}: record {n} (step {rec['step']}): {key} is {str(rec[key])[:40]!r}, "
                                 "not a finite number")
            if rec.get(key) is not None and _is_share(key) and not 0 <= rec[key] <= 1:
                raise ProasError(f"{path}: record {n} (step {rec['step']}): {key} is {rec[key]!r}, "
                                 "not a share in [0, 1]")
        by_step[rec["step"]] = rec
    return [by_step[k] for k in sorted(by_step)]


def mean_val(records: list[dict[str, Any]], key: str = "val/sr", window: tuple[int, int] = WINDOW) -> float | None:
    """The mean of ``key`` over the validations at steps ``window[0], +10, ..., window[1]``;
    None unless every one of them is there (an unfinished run has no primary metric)."""
    want = range(window[0], window[1] + 1, 10)
    got = {r["step"]: r[key] for r in records if r.get(key) is not None}
    if any(s not in got for s in want):
        return None
    return sum(got[s] for s in want) / len(want)


def run_commit(run_dir: Path) -> str | None:
    """The commit a run's ``summary.json`` records (None: no summary, or none recorded); a summary
    that is not a JSON object, or a commit that is not text, is a one-line error."""
    from proas.fileio import read_utf8

    path = run_dir / "summary.json"
    if not path.exists():
        return None
    try:
        summary = json.loads(read_utf8(path, "a run's summary.json is UTF-8 JSON"))
    except (ValueError, RecursionError):
        raise ProasError(f"{path}: not valid JSON") from None
    if not isinstance(summary, dict):
        raise ProasError(f"{path}: not a JSON object")
    commit = summary.get("commit")
    if commit is not None and not isinstance(commit, str):
        raise ProasError(f"{path}: 'commit' is {type(commit).__name__}, not text")
    return commit


#: the validations a run record keeps (steps 0, 10, ..., 150)
VAL_STEPS = tuple(range(0, STEPS + 1, 10))
RECORD_FIELDS = ("env", "row", "seed", "commit", "tuning_metric", *(f"val{k}" for k in VAL_STEPS), "source")


def run_record(run_dir: Path, env: str, row: str, seed: int) -> dict[str, Any] | None:
    """One finished run as a record: its validation SR at each of steps 0-150, the tuning
    metric (their mean over the window) and the commit; None while the window is incomplete."""
    recs = run_metrics(run_dir)
    metric = mean_val(recs)
    if metric is None:
        return None
    vals = {r["step"]: r["val/sr"] for r in recs if r.get("val/sr") is not None}
    commit = run_commit(run_dir)
    return {"env": env, "row": row, "seed": seed, "commit": commit, "tuning_metric": metric,
            **{f"val{k}": vals.get(k) for k in VAL_STEPS}, "source": "run"}


Records = dict[tuple[str, str, int], dict[str, Any]]


def collect(results: Path) -> Records:
    """Every finished run under a results directory (``ENV/ROW/seedN``) as a record."""
    out: Records = {}
    for metrics in sorted(Path(results).glob("*/*/seed*/metrics.jsonl")):
        run = metrics.parent
        try:
            seed = int(run.name[len("seed"):])
        except ValueError:
            continue
        rec = run_record(run, run.parent.parent.name, run.parent.name, seed)
        if rec is not None:
            out[(rec["env"], rec["row"], seed)] = rec
    return out


def _number(cell: str, column: str, path: Path, line: int) -> float:
    """A CSV cell as a finite number; anything else is a one-line error naming the line."""
    try:
        value = float(cell)
    except ValueError:
        raise ProasError(f"{path}: line {line}: {column} is {cell[:40]!r}, not a number") from None
    if not math.isfinite(value):
        raise ProasError(f"{path}: line {line}: {column} is {cell!r}, not a finite number")
    if _is_share(column) and not 0 <= value <= 1:
        raise ProasError(f"{path}: line {line}: {column} is {cell!r}, not a share in [0, 1]")
    return value


def _seed(cell: str, path: Path, line: int) -> int:
    try:
        return int(cell)
    except ValueError:
        raise ProasError(f"{path}: line {line}: seed is {cell[:40]!r}, not an integer") from None


def _once(out: dict, key: tuple, lines: dict, path: Path, line: int) -> None:
    """Refuse a run a CSV holds twice: which of the two counts would be a silent guess."""
    if key in out:
        raise ProasError(f"{path}: line {line}: run {'/'.join(map(str, key))} appears twice (also line {lines[key]})")
    lines[key] = line


def read_records(path: Path) -> Records:
    """Run records from a CSV written by :func:`write_records` (``tuning/runs.csv``)."""
    from proas.experiments.datafiles import read_csv

    out: Records = {}
    lines: dict[tuple, int] = {}
    _, rows = read_csv(path, "run-records CSV", required={"env", "row", "seed", "tuning_metric"})
    for n, row in rows:
        rec: dict[str, Any] = {k: (None if v == "" else v) for k, v in row.items()}
        rec["seed"] = _seed(row["seed"], path, n)
        for k in ("tuning_metric", *(f"val{s}" for s in VAL_STEPS)):
            if rec.get(k) is not None:
                rec[k] = _number(rec[k], k, path, n)
        if rec["tuning_metric"] is None:
            raise ProasError(f"{path}: line {n}: no finite tuning_metric")
        key = (rec["env"], rec["row"], rec["seed"])
        _once(out, key, lines, path, n)
        out[key] = rec
    return out


def load_records(sources: Iterable[Path]) -> Records:
    """Records from results directories and record CSVs; a later source's run replaces an
    earlier one's."""
    out: Records = {}
    for src in map(Path, sources):
        if src.is_dir():
            out.update(collect(src))
        elif src.is_file():
            out.update(read_records(src))
        else:
            raise ProasError(f"{src}: no such results directory or run-records CSV")
    return out


def write_records(records: Records, path: Path) -> None:
    from proas.experiments.datafiles import csv_text
    from proas.fileio import atomic_write_bytes

    # floats as Python writes them: read back exactly
    text = csv_text(RECORD_FIELDS, (records[key] for key in sorted(records)))
    atomic_write_bytes(Path(path), text.encode("utf-8"))


@dataclass
class Choice:
    arm: Arm
    table: list[tuple[Setting, list[float | None]]]  # per setting: the tuning metric per tuning seed
    chosen: Setting | None
    note: str = ""


def _metric(records: Records | Path, arm: Arm, s: Setting, seed: int) -> float | None:
    if isinstance(records, dict):
        rec = records.get((arm.env, row_id(arm, s), seed))
        return None if rec is None else rec["tuning_metric"]
    run = Path(records) / arm.env / row_id(arm, s) / f"seed{seed}"
    return mean_val(run_metrics(run)) if (run / "metrics.jsonl").exists() else None


def select(records: Records | Path, start: str = "random") -> list[Choice]:
    """Each arm's setting: the highest mean tuning metric over the tuning seeds, ties to the
    smaller rate; an arm with a missing run is left unchosen (``chosen`` None).

    When the best lies at an edge of its optimiser's rates, the protocol extends the grid once
    past that edge: the setting beyond it joins the comparison when both its tuning runs are
    in ``records``; until then the arm is left unchosen, with a note naming the runs to make.
    """
    out = []
    for arm in arms(start=start):
        table = [(s, [_metric(records, arm, s, seed) for seed in TUNING_SEEDS]) for s in settings(arm, start)]
        complete = [(s, sum(v) / len(v)) for s, v in table if all(x is not None for x in v)]
        decided = ""
        if len(complete) < len(table):
            # an unfinished setting cannot win when even SR 1.0 in every missing run leaves its
            # mean below the best finished one: the choice is then what the full grid gives
            ceiling = max((sum(1.0 if x is None else x for x in v) / len(v) for s, v in table
                           if any(x is None for x in v)), default=0.0)
            if not complete or ceiling >= _best(complete)[1]:
                out.append(Choice(arm, table, None, f"{len(table) - len(complete)} setting(s) incomplete"))
                continue
            decided = (f"{len(table) - len(complete)} setting(s) unfinished, each below the best even at "
                       "SR 1.0 in its missing runs")
        best = _best(complete)
        past = beyond_edge(best[0], start)
        note = ""
        if past is not None:
            vals = [_metric(records, arm, past, seed) for seed in TUNING_SEEDS]
            table.append((past, vals))
            if any(v is None for v in vals):
                out.append(Choice(arm, table, None, f"best at the edge of its grid: extend to {past.tag} "
                                                    "(protocol, Ties and edges)"))
                continue
            best = _best(complete + [(past, sum(vals) / len(vals))])
            note = f"grid extended once past the edge to {past.tag}"
        out.append(Choice(arm, table, best[0], "; ".join(x for x in (decided, note) if x)))
    return out


def _best(complete: list[tuple[Setting, float]]) -> tuple[Setting, float]:
    return max(complete, key=lambda sv: (round(sv[1], 12), -sv[0].lr))


def extensions_needed(choices: list[Choice]) -> list[tuple[Arm, Setting]]:
    """(arm, edge setting) of every arm that waits on the grid's extension."""
    out = []
    for c in choices:
        if c.chosen is None and c.note.startswith("best at the edge"):
            complete = [(s, sum(v) / len(v)) for s, v in c.table[:-1] if all(x is not None for x in v)]
            out.append((c.arm, _best(complete)[0]))
    return out


def render_selection(choices: list[Choice], start: str = "random") -> str:
    what = START_TITLES[start]
    lines = [f"# Tuning ({what}): mean validation SR on the "
             f"tuning tasks, steps {WINDOW[0]}-{WINDOW[1]}, seeds {', '.join(map(str, TUNING_SEEDS))}", ""]
    for c in choices:
        lines.append(f"## {c.arm.env} {c.arm.name}: {c.chosen.tag if c.chosen else 'not chosen'}"
                     + (f" ({c.note})" if c.note else ""))
        lines.append("")
        lines.append("| setting | " + " | ".join(f"seed {s}" for s in TUNING_SEEDS) + " | mean |")
        lines.append("|---|" + "---|" * (len(TUNING_SEEDS) + 1))
        for s, vals in c.table:
            cells = ["–" if v is None else f"{100 * v:.1f}" for v in vals]
            mean = "–" if any(v is None for v in vals) else f"{100 * sum(vals) / len(vals):.1f}"
            mark = " **←**" if c.chosen == s else ""
            lines.append(f"| {s.tag} | " + " | ".join(cells) + f" | {mean}{mark} |")
        lines.append("")
    return "\n".join(lines)


def selection_json(choices: list[Choice]) -> dict[str, Any]:
    """The chosen settings as data (``select --json``), what the evaluation config is made from."""
    out: dict[str, Any] = {}
    for c in choices:
        key = f"{c.arm.env}/{c.arm.name}"
        out[key] = None if c.chosen is None else {"optimizer": c.chosen.optimizer, "lr": c.chosen.lr,
                                                   "gigpo_mode": c.chosen.gigpo_mode, "note": c.note}
    return out


def _setting(d: dict[str, Any]) -> Setting:
    return Setting(str(d["optimizer"]), float(d["lr"]), d.get("gigpo_mode"))


def evaluation_study(chosen: dict[str, Any], start: str = "random", envs: Iterable[str] = ENVS) -> dict[str, Any]:
    """The evaluation grid from the tuned settings (protocol, "What is run"): every arm at its
    own setting, and each ProAS arm also at its base's setting where the two differ; the final
    policy validated again at temperature 1.0 and greedily. ``start="other"``: the other baselines
    (PPO on its schedules, MiGPO), unshaped, each at its own setting. ``envs`` limits it to some envs
    (one whose tuning is done can start before the other's): its rows are the same as in the full grid."""
    envs = list(envs)
    if not envs or any(e not in ENVS for e in envs):
        raise ProasError(f"envs must be some of {', '.join(ENVS)}, got {envs}")
    rows: list[dict[str, Any]] = []
    for arm in arms([e for e in ENVS if e in envs], start):
        own = chosen.get(f"{arm.env}/{arm.name}")
        if own is None:
            raise ProasError(f"no tuned setting for {arm.env}/{arm.name}; run the tuning grid and select first")
        variants = [(f"{arm.name}_{arm.env}", _setting(own))]
        if arm.shaping == "proas":
            base = chosen.get(f"{arm.env}/{arm.estimator}_none")
            if base is None:
                raise ProasError(f"no tuned setting for {arm.env}/{arm.estimator}_none")
            if _setting(base) != _setting(own):
                variants.append((f"{arm.name}_at_base_{arm.env}", _setting(base)))
        for rid, s in variants:  # the tuning grid's row of that setting, renamed, on its env
            rows.append({**_row(arm, s, start), "id": rid, "label": f"{arm.name} {s.tag}", "envs": [arm.env]})
    if start == "sft":
        rows.insert(0, dict(SFT_START_ROW))
    temps = "[" + ",".join(f"{t:g}" for t in FINAL_TEMPERATURES) + "]"
    what = START_TITLES[start]
    return {
        "study": {"random": "heldout_main", "sft": "heldout_sft", "other": "heldout_other"}[start],
        "title": f"Held-out study: evaluation ({what})",
        "kind": "ablation",
        "reference": rows[1]["id"] if start == "sft" else rows[0]["id"],
        "description": "docs/study-protocol.md: each arm at its tuned setting, evaluation seeds, fixed validation set",
        "envs": [e for e in ENVS if e in envs],
        "seeds": list(EVAL_SEEDS if start == "random" else EVAL_SEEDS_SHORT),
        "steps": STEPS,
        "common": ["policy=scorer", "train.progress=false", f"train.final_val_temperatures={temps}"],
        "rows": rows,
    }


#: the ablations (protocol, "What is run", 4): GRPO on both envs, at GRPO+ProAS's tuned setting
ABLATIONS = (("no_apr", ["algo.shaping=no_apr"]), ("no_mui", ["algo.shaping=no_mui"]),
             ("rea_node", ["algo.shaping=proas", "algo.graph.rea=node"]))


def ablation_study(chosen: dict[str, Any], envs: Iterable[str] = ENVS) -> dict[str, Any]:
    """The ablation grid from the tuned settings: MUI only, APR only and the node rule, each at
    GRPO+ProAS's setting on seeds 100-104. They are read against the evaluation grid's
    ``grpo_proas_ENV`` runs of the same seeds (same setting, same seeds, same tasks)."""
    envs = [e for e in ENVS if e in list(envs)]
    rows: list[dict[str, Any]] = []
    for env in envs:
        own = chosen.get(f"{env}/grpo_proas")
        if own is None:
            raise ProasError(f"no tuned setting for {env}/grpo_proas; run the tuning grid and select first")
        s = _setting(own)
        for name, over in ABLATIONS:
            rows.append({"id": f"grpo_{name}_{env}", "label": f"grpo {name} {s.tag}",
                         "overrides": ["algo.estimator=grpo", *over, *s.overrides()], "envs": [env]})
    return {
        "study": "heldout_ablation",
        "title": "Held-out study: ablations (random weights)",
        "kind": "ablation",
        "reference": rows[0]["id"],
        "description": "docs/study-protocol.md: MUI only, APR only and rea=node at GRPO+ProAS's tuned setting",
        "envs": envs,
        "seeds": list(EVAL_SEEDS_SHORT),
        "steps": STEPS,
        "common": ["policy=scorer", "train.progress=false",
                   "train.final_val_temperatures=[" + ",".join(f"{t:g}" for t in FINAL_TEMPERATURES) + "]"],
        "rows": rows,
    }


# --------------------------------------------------------------------------- analysis


def run_figures(run_dir: Path) -> dict[str, Any] | None:
    """The per-seed figures of one finished run (None when its primary metric is incomplete)."""
    recs = run_metrics(run_dir)
    primary = mean_val(recs)
    if primary is None:
        return None

    def window(key: str) -> float | None:
        vals = [r[key] for r in recs if 51 <= r["step"] <= 150 and r.get(key) is not None]
        return sum(vals) / len(vals) if vals else None

    vals = [(r["step"], r["val/sr"]) for r in recs if r.get("val/sr") is not None]
    last = recs[-1]
    out: dict[str, Any] = {
        "primary": primary,
        "best_val": max(v for _, v in vals),
        "last_val": next(v for s, v in vals if s == STEPS) if any(s == STEPS for s, _ in vals) else None,
        "train_sr": window("train/sr"),
        "train_errors": window("train/error_rate"),
        "train_steps": window("train/steps"),
        "val_ts": mean_val(recs, "val/ts"),
    }
    for t, key in (("0.4", "val"), ("1", "val_t1"), ("0", "val_t0")):
        for m in ("sr", "errors", "entropy"):
            v = last.get(f"{key}/{m}")
            out[f"t{t}_{m}"] = v
    out["commit"] = run_commit(run_dir)
    by_step = dict(vals)
    out.update({f"val{k}": by_step.get(k) for k in VAL_STEPS})
    return out


def paired(deltas: list[float], level: float = 0.95) -> dict[str, Any]:
    """Mean of paired differences with its t-interval, the two-sided p-value of a zero mean, the
    count of positive differences and the effect the design could resolve (80% power)."""
    from proas.experiments.report import mean_std, t_cdf, t_quantile

    n = len(deltas)
    m, sd = mean_std(deltas)
    out = {"n": n, "mean": m, "sd": sd, "up": sum(d > 0 for d in deltas), "lo": None, "hi": None, "p": None,
           "mde": None}
    if n >= 2:
        se = sd / math.sqrt(n)
        q = t_quantile(0.5 + level / 2.0, n - 1)
        out["lo"], out["hi"] = m - q * se, m + q * se
        out["p"] = 1.0 if se == 0 and m == 0 else (0.0 if se == 0 else 2.0 * (1.0 - t_cdf(abs(m) / se, n - 1)))
        out["mde"] = (q + t_quantile(0.8, n - 1)) * se
    return out


def verdict(lo: float | None, hi: float | None, margin: float = 0.05) -> str:
    """The protocol's verdict on an interval (SR as a fraction; margin 5 points)."""
    if lo is None or hi is None:
        return "unresolved"
    if lo > 0:
        return "helps"
    if hi < 0:
        return "hurts"
    if -margin < lo and hi < margin:
        return "no effect"
    return "unresolved"


def holm(pvalues: list[float | None]) -> list[float | None]:
    """Holm-Bonferroni adjusted p-values (None stays None)."""
    idx = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(idx):
        running = max(running, min(1.0, (len(idx) - rank) * p))
        out[i] = running
    return out


CSV_FIELDS = ("row", "env", "seed", "commit", "primary", "best_val", "last_val", "train_sr", "train_errors",
              "train_steps", "val_ts", "t0.4_sr", "t0.4_errors", "t0.4_entropy", "t1_sr", "t1_errors",
              "t1_entropy", "t0_sr", "t0_errors", "t0_entropy", *(f"val{k}" for k in VAL_STEPS))

EvalRecords = dict[tuple[str, str, int], dict[str, Any]]


def read_per_seed(path: Path) -> EvalRecords:
    """The per-seed rows of a CSV written by ``analyse`` (``*_per_seed.csv``). A figure that is
    not a finite number, or a run given twice, is a one-line error."""
    from proas.experiments.datafiles import read_csv

    out: EvalRecords = {}
    lines: dict[tuple, int] = {}
    _, rows = read_csv(path, "per-seed CSV", required={"row", "env", "seed", "primary"})
    for n, row in rows:
        rec: dict[str, Any] = {}
        for k, v in row.items():
            if k in ("row", "env", "commit"):
                rec[k] = v or None
            elif k == "seed":
                rec[k] = _seed(v, path, n)
            else:
                rec[k] = None if v == "" else _number(v, k, path, n)
        if rec.get("primary") is None:
            raise ProasError(f"{path}: line {n}: no finite primary metric")
        key = (rec["row"], rec["env"], rec["seed"])
        _once(out, key, lines, path, n)
        out[key] = rec
    return out


def per_seed_rows(sources: Path | Iterable[Path], study: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (row, env, seed) of an evaluation study with every figure, from results
    directories (finished runs only) and per-seed CSVs; a later source replaces an earlier one's
    run. Runs the study does not name are left out."""
    sources = [Path(sources)] if isinstance(sources, (str, Path)) else [Path(x) for x in sources]
    wanted = [(row["id"], env, seed) for row in study["rows"] if row.get("sft") is None
              for env in row.get("envs", study["envs"]) for seed in study["seeds"]]
    # an ablation or another baseline is read against the evaluation grid's rows of the same seeds
    # (several share a reference: each (row, env, seed) is wanted once)
    wanted = list(dict.fromkeys(wanted + [(row, env, seed) for env, _, ref, cmp in _external_pairs(study)
                                          for row in (ref, cmp) for seed in study["seeds"]]))
    found: EvalRecords = {}
    for src in sources:
        if src.is_file():
            found.update({k: v for k, v in read_per_seed(src).items() if k in set(wanted)})
            continue
        if not src.is_dir():
            raise ProasError(f"{src}: no such results directory or per-seed CSV")
        for row, env, seed in wanted:
            run = src / env / row / f"seed{seed}"
            if not (run / "summary.json").exists():
                continue
            fig = run_figures(run)
            if fig is not None:
                found[(row, env, seed)] = {"row": row, "env": env, "seed": seed, **fig}
    return [found[k] for k in wanted if k in found]


def _external_pairs(study: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(env, label, reference row, compared row) of the comparisons with the evaluation grid's rows
    (run in another study, read from its per-seed CSV or directory): each ablation against full
    GRPO+ProAS and against GRPO (Δ = ablation − reference); each other baseline against each ProAS
    arm at its own setting (Δ = ProAS arm − other baseline)."""
    out = []
    for row in study["rows"]:
        for env in ENVS:
            for name, _ in ABLATIONS:
                if row["id"] == f"grpo_{name}_{env}":
                    out += [(env, f"{name} vs {ref}", f"{ref}_{env}", row["id"]) for ref in ("grpo_proas", "grpo_none")]
            for other in OTHER_ESTIMATORS:
                if row["id"] == f"{other}_none_{env}":
                    out += [(env, f"{est}_proas vs {other}", row["id"], f"{est}_proas_{env}") for est in ESTIMATORS]
    return out


def pairs_of(study: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(env, label, reference row, compared row) of the comparisons: each ProAS arm at its own
    setting against its base (primary), and at its base's setting where that was run; in an
    ablation or other-baselines study, the comparisons with the evaluation grid (``_external_pairs``)."""
    ids = {r["id"] for r in study["rows"]}
    out = _external_pairs(study)
    for env in ENVS:
        for est in ESTIMATORS:
            base = f"{est}_none_{env}"
            if base not in ids:
                continue
            out.append((env, f"{est} +ProAS (own setting)", base, f"{est}_proas_{env}"))
            at_base = f"{est}_proas_at_base_{env}"
            same = at_base if at_base in ids else f"{est}_proas_{env}"  # equal settings: the same runs
            out.append((env, f"{est} +ProAS (base's setting)", base, same))
    return out


def analyse(sources: Path | Iterable[Path], study: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per-seed rows and, per pair, the paired figures and the verdict; Holm over the primary pairs."""
    rows = per_seed_rows(sources, study)
    by = {(r["row"], r["env"], r["seed"]): r for r in rows}
    pairs = []
    for env, label, base, proas in pairs_of(study):
        seeds = [s for s in study["seeds"] if (base, env, s) in by and (proas, env, s) in by]
        deltas = [by[(proas, env, s)]["primary"] - by[(base, env, s)]["primary"] for s in seeds]
        res = paired(deltas) if deltas else {"n": 0, "mean": None, "sd": None, "up": 0, "lo": None, "hi": None,
                                             "p": None, "mde": None}
        pairs.append({"env": env, "pair": label, "base": base, "proas": proas, **res,
                      "verdict": verdict(res["lo"], res["hi"]) if deltas else "not run"})
    # Holm over the study's primary pairs (the protocol's 6), once every one of them has all of
    # the study's seeds: a family with runs missing has no adjusted p yet ("pending")
    primary = [i for i, p in enumerate(pairs) if p["pair"].endswith("(own setting)")]
    pvals = [pairs[i]["p"] for i in primary]
    complete = all(p is not None and pairs[i]["n"] == len(study["seeds"]) for i, p in zip(primary, pvals))
    adjusted = holm(pvals) if complete else [None] * len(primary)
    for i, adj in zip(primary, adjusted):
        pairs[i]["p_holm"] = adj if adj is not None else "pending"
    return rows, pairs


def render_pairs(pairs: list[dict[str, Any]]) -> str:
    def pct(x: float | None) -> str:
        return "–" if x is None else f"{100 * x:+.1f}"

    lines = ["| env | pair | n | Δ mean | 95% CI | seeds up | p | p (Holm) | resolvable | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for p in pairs:
        ci = "–" if p["lo"] is None else f"[{pct(p['lo'])}, {pct(p['hi'])}]"
        pv = "–" if p["p"] is None else f"{p['p']:.3g}"
        ph = p.get("p_holm")
        ph = "–" if ph is None else ph if isinstance(ph, str) else f"{ph:.3g}"
        mde = "–" if p["mde"] is None else f"{100 * p['mde']:.1f}"
        lines.append(f"| {p['env']} | {p['pair']} | {p['n']} | {pct(p['mean'])} | {ci} | {p['up']}/{p['n']} | {pv} | "
                     f"{ph} | {mde} | {p['verdict']} |")
    return "\n".join(lines)


#: the protocol's secondary readings, as (column, label): each reported beside the primary, none decides
SECONDARY = (("best_val", "best val"), ("last_val", "last val"), ("train_sr", "train SR"),
             ("train_errors", "train errors"), ("train_steps", "train length"), ("t0_sr", "greedy SR"),
             ("t1_sr", "SR at T=1"), ("t0.4_entropy", "entropy"))


def spd_at(base_curve: list[float | None], other_curve: list[float | None], frac: float) -> float | None:
    """Spd.@K (protocol, Metric): K = ``frac`` of the maximum of the base's mean validation curve;
    the step at which the base first reaches K over the step at which the other row does (None:
    the other never does). Curves are per step 0, 10, ..., 150."""
    pts = [(s, b, o) for s, b, o in zip(VAL_STEPS, base_curve, other_curve) if b is not None and o is not None]
    if not pts:
        return None
    k = frac * max(b for _, b, _ in pts)
    first = lambda vals: next((s for s, v in vals if v >= k), None)  # noqa: E731
    sb, so = first([(s, b) for s, b, _ in pts]), first([(s, o) for s, _, o in pts])
    if so is None or sb is None:
        return None
    return max(sb, 10) / max(so, 10)  # a curve already there at step 0 counts as step 10


def secondary(rows: list[dict[str, Any]], pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per pair: the paired mean difference and t-interval of each secondary reading, and Spd.@K
    at 50% and 75% of the base's mean curve's maximum."""
    by = {(r["row"], r["env"], r["seed"]): r for r in rows}
    out = []
    for p in pairs:
        seeds = sorted(s for (row, env, s) in by if row == p["base"] and env == p["env"]
                       and (p["proas"], env, s) in by)
        rec: dict[str, Any] = {"env": p["env"], "pair": p["pair"], "n": len(seeds)}
        for key, _ in SECONDARY:
            d = [by[(p["proas"], p["env"], s)][key] - by[(p["base"], p["env"], s)][key] for s in seeds
                 if by[(p["proas"], p["env"], s)].get(key) is not None
                 and by[(p["base"], p["env"], s)].get(key) is not None]
            rec[key] = paired(d) if d else None
        curves = []
        for row in (p["base"], p["proas"]):
            curve = []
            for k in VAL_STEPS:
                vals = [by[(row, p["env"], s)].get(f"val{k}") for s in seeds]
                vals = [v for v in vals if v is not None]
                curve.append(sum(vals) / len(vals) if vals else None)
            curves.append(curve)
        for frac in (0.5, 0.75):
            rec[f"spd{int(frac * 100)}"] = spd_at(curves[0], curves[1], frac) if seeds else None
        out.append(rec)
    return out


def render_secondary(sec: list[dict[str, Any]]) -> str:
    def cell(r: dict[str, Any] | None, scale: float) -> str:
        if r is None:
            return "–"
        ci = "" if r["lo"] is None else f" [{scale * r['lo']:+.1f}, {scale * r['hi']:+.1f}]"
        return f"{scale * r['mean']:+.1f}{ci}"

    head = "| env | pair | n | " + " | ".join(label for _, label in SECONDARY) + " | Spd.@50% | Spd.@75% |"
    lines = [head, "|" + "---|" * (len(SECONDARY) + 5)]
    for r in sec:
        cells = [cell(r[k], 1.0 if k in ("train_steps", "t0.4_entropy") else 100.0) for k, _ in SECONDARY]
        spd = ["–" if r[k] is None else f"{r[k]:.2f}" for k in ("spd50", "spd75")]
        if r["n"] and r["spd50"] is None:
            spd[0] = "n/r"
        if r["n"] and r["spd75"] is None:
            spd[1] = "n/r"
        lines.append(f"| {r['env']} | {r['pair']} | {r['n']} | " + " | ".join(cells + spd) + " |")
    return "\n".join(lines)


def render_rows(rows: list[dict[str, Any]]) -> str:
    """Per row and env: the seeds run, and the mean (± std over seeds) of the primary metric and
    the mean of each secondary SR reading, in points."""
    from proas.experiments.report import mean_std

    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["env"], r["row"]), []).append(r)
    keys = (("best_val", "best val"), ("last_val", "last val"), ("train_sr", "train SR"), ("t0_sr", "greedy SR"),
            ("t1_sr", "SR at T=1"))
    lines = ["| env | row | seeds | primary | " + " | ".join(label for _, label in keys) + " |",
             "|" + "---|" * (len(keys) + 4)]
    for (env, row), rs in groups.items():
        m, sd = mean_std([r["primary"] for r in rs])
        cells = []
        for key, _ in keys:
            vals = [r[key] for r in rs if r.get(key) is not None]
            cells.append("–" if not vals else f"{100 * sum(vals) / len(vals):.1f}")
        lines.append(f"| {env} | {row} | {len(rs)} | {100 * m:.1f} ± {100 * sd:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
