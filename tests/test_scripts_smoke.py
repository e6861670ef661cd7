"""Every file in scripts/ has a smoke test, so that a script nothing runs does not rot unseen.

- each Python script: ``--help`` exits 0, and every ``from proas... import name`` in it (also
  those inside functions, which ``--help`` never reaches) still resolves;
- each shell script, and each GRID file of scripts/heldout_grids: ``bash -n`` parses it;
- each study config: ``proas experiment run CONFIG --dry-run`` loads it;
- where it is cheap, a run on real or made-up inputs (below).

``SMOKE`` names every file and the check it gets; a file in scripts/ that it does not name fails
``test_every_file_in_scripts_has_a_smoke_test``: add the file there, with a check of its own if
``--help`` says little. scripts/heldout_train_means.py has its own tests besides
(tests/test_script_heldout_train_means.py).
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"

#: every file in scripts/ and how it is smoke-tested: "python" (--help and its proas imports),
#: "bash" (bash -n), "study" (proas experiment run --dry-run)
SMOKE = {
    "analyse_lm.py": "python",
    "analyse_sft_sweep.py": "python",
    "analyse_lm_competent.py": "python",
    "analyse_study.py": "python",
    "heldout_device.sh": "bash",
    "heldout_grids/eval_other_household.sh": "bash",
    "heldout_grids/eval_rest.sh": "bash",
    "heldout_grids/heldout_tune_ext.yaml": "study",
    "heldout_grids/tune_rest.sh": "bash",
    "heldout_grids/sft_eval_household_tune_other.sh": "bash",
    "heldout_grids/tune_sft_household_rest.sh": "bash",
    "heldout_records_from_selection.py": "python",
    "heldout_train_means.py": "python",
    "repeat_schedule.py": "python",
    "lm_sft_sweep.sh": "bash",
    "lm_profile_device.sh": "bash",
    "lm_step_profile.py": "python",
    "lm_screen_device.sh": "bash",
    "lm_kernel_check_device.sh": "bash",
    "lm_toy_rl.sh": "bash",
    "lm_screen_verdict.py": "python",
    "lm_start_reads.py": "python",
    "run_device_study.sh": "bash",
    "run_lm_study.sh": "bash",
    "run_lm_competent.sh": "bash",
    "start_temperature.py": "python",
}
KINDS = {"python": ".py", "bash": ".sh", "study": ".yaml"}


def _of(kind: str) -> list[str]:
    return sorted(name for name, k in SMOKE.items() if k == kind)


def _run(*args: str, cwd: Path = ROOT, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, env=env, **kw)


def test_every_file_in_scripts_has_a_smoke_test():
    files = {p.relative_to(SCRIPTS).as_posix() for p in SCRIPTS.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    missing = sorted(files - set(SMOKE))
    assert not missing, ("files in scripts/ with no smoke test; name each in SMOKE of "
                         "tests/test_scripts_smoke.py:\n  " + "\n  ".join(missing))
    gone = sorted(set(SMOKE) - files)
    assert not gone, "SMOKE names files that scripts/ no longer has:\n  " + "\n  ".join(gone)
    wrong = sorted(name for name, kind in SMOKE.items() if not name.endswith(KINDS[kind]))
    assert not wrong, f"a check that does not fit the file's kind: {wrong}"


@pytest.mark.parametrize("name", _of("python"))
def test_python_script_help_exits_0(name):
    res = _run(sys.executable, str(SCRIPTS / name), "--help", timeout=120)
    assert res.returncode == 0, f"scripts/{name} --help: rc {res.returncode}\n{res.stderr[-2000:]}"
    assert "usage:" in res.stdout


def _proas_imports(path: Path) -> list[tuple[str, str]]:
    """(module, name) of every ``from proas... import name`` in the file, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == "proas":
            out += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [(alias.name, "") for alias in node.names if alias.name.split(".")[0] == "proas"]
    return out


@pytest.mark.parametrize("name", _of("python"))
def test_python_script_imports_resolve(name):
    # the scripts import proas lazily (fast --help), so a moved module would only show when run
    broken = []
    for module, attr in _proas_imports(SCRIPTS / name):
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            broken.append(f"{module}: {e}")
            continue
        if attr and not hasattr(mod, attr):
            try:
                importlib.import_module(f"{module}.{attr}")
            except ImportError:
                broken.append(f"{module}.{attr}: no such name")
    assert not broken, f"scripts/{name} imports what proas no longer has:\n  " + "\n  ".join(broken)


