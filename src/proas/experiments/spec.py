"""Experiment configs: a study (one of the paper's tables) as a YAML file, expanded into runs.

A study names its table's rows, the environments and seeds they run on and the step budget; each
row is either a set of ``proas train`` overrides or marked ``not_run`` with the reason (a row the
trainer cannot run yet is reported as such, never faked). The shipped studies live next to this
module in ``configs/`` and are found by bare name (``main``, ``ablation_shaping``, ...).

Format (see docs/experiments.md)::

    study: main                      # names the table in the report
    title: Main results
    kind: main                       # main: bold + Spd.@K against each row's ``base``;
                                     # ablation: bold against ``reference``
    reference: grpo                  # ablation only: the row the others are compared with
    envs: [household, shop]
    seeds: [0, 1, 2]
    steps: 150                       # step budget (train.steps; report's "within N steps")
    common: [policy=scorer]          # overrides for every run
    env_overrides: {shop: [...]}     # overrides for one env's runs
    rows:
      - {id: grpo, label: GRPO, overrides: [algo.estimator=grpo, algo.shaping=none]}
      - {id: grpo_proas, label: GRPO+ProAS, base: grpo, overrides: [...]}
      - {id: sft, label: SFT, sft: [--epochs, "10"], overrides: [...]}  # `proas sft` with these options
      - {id: react, label: ReAct, not_run: "needs a proprietary API model"}
      - {id: direct, label: Direct Prompt, untrained_of: grpo}   # step-0 validation of grpo's runs
      - {id: teacher, label: ..., hidden: true, overrides: [...]}   # run, not a table row
      - {id: distill, ..., needs: [teacher],
         overrides: [algo.graph.path={out}/{env}/teacher/seed{seed}/checkpoints/step_{steps:06d}/graph.json]}

Placeholders in overrides: ``{env}``, ``{seed}``, ``{steps}`` (the budget), ``{out}`` (the
results directory, absolute) and ``{data}`` (the shipped task sets), each plain or with a short
numeric format (``{steps:06d}``); any other (``{out.__class__}``, ``{0}``, ``{seed!r}``) is
refused. Rows must not need each other in a cycle. Unless a
row sets ``env.fixed_train_set.path`` itself, the runner adds the fixed schedule of the run's
seed and env (``schedule: group``, 16 tasks a step, or ``schedule: ppo``, 128 task slots a step).
Two studies may define the same row id; the runs are shared when the resolved overrides agree
(GRPO and GRPO+ProAS appear in every table).
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from proas.errors import ProasError

__all__ = ["RowSpec", "RunSpec", "Study", "load_study", "shipped_studies", "study_path"]

KINDS = ("main", "ablation")
SCHEDULES = ("group", "ppo")
#: the options of ``proas sft`` an ``sft`` row may give
SFT_OPTIONS = ("--epochs", "--lr", "--batch-size", "--val-every", "--max-tasks", "--sequence-loss")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ROW_KEYS = {"id", "label", "overrides", "base", "not_run", "needs", "hidden", "schedule", "note", "untrained_of",
             "sft", "envs"}
_TOP_KEYS = {"study", "title", "kind", "reference", "envs", "seeds", "steps", "common", "env_overrides",
             "rows", "description"}
#: the placeholders an override may hold, and the format specs they may have (``{steps:06d}``)
PLACEHOLDERS = ("env", "seed", "steps", "out", "data")
_FORMAT_SPEC = re.compile(r"0?[0-9]{0,2}d?")


@dataclass(frozen=True)
class RowSpec:
    id: str
    label: str
    overrides: tuple[str, ...] = ()
    base: str | None = None
    not_run: str | None = None
    #: no runs of its own: the untrained policy, read from the step-0 validation (before any
    #: update) of this other row's runs, seed by seed (the scorer's "Direct Prompt")
    untrained_of: str | None = None
    needs: tuple[str, ...] = ()
    hidden: bool = False
    schedule: str = "group"
    note: str | None = None
    #: options of ``proas sft`` (e.g. ``[--epochs, "10"]``): the row is the SFT baseline, run
    #: with ``proas sft`` on the row's config instead of ``proas train``; its records are epochs,
    #: outside the RL step budget
    sft: tuple[str, ...] | None = None
    #: the envs this row runs on (None: every env of the study); a row that only makes sense on
    #: one env, such as GiGPO's modes tuned on shop in the held-out study
    envs: tuple[str, ...] | None = None


@dataclass(frozen=True)
class RunSpec:
    """One run: a row on one env with one seed (``proas train``, or ``proas sft`` for SFT rows)."""

    study: str
    row: str
    env: str
    seed: int
    overrides: tuple[str, ...]
    needs: tuple[str, ...] = ()
    #: ``train`` or ``sft``
    command: str = "train"
    #: extra options of the command (``proas sft``'s ``--epochs`` ...)
    args: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{env_dir(self.env)}/{self.row}/seed{self.seed}"

    def run_dir(self, out: Path) -> Path:
        return out / env_dir(self.env) / self.row / f"seed{self.seed}"


def env_dir(env: str) -> str:
    """The folder of an env's runs (a ``module:factory`` env name has no ':' in it)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", env)


