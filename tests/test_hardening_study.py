"""The study tools (`proas heldout`, `proas report`, `proas experiment run`, `proas schedule make`)
fed hostile or careless input: one-line errors, nothing written outside the output directory or
before the inputs are checked, tables safe to open in a spreadsheet (issue 46)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from proas import tasksets
from proas.cli import main
from proas.errors import ProasError
from proas.experiments import heldout
from proas.experiments.datafiles import csv_cell, csv_text
from proas.experiments.report import make_report
from proas.experiments.spec import load_study, parse_study, shipped_studies

FORMULAS = ["=cmd|' /C calc'!A0", "+1+cmd|' /C calc'!A0", "-2+cmd|' /C calc'!A0", "@SUM(1+1)*cmd|' /C calc'!A0",
            "\t=1+1", "\r=1+1"]


def _error(capsys) -> str:
    """The one stderr line of a refused command."""
    err = capsys.readouterr().err
    assert err.startswith("proas: error: ") and err.count("\n") == 1, err
    return err


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _eval_study() -> dict:
    chosen = {f"{a.env}/{a.name}": {"optimizer": "sgd", "lr": 1.0, "gigpo_mode": None} for a in heldout.arms()}
    return heldout.evaluation_study(chosen, envs=["shop"])


def _fake_run(res: Path, row: str, seed: int, sr: float, commit: str = "c0ffee", **extra) -> Path:
    d = res / "shop" / row / f"seed{seed}"
    d.mkdir(parents=True)
    recs = [{"step": s, "val/sr": sr, "train/sr": 0.5, **extra} for s in range(0, 151, 10)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (d / "summary.json").write_text(json.dumps({"commit": commit}))
    return d


def _results(tmp_path: Path, study: dict, **runs) -> Path:
    res = tmp_path / "res"
    (res / "studies").mkdir(parents=True)
    (res / "studies" / "heldout_main.yaml").write_text(yaml.safe_dump(study))
    for seed in (100, 101, 102):
        for row, sr in (("grpo_none_shop", 0.2), ("grpo_proas_shop", 0.3)):
            _fake_run(res, row, seed, sr + 0.01 * seed - 1.0, **runs)
    return res


def _per_seed_csv(path: Path, rows: list[list[str]]) -> Path:
    path.write_text(csv_text(["row", "env", "seed", "commit", "primary", "best_val"], [])
                    + "".join(",".join(r) + "\n" for r in rows))
    return path


# --------------------------------------------------------------------------- names stay in --out


def test_analyse_refuses_a_saved_study_whose_name_is_a_path(tmp_path, capsys):
    study = dict(_eval_study(), study="../../escaped")
    res = _results(tmp_path, study)
    before = _files(tmp_path)
    out = tmp_path / "a" / "b" / "out"
    assert main(["heldout", "analyse", str(res), "--out", str(out)]) == 2
    assert "'study' must be a name" in _error(capsys)
    assert _files(tmp_path) == before and not out.exists()



@pytest.mark.parametrize("env", ["..", ".", ""])
def test_an_env_name_that_is_a_relative_folder_is_refused_before_anything_runs(tmp_path, capsys, env):
    """Runs land at OUT/<env>/<row>/seed<N>/. *Found:* env '..' ran (and failed) in a folder beside
    OUT, its train.log left there."""
    cfg = tmp_path / "s.yaml"
    cfg.write_text(yaml.safe_dump({"study": "s", "envs": [env], "seeds": [0], "steps": 2,
                                   "rows": [{"id": "a", "overrides": ["train.progress=false"]}]}))
    out = tmp_path / "res" / "out"
    assert main(["experiment", "run", str(cfg), "--out", str(out), "--jobs", "1"]) == 2
    assert f"envs: {env!r} is not an env name" in _error(capsys)
    assert not (tmp_path / "res").exists()

# --------------------------------------------------------------------------- formula cells


def test_analyse_writes_formula_cells_of_its_inputs_neutralised(tmp_path, capsys):
    res = _results(tmp_path, _eval_study(), commit=FORMULAS[0])
    extra = _per_seed_csv(tmp_path / "in.csv", [["grpo_none_shop", "shop", "105", '"' + FORMULAS[3] + '"', "0.2",
                                                   "0.25"]])
    out = tmp_path / "out"
    assert main(["heldout", "analyse", str(res), str(extra), "--study", str(res / "studies" / "heldout_main.yaml"),
                 "--out", str(out)]) == 0
    with open(out / "heldout_main_per_seed.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    commits = {(r["row"], r["seed"]): r["commit"] for r in rows}
    assert commits[("grpo_none_shop", "100")] == "'" + FORMULAS[0]
    assert commits[("grpo_none_shop", "105")] == "'" + FORMULAS[3]
    # a number stays a number (negative ones too: test_records_and_the_report_csv_neutralise_formula_cells;
    # a negative success rate is refused: test_a_success_rate_outside_0_1_is_refused_in_one_line)
    assert next(r for r in rows if r["seed"] == "105")["best_val"] == "0.25"


def test_records_and_the_report_csv_neutralise_formula_cells(tmp_path):
    for cell in FORMULAS:
        assert csv_cell(cell) == "'" + cell
    for cell in ("-3.2", "+3", "-0.5000", "1e-3", "-.5", "c0ffee", "grpo_none_shop", "", "'=already"):
        assert csv_cell(cell) == cell  # numbers, also negative ones as text, stay numbers
    assert csv_cell(-3.2) == -3.2 and csv_cell(None) is None
    records = {("shop", "grpo_none_sgd1", 200): {"env": "shop", "row": "grpo_none_sgd1", "seed": 200,
                                                "commit": FORMULAS[2], "tuning_metric": 0.25, "source": FORMULAS[5]}}
    heldout.write_records(records, tmp_path / "r.csv")
    with open(tmp_path / "r.csv", newline="") as fh:
        row = next(csv.DictReader(fh))
    assert row["commit"] == "'" + FORMULAS[2] and row["source"] == "'" + FORMULAS[5]

    res = tmp_path / "res"
    (res / "studies").mkdir(parents=True)
    (res / "studies" / "t.yaml").write_text(yaml.safe_dump({
        "study": "t", "title": "T", "kind": "main", "envs": ["shop"], "seeds": [0, 1], "steps": 20,
        "rows": [{"id": "a", "label": FORMULAS[0], "overrides": ["algo.shaping=none"]},
                 {"id": "b", "label": FORMULAS[4], "base": "a", "overrides": ["algo.shaping=proas"]}]}))
    for row, train in (("a", 0.6), ("b", 0.2)):  # b trains worse than a: a negative Δ train SR
        for seed in (0, 1):
            d = res / "shop" / row / f"seed{seed}"
            d.mkdir(parents=True)
            recs = [{"step": s, "val/sr": 0.5, "val/ts": 50.0, "train/sr": train + 0.01 * seed} for s in (0, 10, 20)]
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    make_report(res, plots=False)
    with open(res / "t.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert [r["method"] for r in table] == ["'" + FORMULAS[0], "'" + FORMULAS[4]]
    assert float(table[1]["shop_dTrainSR"]) == pytest.approx(-40.0) and table[1]["shop_dTrainSR"].startswith("-")


# --------------------------------------------------------------------------- YAML


def _bomb() -> str:
    """A study whose title is nine levels of nine aliases each: 9**9 values once walked."""
    names = "abcdefgh"
    parts = ["&a [" + ",".join(["lol"] * 9) + "]"]
    parts += [f"&{n} [" + ",".join([f"*{p}"] * 9) + "]" for p, n in zip(names, names[1:])]
    parts.append("[" + ",".join(["*h"] * 9) + "]")
    return ("study: bomb\ntitle: [" + ", ".join(parts) + "]\nenvs: [shop]\nseeds: [0]\nsteps: 10\n"
            "rows:\n  - {id: a, overrides: [algo.shaping=none]}\n")


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_bomb())
    assert len(bomb.read_bytes()) < 500
    # in a child with 1 GiB of address space: an expanding bomb dies there, not in the test run
    code = ("import resource, sys\nresource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
            "from proas.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.run([sys.executable, "-c", code, "experiment", "run", str(bomb), "--dry-run",
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and "alias (*a) is not allowed" in proc.stderr
    assert not (tmp_path / "out").exists()
    # no shipped study needs an alias
    for name in shipped_studies():
        load_study(name)


def test_a_duplicate_key_in_a_study_is_refused(tmp_path):
    cfg = tmp_path / "dup.yaml"
    cfg.write_text("study: dup\nenvs: [shop]\nseeds: [0]\nsteps: 10\nsteps: 20\n"
                   "rows:\n  - {id: a, overrides: [algo.shaping=none]}\n")
    with pytest.raises(ProasError, match=r"line 5: key 'steps' appears twice"):
        load_study(cfg)


# --------------------------------------------------------------------------- NaN and duplicates


def test_analyse_refuses_a_nan_figure_from_a_run_or_a_csv(tmp_path, capsys):
    res = _results(tmp_path, _eval_study(), **{"val_t0/sr": float("nan")})
    out = tmp_path / "out"
    assert main(["heldout", "analyse", str(res), "--out", str(out)]) == 2
    assert "val_t0/sr is 'nan', not a finite number" in _error(capsys)
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(_eval_study()))
    bad = _per_seed_csv(tmp_path / "in.csv", [["grpo_none_shop", "shop", "100", "c", "0.2", "0.3"],
                                               ["grpo_proas_shop", "shop", "100", "c", "0.3", "nan"]])
    assert main(["heldout", "analyse", str(bad), "--study", str(study), "--out", str(out)]) == 2
    assert "line 3: best_val is 'nan', not a finite number" in _error(capsys)
    assert not out.exists()


@pytest.mark.parametrize("value", ["5", "-0.25", "1.0001"])
@pytest.mark.parametrize("where", ["select CSV", "analyse CSV", "run metrics"])
def test_a_success_rate_outside_0_1_is_refused_in_one_line(tmp_path, capsys, where, value):
    """*Found:* a tuning CSV's tuning_metric of 5 (500%) was taken and decided the selection (the
    grid's edge to extend); a per-seed CSV's or a run's SR out of [0, 1] went into the verdicts."""
    out = tmp_path / "out"
    if where == "select CSV":
        runs = tmp_path / "runs.csv"
        runs.write_text(f"env,row,seed,tuning_metric\nshop,grpo_none_sgd1,200,{value}\n")
        argv = ["heldout", "select", str(runs), "--out", str(out / "sel.md")]
    else:
        study = tmp_path / "study.yaml"
        study.write_text(yaml.safe_dump(_eval_study()))
        if where == "analyse CSV":
            src = _per_seed_csv(tmp_path / "in.csv", [["grpo_none_shop", "shop", "100", "c0ffee", "0.2", value]])
        else:
            src = _results(tmp_path, _eval_study())
            with open(src / "shop" / "grpo_none_shop" / "seed101" / "metrics.jsonl", "a") as fh:
                fh.write(json.dumps({"step": 160, "val/sr": float(value)}) + "\n")
        argv = ["heldout", "analyse", str(src), "--study", str(study), "--out", str(out)]
    assert main(argv) == 2
    assert "not a share in [0, 1]" in _error(capsys)
    assert not out.exists()


