"""scripts/heldout_train_means.py: window means of training metrics per run, one CSV row per run."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "heldout_train_means.py"


def fake_run(root: Path, row: str, seed: int, unreasonable: dict[int, float], finished: bool = True) -> None:
    run = root / "household" / row / f"seed{seed}"
    run.mkdir(parents=True)
    lines = [json.dumps({"step": s, "val/sr": 0.5}) for s in (50, 60)]  # validation-only records
    lines += [json.dumps({"step": s, "train/unreasonable_in_success": u, "train/steps": 10.0 + s})
              for s, u in unreasonable.items()]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    if finished:
        (run / "summary.json").write_text("{}")


def test_means_cover_steps_51_to_150_of_finished_runs_only(tmp_path):
    # steps 50 and 151 lie outside the window; an unfinished run is left out
    fake_run(tmp_path, "grpo_proas_household", 100, {50: 9.0, 51: 0.2, 100: 0.4, 150: 0.6, 151: 9.0})
    fake_run(tmp_path, "grpo_none_household", 100, {60: 0.9}, finished=False)
    out = tmp_path / "means.csv"
    res = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--out", str(out)],
                         capture_output=True, text=True, check=True)
    rows = list(csv.DictReader(out.open()))
    assert [(r["row"], r["seed"]) for r in rows] == [("grpo_proas_household", "100")]
    assert float(rows[0]["train/unreasonable_in_success"]) == pytest.approx(0.4)
    assert float(rows[0]["train/steps"]) == pytest.approx(10.0 + (51 + 100 + 150) / 3)
    assert rows[0]["adv/abs_mean"] == ""  # a key the run never logged stays empty
    assert "household,grpo_proas_household,1,,0.400" in res.stdout


def test_a_missing_source_is_one_line_and_nothing_is_written(tmp_path):
    out = tmp_path / "means.csv"
    res = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "nope"), "--out", str(out)],
                         capture_output=True, text=True)
    assert res.returncode != 0 and "no such results directory" in res.stderr and not out.exists()