@dataclass
class Study:
    name: str
    title: str
    kind: str
    envs: tuple[str, ...]
    seeds: tuple[int, ...]
    steps: int
    rows: tuple[RowSpec, ...]
    common: tuple[str, ...] = ()
    env_overrides: dict[str, tuple[str, ...]] = field(default_factory=dict)
    reference: str | None = None
    description: str = ""
    source: str = ""

    def row(self, row_id: str) -> RowSpec:
        for r in self.rows:
            if r.id == row_id:
                return r
        raise KeyError(row_id)

    def runs(self, out: Path, *, seeds: list[int] | None = None, rows: list[str] | None = None,
             envs: list[str] | None = None, data_root: Path | None = None) -> list[RunSpec]:
        """Every runnable (row, env, seed) of the study, overrides resolved against ``out``.

        ``rows`` selects rows by id and pulls in the rows they ``need``; ``not_run`` rows are
        never run.
        """
        from proas.tasksets import default_root

        data = Path(data_root) if data_root is not None else default_root()
        out = Path(out).resolve()
        for name, pick, allowed in (("row", rows, [r.id for r in self.rows]), ("env", envs, list(self.envs))):
            for x in pick or []:
                if x not in allowed:
                    raise ProasError(f"study {self.name}: no {name} {x!r}; choose from {', '.join(allowed)}")
        chosen = set(rows) if rows else {r.id for r in self.rows}
        todo = list(chosen)
        while todo:
            for dep in self.row(todo.pop()).needs:
                if dep not in chosen:
                    chosen.add(dep)
                    todo.append(dep)
        specs = []
        for env in self.envs:
            if envs and env not in envs:
                continue
            for seed in (seeds if seeds is not None else list(self.seeds)):
                for row in self.rows:
                    if row.id not in chosen or row.not_run or row.untrained_of:
                        continue
                    if row.envs is not None and env not in row.envs:
                        continue
                    # a needed row that does not run on this env has no run here to wait for
                    needs = tuple(d for d in row.needs if self.row(d).envs is None or env in self.row(d).envs)
                    specs.append(RunSpec(self.name, row.id, env, int(seed),
                                         self.resolve(row, env, int(seed), out, data), needs,
                                         command="sft" if row.sft is not None else "train",
                                         args=row.sft or ()))
        return specs

    def resolve(self, row: RowSpec, env: str, seed: int, out: Path, data: Path) -> tuple[str, ...]:
        subst = {"env": env, "seed": seed, "out": str(out), "data": str(data), "steps": self.steps}
        items = [f"env={env}", f"seed={seed}", f"train.steps={self.steps}", *self.common,
                 *self.env_overrides.get(env, ()), *row.overrides]
        resolved = []
        for item in items:
            where = f"study {self.name}, row {row.id}"
            check_placeholders(item, where)
            try:
                resolved.append(item.format(**subst))
            except (KeyError, IndexError, ValueError) as exc:
                raise ProasError(f"{where}: bad placeholder in {item!r} ({exc})") from None
        if not any(x.split("=", 1)[0] == "env.fixed_train_set.path" for x in resolved):
            folder = "fixed_train_set" if row.schedule == "group" else "fix_train_set_ppo"
            resolved.insert(3, f"env.fixed_train_set.path={data / folder / f'seed{seed}' / env}")
        return tuple(resolved)


def check_placeholders(item: str, where: str) -> None:
    """Refuse any placeholder of ``item`` but the plain ones of ``PLACEHOLDERS``: ``str.format``
    would otherwise reach attributes and items (``{out.__class__}``), positions (``{0}``) and
    conversions (``{seed!r}``), and a wide format (``{seed:999999999}``) would fill memory."""
    try:
        fields = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(item) if f is not None]
    except ValueError as exc:
        raise ProasError(f"{where}: bad placeholder in {item!r} ({exc})") from None
    for f, spec, conv in fields:
        if f not in PLACEHOLDERS or conv is not None or not _FORMAT_SPEC.fullmatch(spec or ""):
            shown = "{" + f + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
            raise ProasError(f"{where}: placeholder {shown} in {item!r} is not allowed; use "
                             + ", ".join("{" + p + "}" for p in PLACEHOLDERS) + " (optionally with a format "
                             "such as {steps:06d})")