def test_a_run_given_twice_in_one_csv_is_refused(tmp_path, capsys):
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(_eval_study()))
    bad = _per_seed_csv(tmp_path / "in.csv", [["grpo_none_shop", "shop", "100", "c", "0.2", ""],
                                               ["grpo_none_shop", "shop", "100", "c", "0.9", ""]])
    assert main(["heldout", "analyse", str(bad), "--study", str(study), "--out", str(tmp_path / "out")]) == 2
    assert "line 3: run grpo_none_shop/shop/100 appears twice (also line 2)" in _error(capsys)
    rec = tmp_path / "r.csv"
    rec.write_text("env,row,seed,tuning_metric\nshop,x,200,0.5\nshop,x,200,0.7\n")
    with pytest.raises(ProasError, match="appears twice"):
        heldout.read_records(rec)


@pytest.mark.parametrize("value, message", [("NaN", "val/sr is 'nan', not a finite number"),
                                            ('"0.5"', "val/sr is '0.5', not a finite number"),
                                            ("50.0", "val/sr is 50.0, not a success rate in [0, 1]"),
                                            ("-0.25", "val/sr is -0.25, not a success rate in [0, 1]")])
def test_report_refuses_a_val_sr_that_is_not_a_finite_number(tmp_path, capsys, value, message):
    res = tmp_path / "res"
    (res / "studies").mkdir(parents=True)
    # two studies: the first is fine, the second's run is broken; nothing at all is written
    for name in ("main", "other"):
        (res / "studies" / f"{name}.yaml").write_text(yaml.safe_dump({
            "study": name, "envs": ["shop"], "seeds": [0], "steps": 20,
            "rows": [{"id": name, "overrides": ["algo.shaping=none"]}]}))
    for name, sr in (("main", "0.5"), ("other", value)):
        d = res / "shop" / name / "seed0"
        d.mkdir(parents=True)
        (d / "metrics.jsonl").write_text(f'{{"step": 0, "val/sr": 0.1}}\n{{"step": 10, "val/sr": {sr}}}\n'
                                         '{"step": 11, "train/sr": 0.1}\n')
    before = _files(res)
    assert main(["report", str(res), "--no-plots"]) == 2
    assert message in _error(capsys)
    assert _files(res) == before