@pytest.mark.parametrize("name", _of("bash"))
def test_shell_script_parses(name):
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    res = _run("bash", "-n", str(SCRIPTS / name))
    assert res.returncode == 0, f"bash -n scripts/{name}:\n{res.stderr}"


@pytest.mark.parametrize("name", _of("study"))
def test_study_config_loads(name, tmp_path):
    res = _run(sys.executable, "-m", "proas", "experiment", "run", str(SCRIPTS / name), "--dry-run",
               "--out", str(tmp_path), timeout=300)
    assert res.returncode == 0, f"scripts/{name} does not load as a study:\n{res.stderr[-2000:]}"
    assert "runs to go" in res.stdout


def test_analyse_lm_remakes_results_lm_analysis():
    # results/lm/analysis.md is what the script makes of results/lm/runs, as kept under results/'s
    # rule (no summary.json, logs as train.log.txt excerpts, no start links)
    res = _run(sys.executable, str(SCRIPTS / "analyse_lm.py"), str(ROOT / "results" / "lm" / "runs"), timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout == (ROOT / "results" / "lm" / "analysis.md").read_text(encoding="utf-8")


def test_analyse_lm_competent_remakes_results_lm_competent(tmp_path):
    # results/lm/competent/: analysis.md and the two CSVs are what the script makes of the runs kept there
    kept = ROOT / "results" / "lm" / "competent"
    res = _run(sys.executable, str(SCRIPTS / "analyse_lm_competent.py"), str(kept / "runs"), "--csv-dir",
               str(tmp_path), timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout == (kept / "analysis.md").read_text(encoding="utf-8")
    for name in ("sft_per_seed.csv", "rl_per_seed.csv"):
        assert (tmp_path / name).read_text(encoding="utf-8") == (kept / name).read_text(encoding="utf-8")


def test_analyse_lm_refuses_a_missing_directory(tmp_path):
    res = _run(sys.executable, str(SCRIPTS / "analyse_lm.py"), str(tmp_path / "nothing"))
    assert res.returncode == 2 and "no such directory" in res.stderr


def test_analyse_sft_sweep_remakes_the_table_of_results_lm_sft_sweep():
    sweep = ROOT / "results" / "lm" / "sft_sweep"
    res = _run(sys.executable, str(SCRIPTS / "analyse_sft_sweep.py"), str(sweep / "runs"))
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 2 + 22  # header, rule, a line per row
    assert res.stdout.strip() in (sweep / "README.md").read_text(encoding="utf-8")
    # each env's rows by best validation SR: household's best first (round 3's whole-sequence
    # loss, stopped by the time limit); the diverged rows say so
    assert lines[2].startswith("| household | word | small 4.15M | sum + sequence 1 | 1e-3 | 5 (8) |")
    assert "**51.6** (4)" in lines[2] and lines[2].endswith("| time limit |")
    shop = next(line for line in lines if line.startswith("| shop "))
    assert shop.startswith("| shop | line | small 4.99M | sum + sequence 1 | 1e-3 | 12 (12) |")
    assert "**69.5** (11)" in shop
    assert sum(line.endswith("| diverged |") for line in lines) == 2


def test_analyse_sft_sweep_refuses_a_directory_without_rows_or_with_a_bad_row(tmp_path):
    res = _run(sys.executable, str(SCRIPTS / "analyse_sft_sweep.py"), str(tmp_path))
    assert res.returncode == 1 and "no rows.csv and no *.row files" in res.stderr
    (tmp_path / "x.row").write_text("x|household|word\n")
    res = _run(sys.executable, str(SCRIPTS / "analyse_sft_sweep.py"), str(tmp_path))
    assert res.returncode == 1 and "expected 8 to 10 '|'-separated fields, got 3" in res.stderr
    (tmp_path / "rows.csv").write_text("id,env\nx,household\n")
    res = _run(sys.executable, str(SCRIPTS / "analyse_sft_sweep.py"), str(tmp_path))
    assert res.returncode == 1 and "rows.csv: expected the columns" in res.stderr


def test_analyse_sft_sweep_reads_a_fresh_pack_and_writes_the_rows_kept(tmp_path):
    # a pack as the device returns it: row lines, a summary for the finished row, the logs
    runs = tmp_path / "runs"
    for rid, line, summary, log in [
            ("a", "a|shop|word|small|sum|1e-3|2|32", {"wall_s": 90.0}, "model: 4.99M parameters, m\nrc 0\n"),
            ("b", "b|shop|word|small|mean|3e-3|2|32|1", None, "proas: error: sft: the gradient diverged\nrc 2\n"),
            ("c", "c|shop|line|small|sum|1e-3|2|32|0|0.5", {"wall_s": 60.0}, "model: 4.99M parameters, m\nrc 0\n")]:
        (runs / rid).mkdir(parents=True)
        (runs / f"{rid}.row").write_text(line + "\n")
        (runs / f"{rid}.log").write_text(log)
        recs = [{"step": 0, "val/sr": 0.0}, {"step": 1, "sft/nll": 1.5, "val/sr": 0.125}]
        # a row stopped by the time limit can end on a torn line: it is skipped
        (runs / rid / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs[: 2 if summary else 1])
                                                  + '{"step": 2, "sft/n')
        if summary:
            (runs / rid / "summary.json").write_text(json.dumps(summary))
    res = _run(sys.executable, str(SCRIPTS / "analyse_sft_sweep.py"), str(runs), "--csv", str(runs / "rows.csv"))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert lines[2] == ("| shop | word | small 4.99M | sum | 1e-3 | 1 (2) | 0.0 / 12.5 | **12.5** (1) | 1.500 | 1.5 "
                        "| done |")
    # the whole-sequence loss is named beside the score norm
    assert lines[3].startswith("| shop | line | small 4.99M | sum + sequence 0.5 | 1e-3 | 1 (2) |")
    assert lines[4].startswith("| shop, seed 1 | word | small 4.99M | mean | 3e-3 | 0 (2) | 0.0 |")
    assert lines[4].endswith("| – | diverged |")
    # the kept copy (rows.csv, no row lines or summaries) gives the same table
    for p in [*runs.glob("*.row"), *runs.glob("*/summary.json")]:
        p.unlink()
    again = _run(sys.executable, str(SCRIPTS / "analyse_sft_sweep.py"), str(runs))
    assert again.returncode == 0 and again.stdout == res.stdout


def test_analyse_study_tables_a_made_up_results_directory(tmp_path):
    for seed, sr in ((0, 0.25), (1, 0.75)):
        run = tmp_path / "household" / "grpo" / f"seed{seed}"
        run.mkdir(parents=True)
        recs = [{"step": s, "train/sr": sr, "train/error_rate": 0.1, "adv/abs_mean": 0.5, "loss/grad_norm": 2.0}
                for s in range(1, 151)] + [{"step": 150, "val/sr": sr, "train/sr": sr}]
        (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    res = _run(sys.executable, str(SCRIPTS / "analyse_study.py"), str(tmp_path), timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "## household" in res.stdout
    assert "| grpo | 2 | 50.0±35.4 | 50.0±35.4 | 0.500±0.000 | 2.000±0.000 | 10.0±0.0 | – | – |" in res.stdout
    res = _run(sys.executable, str(SCRIPTS / "analyse_study.py"), str(tmp_path / "nothing"))
    assert res.returncode == 2 and "no such results directory" in res.stderr


def test_repeat_schedule_writes_the_same_tasks_at_every_step(tmp_path):
    res = _run(sys.executable, str(SCRIPTS / "repeat_schedule.py"), "--env", "shop", "--seed", "0",
               "--steps", "3", "--out", str(tmp_path), timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    where = tmp_path / "fixed_train_set" / "seed0" / "shop"
    steps = [json.loads(line) for line in (where / "schedule.jsonl").read_text().splitlines() if line.strip()]
    assert len(steps) == 3 and len({frozenset(step["tasks"]) for step in steps}) == 1
    assert len(steps[0]["tasks"]) == 16  # the 16 of step 0 of the shipped seed-0 schedule
    manifest = json.loads((where / "manifest.json").read_text())
    assert manifest["made_by"].startswith("scripts/repeat_schedule.py")


def test_analyse_lm_competent_reads_sft_bars_and_paired_rl_over_a_shared_window(tmp_path):
    def write(path, recs):
        path.mkdir(parents=True)
        (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs) + '{"step": 9, "val/s')
    # SFT: two household seeds (best at epoch 2, then epoch 1), one shop seed with a summary
    write(tmp_path / "household" / "sft_seq_household" / "seed0",
          [{"step": 0, "val/sr": 0.0, "time/val_s": 60.0},
           {"step": 1, "val/sr": 0.25, "time/train_s": 60, "time/val_s": 60, "sft/nll": 2.5, "sft/sequence_nll": 4.0},
           {"step": 2, "val/sr": 0.5, "time/train_s": 60, "time/val_s": 60, "sft/nll": 1.25, "sft/sequence_nll": 3.0},
           {"step": 3, "val/sr": 0.375}])
    write(tmp_path / "household" / "sft_seq_household" / "seed1",
          [{"step": 0, "val/sr": 0.0}, {"step": 1, "val/sr": 0.375}, {"step": 2, "val/sr": 0.25}])
    # a kept copy: no summary.json, the log's closing line says the run ended
    (tmp_path / "household" / "sft_seq_household" / "seed1" / "train.log.txt").write_text(
        "epoch 2/2 ...\nbest checkpoint: /x/best  (proas eval /x)\n")
    write(tmp_path / "shop" / "sft_seq_shop" / "seed0", [{"step": 0, "val/sr": 0.0}, {"step": 1, "val/sr": 0.625}])
    (tmp_path / "shop" / "sft_seq_shop" / "seed0" / "summary.json").write_text("{}")
    # RL: seed 0 of both arms; GRPO validated up to step 30, GRPO+ProAS only to 20, so K = 20
    write(tmp_path / "shop" / "grpo_comp" / "seed0",
          [{"step": 0, "val/sr": 0.5}, {"step": 10, "val/sr": 0.5, "train/sr": 0.875},
           {"step": 20, "val/sr": 0.75, "train/sr": 0.25, "train/error_rate": 0.125, "loss/kl": 0.5},
           {"step": 30, "val/sr": 1.0, "train/error_rate": 0.9}])
    write(tmp_path / "shop" / "grpo_proas_comp" / "seed0",
          [{"step": 0, "val/sr": 0.5}, {"step": 10, "val/sr": 0.25}, {"step": 20, "val/sr": 0.5, "train/sr": 0.5}])
    res = _run(sys.executable, str(SCRIPTS / "analyse_lm_competent.py"), str(tmp_path),
               "--csv-dir", str(tmp_path / "csv"))
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert ("| household | sft_seq_household | 0 | 0.0 / 25.0 / 50.0 / 37.5 | **50.0** (2) | 5.0 | no "
            "| 2.500 / 1.250; 4.000 / 3.000 |") in out
    assert "| household | sft_seq_household | 0 1 | 43.8 | 44.0 |" in out  # (50 + 37.5) / 2
    assert "| shop | sft_seq_shop | 0 | 0.0 / 62.5 | **62.5** (1) | 0.0 | yes |" in out
    assert "| household | sft_seq_household | 1 | 0.0 / 37.5 / 25.0 | **37.5** (1) | 0.0 | yes |" in out
    # step 30 is past K; training SR reads steps 11-20 only
    assert "| competent | 0 | GRPO | 20 | 50.0 | 62.5 (2) | 75.0 | 75.0 | 87.5 | 25.0 | 12.5 | 0.500 |" in out
    assert "| competent | 0 | GRPO+ProAS | 20 | 50.0 | 37.5 (2) | 50.0 | 50.0 | – | 50.0 | – | – |" in out
    assert "| competent | seed 0: -25.0 | -25.0 |" in out
    assert "| competent | GRPO | 0 | 50.0 | 62.5 | +12.5 |" in out
    assert "| competent | GRPO+ProAS | 0 | 50.0 | 37.5 | -12.5 |" in out
    rows = (tmp_path / "csv" / "rl_per_seed.csv").read_text().splitlines()
    assert rows[0].startswith("start,arm,row,seed,K") and len(rows) == 3
    assert len((tmp_path / "csv" / "sft_per_seed.csv").read_text().splitlines()) == 4
    bad = _run(sys.executable, str(SCRIPTS / "analyse_lm_competent.py"), str(tmp_path / "csv"))
    assert bad.returncode == 1 and "no run" in bad.stderr


def test_lm_screen_verdict_applies_the_protocols_drop_and_kl_rules(tmp_path):
    """A setting more than 10 points below its step 0 over steps 20-40 is dropped, one that
    stopped on a non-finite loss too, and the KL rule compares KL 0 with KL 0.01 per rate."""
    def run(row, vals, log=""):
        d = tmp_path / "shop" / row / "seed200"
        d.mkdir(parents=True)
        recs = [{"step": s, "val/sr": v} for s, v in vals.items()]
        (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
        if log:
            (d / "train.log.txt").write_text(log)
    run("grpo_weak_lr3e-4_kl0", {0: 0.30, 10: 0.2, 20: 0.15, 30: 0.20, 40: 0.19})      # 18.0: -12 -> dropped
    run("grpo_weak_lr3e-4_kl0.01", {0: 0.30, 10: 0.3, 20: 0.25, 30: 0.21, 40: 0.22})   # 22.7: -7.3 -> kept
    run("grpo_weak_lr1e-4_kl0", {0: 0.30, 10: 0.3, 20: 0.31, 30: 0.33, 40: 0.35})      # 33.0
    run("grpo_weak_lr1e-4_kl0.01", {0: 0.30, 10: 0.3, 20: 0.32, 30: 0.33, 40: 0.34})   # 33.0 -> within 2
    run("grpo_comp_lr1e-3_kl0", {0: 0.6, 10: 0.6}, log="ProasError: step 12: the loss or its gradient is not finite")
    # a first attempt's error, then a resume that ran on: not how the run stopped
    run("grpo_comp_lr1e-3_kl0.01", {0: 0.6, 10: 0.6, 20: 0.6, 30: 0.6, 40: 0.6},
        log="ProasError: step 3: the loss or its gradient is not finite\nresuming run: x\nstep 40/40\n")
    # a minibatch-32 run that went on to step 150: its own setting (no KL pair with the
    # minibatch-256 rows), and the mean over steps 50-150 read beside the screen's
    run("grpo_weak_mb32_lr1e-4_kl0.01", {0: 0.30, 20: 0.40, 30: 0.40, 40: 0.40, 45: 0.9,
                                          **{s: 0.50 + (s == 150) * 0.11 for s in range(50, 151, 10)}})
    # the middle start's rows are a start of their own (27.0 - 40: dropped)
    run("grpo_mid_lr1e-4_kl0.01", {0: 0.40, 20: 0.25, 30: 0.27, 40: 0.29})
    out = _run(sys.executable, str(SCRIPTS / "lm_screen_verdict.py"), str(tmp_path), "--csv", str(tmp_path / "s.csv"),
               "--steps", str(tmp_path / "steps.csv"))
    assert out.returncode == 0, out.stderr
    steps = list(__import__("csv").DictReader((tmp_path / "steps.csv").read_text().splitlines()))
    assert len(steps) == 5 + 5 + 5 + 5 + 2 + 5 + 16 + 4  # one row a logged step, every run
    first = next(r for r in steps if r["row"] == "grpo_weak_lr3e-4_kl0" and r["step"] == "20")
    assert float(first["val_sr"]) == 15.0 and list(first) == ["env", "row", "seed", "step", "val_sr"]
    rows = {(r["start"], r["lr"], r["kl"]): r for r in
            __import__("csv").DictReader((tmp_path / "s.csv").read_text().splitlines()) if r["mb"] == "256"}
    mb32 = next(r for r in __import__("csv").DictReader((tmp_path / "s.csv").read_text().splitlines())
                if r["mb"] == "32")
    assert (mb32["lr"], mb32["kl"], mb32["verdict"]) == ("1e-4", "0.01", "kept")
    # step 45 is no validation of the window
    assert abs(float(mb32["mean_50_150"]) - 51.0) < 1e-9 and mb32["n_val_50_150"] == "11"
    assert abs(float(mb32["delta_50_150"]) - 21.0) < 1e-9 and rows[("weak", "1e-4", "0")]["mean_50_150"] == ""
    assert rows[("weak", "3e-4", "0")]["verdict"] == "dropped"
    assert rows[("mid", "1e-4", "0.01")]["verdict"] == "dropped"
    assert rows[("weak", "3e-4", "0.01")]["verdict"] == "kept"
    assert rows[("weak", "1e-4", "0")]["verdict"] == "kept"
    assert rows[("comp", "1e-3", "0")]["verdict"] == "dropped (non-finite)"
    assert rows[("comp", "1e-3", "0.01")]["verdict"] == "kept" and rows[("comp", "1e-3", "0.01")]["stop"] == ""
    assert abs(float(rows[("weak", "3e-4", "0")]["mean_20_40"]) - 18.0) < 1e-9
    assert "not every pair within 2 points (2 pairs)" in out.stdout


def test_lm_screen_verdict_diagnostics_read_the_per_step_metrics(tmp_path):
    """The diagnostics table: training SR over the first and last ten steps, entropy over the
    first and last five, the largest aligned ten-step KL window, and the run means of the group,
    error and length-bias shares, from a results dir and from the per-step CSV it writes."""
    d = tmp_path / "res" / "shop" / "grpo_mid_lr1e-4_kl0.01" / "seed200"
    d.mkdir(parents=True)
    recs = [{"step": 0, "val/sr": 0.3}]
    for s in range(1, 31):
        recs.append({"step": s, "train/sr": 0.1 if s <= 10 else 0.5 if s > 20 else 0.3,
                     "train/score": 0.6, "loss/entropy": 1.0 if s <= 5 else 0.4 if s > 25 else 0.7,
                     "loss/kl": 2.0 if 11 <= s <= 20 else 0.1, "train/groups_no_success": 0.25,
                     "train/groups_flat": 0.5, "train/error_rate": 0.02 * (s % 2),
                     "rollout/chose_shortest": 0.3, "rollout/shortest_by_chance": 0.6, "time/step": float(s)})
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    row = ("| shop | grpo_mid_lr1e-4_kl0.01 | 30 | 10.0 → 50.0 | 0.60 → 0.60 | 1.00 → 0.40 | 2.00 (11-20) "
           "| 75.0 | 50.0 | 1.0 | 30.0 (60.0) |")
    out = _run(sys.executable, str(SCRIPTS / "lm_screen_verdict.py"), str(tmp_path / "res"),
               "--steps", str(tmp_path / "steps.csv"), "--diagnostics", str(tmp_path / "diag.csv"))
    assert out.returncode == 0, out.stderr
    assert row in out.stdout
    again = _run(sys.executable, str(SCRIPTS / "lm_screen_verdict.py"), str(tmp_path / "steps.csv"), "--block", "10")
    assert again.returncode == 0, again.stderr
    assert row in again.stdout and "step 0" not in again.stdout  # the table alone
    # by 10-step block: the mean training SR and the median seconds a step (steps 21-30: 25.5)
    assert "| shop | grpo_mid_lr1e-4_kl0.01 | 1-10 | 10.0 | 5.5 |" in again.stdout
    assert "| shop | grpo_mid_lr1e-4_kl0.01 | 21-30 | 50.0 | 25.5 |" in again.stdout
    assert "By 10-step block" not in out.stdout  # only when asked
    neg = _run(sys.executable, str(SCRIPTS / "lm_screen_verdict.py"), str(tmp_path / "steps.csv"), "--block", "-5")
    assert neg.returncode == 2 and "--block -5" in neg.stderr and not neg.stdout
    diag = list(__import__("csv").DictReader((tmp_path / "diag.csv").read_text().splitlines()))
    assert diag[0]["kl_max10_steps"] == "11-20" and float(diag[0]["groups_with_success"]) == 75.0
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    bad = _run(sys.executable, str(SCRIPTS / "lm_screen_verdict.py"), str(tmp_path / "bad.csv"))
    assert bad.returncode == 2 and "no per-step CSV" in bad.stderr and "Traceback" not in bad.stderr


def test_lm_toy_rl_runs_the_scorer_and_prints_its_curve(tmp_path):
    """With SEEDS empty the probe runs its reference alone (the scorer, 60 fast steps) and prints
    its training SR per 10 steps; a second call skips the finished run."""
    env = {**os.environ, "SEEDS": ""}
    first = subprocess.run(["bash", str(SCRIPTS / "lm_toy_rl.sh"), str(tmp_path)], env=env,
                           capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    line = next(x for x in first.stdout.splitlines() if x.startswith("scorer_s0 |"))
    srs = [float(v) for v in line.split("|")[1].split()]
    assert len(srs) == 6 and all(0 <= v <= 100 for v in srs)
    assert (tmp_path / "scorer_s0" / "summary.json").exists()
    assert not any(p.name.startswith("lm_") for p in tmp_path.iterdir())
    again = subprocess.run(["bash", str(SCRIPTS / "lm_toy_rl.sh"), str(tmp_path)], env=env,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and line in again.stdout



def test_lm_start_reads_validates_each_finished_sft_start_at_each_seed_once(tmp_path):
    """Each finished SFT run is read at every seed, with `proas eval --seed`'s own figure; a
    second pass makes no reading twice; an unfinished run (no summary.json) is not read."""
    res = tmp_path / "res"
    run = res / "shop" / "sft_mid_shop" / "seed200"
    made = _run(sys.executable, "-m", "proas", "sft", "--run-dir", str(run), "--epochs", "1", "--max-tasks", "8",
                "env=shop", "seed=200", "env.fixed_val_set.size=8", "train.progress=false")
    assert made.returncode == 0, made.stderr
    (res / "shop" / "sft_weak_shop" / "seed200").mkdir(parents=True)  # still running: no summary
    out = _run(sys.executable, str(SCRIPTS / "lm_start_reads.py"), str(res), "--seeds", "1", "2")
    assert out.returncode == 0, out.stderr
    reads = [json.loads(x) for x in (res / "start_reads.jsonl").read_text().splitlines()]
    got = [(r["row"], r["seed"], r["eval_seed"]) for r in reads]
    assert got == [("sft_mid_shop", 200, 1), ("sft_mid_shop", 200, 2)]
    direct = _run(sys.executable, "-m", "proas", "eval", str(run), "--seed", "2", "--json")
    assert reads[1]["sr"] == json.loads(direct.stdout.strip().splitlines()[-1])["sr"]
    before = (res / "start_reads.jsonl").read_text()
    again = _run(sys.executable, str(SCRIPTS / "lm_start_reads.py"), str(res), "--seeds", "1", "2")
    assert again.returncode == 0 and again.stdout == "" and (res / "start_reads.jsonl").read_text() == before
    (res / "start_reads.jsonl").write_text(before + "[1]\n")
    bad = _run(sys.executable, str(SCRIPTS / "lm_start_reads.py"), str(res), "--seeds", "3")
    assert bad.returncode == 2 and "not a JSON object" in bad.stderr and "Traceback" not in bad.stderr
    for args in (["--seeds", "-1"], ["--seeds", "3", "--wait", "-3"], ["--seeds", "3", "--wait", "nan"]):
        refused = _run(sys.executable, str(SCRIPTS / "lm_start_reads.py"), str(res), *args)
        assert refused.returncode == 2 and "numbers from 0" in refused.stderr, args


def test_lm_screen_verdict_reads_the_bar_against_the_mean_of_the_starts_readings(tmp_path):
    """With start_reads.jsonl, the primary metric is also read against the mean of the start's
    readings: the run's step-0 reading and the file's (of that env, start and seed only)."""
    d = tmp_path / "shop" / "grpo_mid5_lr1e-4_kl0.01" / "seed200"
    d.mkdir(parents=True)
    vals = {0: 0.10, 20: 0.2, 30: 0.2, 40: 0.2, **{s: 0.40 for s in range(50, 151, 10)}}
    (d / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "val/sr": v}) + "\n" for s, v in vals.items()))
    reads = [{"env": "shop", "row": "sft_mid5_shop", "seed": 200, "eval_seed": 1, "sr": 0.20},
             {"env": "shop", "row": "sft_mid5_shop", "seed": 200, "eval_seed": 2, "sr": 0.30},
             {"env": "shop", "row": "sft_mid5_shop", "seed": 201, "eval_seed": 1, "sr": 0.90},  # another seed
             {"env": "shop", "row": "sft_mid_shop", "seed": 200, "eval_seed": 1, "sr": 0.90}]   # another start
    (tmp_path / "start_reads.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reads))
    out = _run(sys.executable, str(SCRIPTS / "lm_screen_verdict.py"), str(tmp_path), "--csv", str(tmp_path / "s.csv"))
    assert out.returncode == 0, out.stderr
    # start: (10 + 20 + 30) / 3 = 20.0; steps 50-150: 40.0
    assert "| shop | mid5 | 256 | 1e-4 | 0.01 | 20.0 (3) | 40.0 | 20.0 |" in out.stdout
    row = next(__import__("csv").DictReader((tmp_path / "s.csv").read_text().splitlines()))
    assert float(row["delta_50_150"]) == 30.0 and float(row["delta_50_150_vs_start"]) == 20.0
    (tmp_path / "start_reads.jsonl").write_text('{"env": "shop", "sr": "high"}\n')
    bad = _run(sys.executable, str(SCRIPTS / "lm_screen_verdict.py"), str(tmp_path))
    assert bad.returncode == 2 and "not a start reading" in bad.stderr