def _text(value: Any, default: str, where: str) -> str:
    """A text field (a label, a title): absent gives ``default``; a number is written as text."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ProasError(f"{where} must be text")
    return str(value)


def _ref(value: Any, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ProasError(f"{where} must be a row id")
    return value


def _cycle(rows: list[RowSpec]) -> list[str] | None:
    """A cycle in the rows' ``needs`` (row ids, the first repeated at the end), or None."""
    needs = {r.id: r.needs for r in rows}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(rid: str, path: list[str]) -> list[str] | None:
        state[rid] = 1
        for dep in needs.get(rid, ()):
            if state.get(dep) == 1:  # on the path: the path from it back to it is the cycle
                return path[path.index(dep):] + [dep]
            if state.get(dep) is None:
                found = visit(dep, path + [dep])
                if found:
                    return found
        state[rid] = 2
        return None

    for r in rows:
        if state.get(r.id) is None:
            found = visit(r.id, [r.id])
            if found:
                return found
    return None


def _strs(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(x, (str, int, float, bool)) for x in value):
        raise ProasError(f"{where} must be a list of strings")
    return tuple(str(x) for x in value)


def parse_study(data: Any, where: str, *, check_overrides: bool = True) -> Study:
    """Check a study's structure; every problem is a ``ProasError`` naming the file and key.

    ``check_overrides``: also build every runnable row's trainer config (what running needs;
    reading a finished study's results does not)."""
    if not isinstance(data, dict):
        raise ProasError(f"{where}: an experiment config must be a mapping")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ProasError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    name = data.get("study")
    if not isinstance(name, str) or not _ID.match(name):
        raise ProasError(f"{where}: 'study' must be a name of letters, digits, '_', '-', '.'")
    kind = data.get("kind", "main")
    if kind not in KINDS:
        raise ProasError(f"{where}: kind={kind!r} is not one of {', '.join(KINDS)}")
    envs = _strs(data.get("envs"), f"{where}: envs")
    if not envs:
        raise ProasError(f"{where}: 'envs' must list at least one environment")
    for env in envs:
        # an env's runs go to OUT/<env_dir(env)>/: '..' would put them beside OUT, '' or '.' in it
        if env_dir(env) in ("", ".", ".."):
            raise ProasError(f"{where}: envs: {env!r} is not an env name (household, shop or module:factory)")
    seeds = data.get("seeds")
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and s >= 0 for s in seeds):
        raise ProasError(f"{where}: 'seeds' must be a non-empty list of integers >= 0")
    steps = data.get("steps")
    if not isinstance(steps, int) or steps <= 0:
        raise ProasError(f"{where}: 'steps' must be a positive integer")
    env_over = data.get("env_overrides") or {}
    if not isinstance(env_over, dict):
        raise ProasError(f"{where}: 'env_overrides' must map env names to lists of overrides")
    raw_rows = data.get("rows")
    if not isinstance(raw_rows, list) or not raw_rows:
        raise ProasError(f"{where}: 'rows' must be a non-empty list")
    rows: list[RowSpec] = []
    for i, r in enumerate(raw_rows):
        at = f"{where}: rows[{i}]"
        if not isinstance(r, dict):
            raise ProasError(f"{at} must be a mapping")
        unknown = set(r) - _ROW_KEYS
        if unknown:
            raise ProasError(f"{at}: unknown key(s) {', '.join(sorted(unknown))}")
        rid = r.get("id")
        if not isinstance(rid, str) or not _ID.match(rid):
            raise ProasError(f"{at}: 'id' must be a name of letters, digits, '_', '-', '.'")
        if any(x.id == rid for x in rows):
            raise ProasError(f"{at}: duplicate row id {rid!r}")
        schedule = r.get("schedule", "group")
        if schedule not in SCHEDULES:
            raise ProasError(f"{at}: schedule={schedule!r} is not one of {', '.join(SCHEDULES)}")
        not_run = r.get("not_run")
        if not_run is not None and (not isinstance(not_run, str) or not not_run.strip()):
            raise ProasError(f"{at}: 'not_run' must be the reason, as text")
        overrides = _strs(r.get("overrides"), f"{at}: overrides")
        untrained_of = _ref(r.get("untrained_of"), f"{at}: 'untrained_of'")
        sft = _strs(r.get("sft"), f"{at}: sft") if "sft" in r else None
        if not not_run and not untrained_of and not overrides and sft is None:
            raise ProasError(f"{at}: a row needs 'overrides', 'untrained_of', 'sft' or a 'not_run' reason")
        if sft is not None and (r.get("base") or untrained_of):
            raise ProasError(f"{at}: an 'sft' row has no 'base' or 'untrained_of'")
        row_envs = _strs(r.get("envs"), f"{at}: envs") if "envs" in r else None
        if row_envs is not None and (not row_envs or set(row_envs) - set(envs)):
            raise ProasError(f"{at}: 'envs' must name some of the study's envs ({', '.join(envs)})")
        rows.append(
            RowSpec(
                id=rid,
                label=_text(r.get("label"), rid, f"{at}: 'label'"),
                overrides=overrides,
                base=_ref(r.get("base"), f"{at}: 'base'"),
                not_run=not_run,
                untrained_of=untrained_of,
                needs=_strs(r.get("needs"), f"{at}: needs"),
                hidden=bool(r.get("hidden", False)),
                schedule=schedule,
                note=None if r.get("note") is None else _text(r.get("note"), "", f"{at}: 'note'"),
                sft=sft,
                envs=row_envs,
            )
        )
    ids = {r.id for r in rows}
    for r in rows:
        for ref in [x for x in (r.base, r.untrained_of) if x] + list(r.needs):
            if ref not in ids:
                raise ProasError(f"{where}: row {r.id!r} refers to unknown row {ref!r}")
    cycle = _cycle(rows)
    if cycle:
        raise ProasError(f"{where}: rows need each other in a cycle ({' -> '.join(cycle)}); no run of them could start")
    reference = _ref(data.get("reference"), f"{where}: 'reference'")
    if kind == "ablation" and reference not in ids:
        raise ProasError(f"{where}: an ablation study needs 'reference' naming one of its rows")
    study = Study(
        name=name,
        title=_text(data.get("title"), name, f"{where}: 'title'"),
        kind=kind,
        envs=envs,
        seeds=tuple(seeds),
        steps=steps,
        rows=tuple(rows),
        common=_strs(data.get("common"), f"{where}: common"),
        env_overrides={str(k): _strs(v, f"{where}: env_overrides.{k}") for k, v in env_over.items()},
        reference=reference,
        description=_text(data.get("description"), "", f"{where}: 'description'"),
        source=where,
    )
    if check_overrides:
        _check_overrides(study)
    return study