# --------------------------------------------------------------------------- needs


def test_rows_that_need_each_other_are_refused_before_anything_runs(tmp_path, capsys):
    base = {"study": "cyc", "envs": ["shop"], "seeds": [0], "steps": 10}
    rows = [{"id": "a", "needs": ["c"], "overrides": ["algo.shaping=none"]},
            {"id": "b", "needs": ["a"], "overrides": ["algo.shaping=none"]},
            {"id": "c", "needs": ["b"], "overrides": ["algo.shaping=none"]},
            {"id": "d", "overrides": ["algo.shaping=none"]}]
    with pytest.raises(ProasError, match=r"a cycle \(a -> c -> b -> a\)"):
        parse_study(dict(base, rows=rows), "cyc.yaml")
    with pytest.raises(ProasError, match=r"a cycle \(d -> d\)"):
        parse_study(dict(base, rows=[{"id": "d", "needs": ["d"], "overrides": ["algo.shaping=none"]}]), "c.yaml")
    cfg = tmp_path / "cyc.yaml"
    cfg.write_text(yaml.safe_dump(dict(base, rows=rows)))
    assert main(["experiment", "run", str(cfg), "--out", str(tmp_path / "out"), "--jobs", "1"]) == 2
    assert "rows need each other in a cycle" in _error(capsys)
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- schedule make