def _check_overrides(study: Study) -> None:
    """Every runnable row must resolve to a valid trainer config (caught here, not mid-grid)."""
    from proas.train.config import build_config

    for env in study.envs:
        for row in study.rows:
            if row.not_run or row.untrained_of:
                continue
            items = study.resolve(row, env, study.seeds[0], Path("/results"), Path("/data"))
            try:
                build_config(list(items))
            except ProasError as exc:
                raise ProasError(f"{study.source}: row {row.id!r} on {env}: {exc}") from None
            bad = [x for x in row.sft or () if x.startswith("-") and x.split("=", 1)[0] not in SFT_OPTIONS]
            if bad:
                raise ProasError(f"{study.source}: row {row.id!r}: unknown option(s) of proas sft: "
                                 f"{', '.join(bad)} (known: {', '.join(SFT_OPTIONS)})")


def shipped_studies() -> list[str]:
    folder = resources.files("proas.experiments") / "configs"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def study_path(name_or_path: str) -> Path:
    """A config file path, or the name of a shipped study (``main``, ``ablation_arg``, ...)."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise ProasError(f"{p}: no such experiment config")
        return p
    shipped = shipped_studies()
    if name_or_path not in shipped:
        raise ProasError(f"{name_or_path!r} is neither a config file nor a shipped study "
                         f"({', '.join(shipped)})")
    return Path(str(resources.files("proas.experiments") / "configs" / f"{name_or_path}.yaml"))


def load_study(name_or_path: str | Path) -> Study:
    """A study config, read without YAML aliases or duplicate keys (``datafiles.load_yaml``) and
    checked (``parse_study``)."""
    from proas.experiments.datafiles import load_yaml

    path = study_path(str(name_or_path))
    return parse_study(load_yaml(path, "experiment config"), str(path))