def _exit_code(argv) -> int:
    """``main``'s status, or argparse's when it refuses an option as it parses it."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code)


@pytest.mark.parametrize("option", [["--seed", "-1"], ["--seed", "1", "--steps", "0"],
                                    ["--seed", "1", "--per-step", "-2"]])
def test_schedule_make_checks_its_options_before_writing_anything(tmp_path, monkeypatch, capsys, option):
    root = tmp_path / "data"
    assert _exit_code(["schedule", "make", "--env", "shop", *option, "--out", str(root)]) == 2
    assert "is outside" in capsys.readouterr().err  # the option's range, as argparse parses it
    assert not root.exists()
    # without --out the shipped data is the root: a refused option leaves that untouched too
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    monkeypatch.setattr(tasksets, "default_root", lambda: shipped)
    assert _exit_code(["schedule", "make", "--env", "shop", *option]) == 2
    assert _files(shipped) == set()


@pytest.mark.parametrize("kw", [{"seed": -1}, {"steps": 0}, {"per_step": -2}])
def test_make_schedule_checks_its_arguments_before_writing_anything(tmp_path, kw):
    # the library call behind the command, which a script can reach without the parser
    root = tmp_path / "data"
    with pytest.raises(ProasError, match="must be an integer >="):
        tasksets.make_schedule("shop", [f"train-{k}" for k in range(40)], root=root, **{"seed": 1, **kw})
    assert not root.exists()


# --------------------------------------------------------------------------- tracebacks -> one line


def test_analyse_on_damaged_inputs_is_one_line(tmp_path, capsys):
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(_eval_study()))
    out = tmp_path / "out"
    big = tmp_path / "big.csv"
    big.write_text("row,env,seed,commit,primary\ngrpo_none_shop,shop,100," + "x" * (1 << 20) + ",0.2\n")
    assert main(["heldout", "analyse", str(big), "--study", str(study), "--out", str(out)]) == 2
    assert "line 2: not CSV (field larger than field limit" in _error(capsys)
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"row,env,seed,commit,primary\ngrpo_none_shop,shop,100,caf\xe9,0.2\n")
    assert main(["heldout", "analyse", str(latin), "--study", str(study), "--out", str(out)]) == 2
    assert "not UTF-8 text" in _error(capsys)
    listed = tmp_path / "list.yaml"
    listed.write_text("- study: heldout_main\n- rows: []\n")
    assert main(["heldout", "analyse", str(latin), "--study", str(listed), "--out", str(out)]) == 2
    assert "must be a mapping" in _error(capsys)
    assert not out.exists()


def test_analyse_names_a_source_that_is_not_there(tmp_path, capsys):
    """*Found:* a mistyped results directory was reported as "no heldout_main ... study config
    under the sources' studies/", sending the user to look for a config."""
    res = _results(tmp_path, _eval_study())
    for sources in ([tmp_path / "typo"], [res, tmp_path / "typo"]):
        assert main(["heldout", "analyse", *map(str, sources), "--out", str(tmp_path / "out")]) == 2
        assert f"{tmp_path / 'typo'}: no such results directory or per-seed CSV" in _error(capsys)
    assert not (tmp_path / "out").exists()


def test_select_on_binary_garbage_is_one_line(tmp_path, capsys):
    garbage = tmp_path / "runs.csv"
    garbage.write_bytes(bytes(range(256)) * 64)
    assert main(["heldout", "select", str(garbage)]) == 2
    assert "not UTF-8 text" in _error(capsys)
    garbage.write_bytes(b"env,row,seed,tuning_metric\nshop,x,200,0.5\nshop," + b"y" * (1 << 18) + b",201,0.5\n")
    assert main(["heldout", "select", str(garbage)]) == 2
    assert "line 3: not CSV (field larger than field limit" in _error(capsys)


@pytest.mark.parametrize("placeholder", ["{out.__class__}", "{seed.__class__.__mro__}", "{env[0]}", "{0}", "{}",
                                         "{seed!r}", "{seed:999999999}", "{steps:{seed}}", "{nope}"])
def test_only_the_documented_placeholders_are_filled(tmp_path, capsys, placeholder):
    cfg = tmp_path / "p.yaml"
    cfg.write_text(yaml.safe_dump({"study": "p", "envs": ["shop"], "seeds": [0], "steps": 10, "rows": [
        {"id": "a", "overrides": ["algo.shaping=none", f"algo.graph.path={{out}}/x/{placeholder}/graph.json"]}]}))
    assert main(["experiment", "run", str(cfg), "--dry-run", "--out", str(tmp_path / "out")]) == 2
    assert "is not allowed; use {env}, {seed}, {steps}, {out}, {data}" in _error(capsys)
    ok = {"study": "p", "envs": ["shop"], "seeds": [3], "steps": 10, "rows": [
        {"id": "a", "overrides": ["algo.shaping=none", "algo.graph.path={out}/{env}/s{seed}/{steps:06d}/g.json"]}]}
    spec = parse_study(ok, "ok.yaml").runs(tmp_path / "o")[0]
    assert f"algo.graph.path={(tmp_path / 'o').resolve()}/shop/s3/000010/g.json" in spec.overrides


@pytest.mark.parametrize("argv, flag", [
    (["train", "train.steps=1", "--run-dir"], "--run-dir"),
    (["sft", "--epochs", "1", "env=shop", "--run-dir"], "--run-dir"),
    (["experiment", "run", "lm_screen", "--dry-run", "--out"], "--out"),
])
def test_a_run_folder_that_is_a_file_is_refused_naming_it_before_any_work(tmp_path, capsys, argv, flag):
    """`train`/`sft --run-dir FILE` said only "File exists (FILE)" after loading the env, and
    `experiment run --dry-run --out FILE` listed runs to go under a file."""
    target = tmp_path / "a_file"
    target.write_text("keep me\n")
    assert main([*argv, str(target)]) == 2
    cap = capsys.readouterr()
    assert cap.err == f"proas: error: {flag} {target}: exists and is not a directory\n"
    assert "runs to go" not in cap.out and target.read_text() == "keep me\n"
