"""`proas report` on synthetic run directories, against tables, Spd.@K, training SR and Welch
intervals worked out by hand."""

import csv
import json
import math
from pathlib import Path

import pytest

from proas.cli import main
from proas.errors import ProasError
from proas.experiments.report import (
    best_within,
    first_reach,
    make_report,
    mean_std,
    read_run,
    speedup,
    t_quantile,
    train_sr_mean,
    train_window,
    welch_ci,
)

TYPES = ["pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
         "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place"]

MAIN = """\
study: main
title: Main results
kind: main
envs: [household, shop]
seeds: [0, 1]
steps: 30
rows:
  - {id: direct, label: Direct Prompt, untrained_of: grpo}
  - {id: sft, label: SFT, not_run: "waits for proas sft"}
  - {id: grpo, label: GRPO, overrides: [algo.estimator=grpo, algo.shaping=none]}
  - {id: grpo_proas, label: GRPO+ProAS, base: grpo, overrides: [algo.estimator=grpo, algo.shaping=proas]}
"""

ABL = """\
study: ablation_shaping
title: (a) Shaping
kind: ablation
reference: grpo
envs: [household]
seeds: [0, 1]
steps: 30
rows:
  - {id: grpo, label: GRPO, overrides: [algo.shaping=none]}
  - {id: grpo_suffix, label: Suffix, overrides: [algo.shaping=suffix]}
"""


def _val(step, sr, types=None, ts=None):
    rec = {"step": step, "val/sr": sr, "val/ts": 100 * sr if ts is None else ts}
    for i, t in enumerate(TYPES):
        rec[f"val/sr/{t}"] = (types or [sr] * 6)[i]
    return rec


def _write_run(root: Path, env: str, row: str, seed: int, records, extra_lines=(), train=lambda step: 0.0):
    """``train(step)``: the step's training SR (fraction); the step-0 record, a validation before
    any training, has none, as the trainer writes it."""
    d = root / env / row / f"seed{seed}"
    d.mkdir(parents=True)
    lines = []
    last = 0
    for rec in records:
        # a training record between validations, as the trainer writes
        for s in range(last + 1, rec["step"]):
            lines.append(json.dumps({"step": s, "train/sr": train(s)}))
        if rec["step"] > 0:
            rec = {**rec, "train/sr": train(rec["step"])}
        lines.append(json.dumps(rec))
        last = rec["step"]
    lines += list(extra_lines)
    (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return d


@pytest.fixture
def results(tmp_path):
    root = tmp_path / "res"
    (root / "studies").mkdir(parents=True)
    (root / "studies" / "main.yaml").write_text(MAIN)
    (root / "studies" / "ablation_shaping.yaml").write_text(ABL)
    hh = "household"
    # training SR rises 1 point a step (step/100), plus a per-run offset, so that a window one step
    # off changes every mean. Household is compared within 30 steps: window 11-30, where step/100
    # averages 20.5%. Shop within 20 (its runs stop there): window 7-20, average 13.5%.
    # GRPO: mean curve 0, 37.5, 62.5, 72.5 -> first >= 70 at step 30; best within 30: 75 and 75;
    # step 40 (SR 1.0) lies beyond the budget and must be ignored
    # train SR 20.5 and 30.5 -> 25.5±7.1 (steps 31-40 of seed 0 lie beyond the budget);
    # final (step 30) 70 and 75 -> 72.5±3.5
    _write_run(root, hh, "grpo", 0, [_val(0, 0.0), _val(10, 0.5), _val(20, 0.75, [1, 0.5, 1, 0.5, 0.5, 1.0]),
                                     _val(30, 0.7), _val(40, 1.0)], train=lambda s: s / 100)
    _write_run(root, hh, "grpo", 1, [_val(0, 0.0), _val(10, 0.25), _val(20, 0.5),
                                     _val(30, 0.75, [0.5, 0.5, 1, 1, 0.5, 0.0])], train=lambda s: s / 100 + 0.1)
    # +ProAS: curve 0, 68.75, 81.25, 62.5 -> first >= 70 at step 20 -> Spd.@70 = 30 / 20 = 1.50x;
    # best: seed0 step 20 (0.875), seed1 step 20 (0.75, tied with step 30: the earliest counts);
    # Spd.@35: both curves first reach 35 at step 10 -> 1.00x; final 50 and 75 -> 62.5±17.7;
    # train SR 50.5 and 60.5 -> 55.5±7.1
    _write_run(root, hh, "grpo_proas", 0, [_val(0, 0.0), _val(10, 0.75), _val(20, 0.875, [1, 1, 1, 1, 0.5, 0.5]),
                                           _val(30, 0.5)], train=lambda s: s / 100 + 0.3)
    _write_run(root, hh, "grpo_proas", 1, [_val(0, 0.0), _val(10, 0.625), _val(20, 0.75, [1, 0.5, 1, 0.5, 1, 0.5]),
                                           _val(30, 0.75, [0, 0, 0, 0, 0, 0])], train=lambda s: s / 100 + 0.4)
    # shop: GRPO never reaches 50% (best 40, 30); +ProAS reaches it at step 20 (mean 55).
    # 25%: GRPO's mean curve (10, 30, 30) at step 10, +ProAS's (10, 20, 60) at step 20 -> Spd.@25 0.50x.
    # train SR 13.5 and 33.5 -> 23.5±14.1 against +ProAS's 63.5 (one seed)
    _write_run(root, "shop", "grpo", 0, [_val(0, 0.1, ts=20.0), _val(10, 0.4, ts=60.0), _val(20, 0.3, ts=50.0)],
               train=lambda s: s / 100)
    _write_run(root, "shop", "grpo", 1, [_val(0, 0.1, ts=20.0), _val(10, 0.2, ts=30.0), _val(20, 0.3, ts=40.0)],
               train=lambda s: s / 100 + 0.2)
    _write_run(root, "shop", "grpo_proas", 0, [_val(0, 0.1, ts=20.0), _val(10, 0.2, ts=30.0), _val(20, 0.6, ts=70.0)],
               train=lambda s: s / 100 + 0.5)
    # seed 1 of shop +ProAS has no results: the note must say so, and the curve uses seed 0 only
    # suffix ablation: best 0.5 and 0.875 -> 68.75 ± 26.5 (below GRPO's 75: not bold);
    # final 25 and 50 -> 37.5±17.7; train SR 25.5 and 35.5 -> 30.5±7.1
    _write_run(root, hh, "grpo_suffix", 0, [_val(0, 0.0), _val(10, 0.5), _val(20, 0.25), _val(30, 0.25)],
               train=lambda s: s / 100 + 0.05)
    _write_run(root, hh, "grpo_suffix", 1, [_val(0, 0.0), _val(10, 0.875), _val(20, 0.5), _val(30, 0.5)],
               train=lambda s: s / 100 + 0.15)
    return root


def _table_rows(md: str, title: str) -> dict[str, list[str]]:
    part = md.split(f"## {title}")[1].split("\n## ")[0]
    rows = {}
    for line in part.splitlines():
        if line.startswith("| ") and not line.startswith("| Method"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def test_main_table_cells_bold_and_speedup_match_hand_computation(results):
    md = make_report(results).read_text()
    rows = _table_rows(md, "Main results")
    # household: Pick Look Clean Heat Cool Pick2 All Spd.@70 Spd.@35 Final Train Δ |
    # shop: TS SR Spd.@50 Spd.@25 Final Train Δ
    assert ("| Method | household Pick | household Look | household Clean | household Heat | household Cool | "
            "household Pick2 | household All | household Spd.@70 | household Spd.@35 | household Final | "
            "household Train SR 11-30 | household Δ train SR | shop TS | shop SR | shop Spd.@50 | shop Spd.@25 | "
            "shop Final | shop Train SR 7-20 | shop Δ train SR |") in md
    assert rows["GRPO"][:12] == ["75.0±35.4", "50.0±0.0", "100.0±0.0", "75.0±35.4", "50.0±0.0", "50.0±70.7",
                                 "75.0±0.0", "–", "–", "72.5±3.5", "25.5±7.1", "–"]
    # +ProAS best records: seed0 step 20 [1,1,1,1,.5,.5] 87.5; seed1 step 20 [1,.5,1,.5,1,.5] 75.
    # Δ train SR: 55.5 - 25.5 = 30; both stds sqrt(50) over 2 seeds, so se = sqrt(25 + 25) and
    # Welch's df = 50^2 / (25^2 + 25^2) = 2, where t(0.975) = 0.95 / sqrt(2 * 0.975 * 0.025) = 4.30265:
    # 30 ± 30.425 -> [-0.4, 60.4]; the best-validation bold is unaffected
    assert rows["GRPO+ProAS"][:12] == ["**100.0±0.0**", "**75.0±35.4**", "100.0±0.0", "75.0±35.4",
                                       "**75.0±35.4**", "50.0±0.0", "**81.2±8.8**", "1.50×", "1.00×",
                                       "62.5±17.7", "55.5±7.1", "+30.0 [−0.4, 60.4]"]
    # shop GRPO: best 40 (TS 60) and 30 (TS 40) -> TS 50.0±14.1, SR 35.0±7.1; final 30 and 30
    assert rows["GRPO"][12:] == ["50.0±14.1", "35.0±7.1", "–", "–", "30.0±0.0", "23.5±14.1", "–"]
    # shop +ProAS: seed 0 only, best at step 20 (SR 60, TS 70); GRPO's mean curve (10, 30, 30) never
    # reaches 50 -> lower bound 20 / 20 = 1.00x; it reaches 25 at step 10, +ProAS at 20 -> 0.50x.
    # Δ train SR 63.5 - 23.5 = 40 with no interval: one seed has no spread
    assert rows["GRPO+ProAS"][12:] == ["**70.0**", "**60.0**", "≥1.00×", "0.50×", "60.0", "63.5", "+40.0"]
    assert "GRPO+ProAS, shop Δ train SR: no confidence interval, GRPO+ProAS has one seed." in md
    assert "Spd.@35:" not in md and "Spd.@25:" not in md  # both reach the lower K: no bound, no note
    assert rows["SFT"][0] == "not run"
    assert "SFT: not run (waits for proas sft)." in md
    # Direct: the step-0 validation of the GRPO runs (household SR 0 and 0; shop SR 10, TS 20), which is
    # also its final validation; no training, so no training SR
    assert rows["Direct Prompt"] == (["0.0±0.0"] * 7 + ["–", "–", "0.0±0.0", "–", "–"]
                                     + ["20.0±0.0", "10.0±0.0", "–", "–", "10.0±0.0", "–", "–"])
    assert "Train SR: the training episodes' SR averaged over the last two thirds of the budget " \
           "(household steps 11-30, shop steps 7-20)" in md
    assert "Direct Prompt: the untrained policy, i.e. the step-0 validation (before any update) of the GRPO runs" in md
    assert "GRPO+ProAS, shop: only seeds 0 have results." in md
    assert "the base never reaches 50% within 20 steps; +ProAS does at step 20 (lower bound)" in md


def test_ablation_table_bolds_against_the_reference_row(results):
    md = make_report(results).read_text()
    rows = _table_rows(md, "(a) Shaping")
    assert rows["GRPO"][6] == "75.0±0.0"
    # suffix: 50 and 87.5 -> 68.75 ± 26.5, below GRPO: no bold
    assert rows["Suffix"][6] == "68.8±26.5"
    # per type the same 68.75: bold only where GRPO's mean is lower (Look 50, Cool 50, Pick2 50),
    # not where it is higher (Pick 75, Clean 100, Heat 75)
    assert rows["Suffix"][:6] == ["68.8±26.5", "**68.8±26.5**", "68.8±26.5", "68.8±26.5", "**68.8±26.5**",
                                  "**68.8±26.5**"]
    assert "Bold: higher than GRPO (best validation)." in md
    # Final, Train SR 11-30, Δ train SR against GRPO (no Spd in an ablation): 30.5 - 25.5 = 5 with the
    # same df = 2 and se = sqrt(50) as the main table's -> 5 ± 30.425
    assert "| household All | household Final | household Train SR 11-30 | household Δ train SR |" in md
    assert rows["GRPO"][7:] == ["72.5±3.5", "25.5±7.1", "–"]
    assert rows["Suffix"][7:] == ["37.5±17.7", "30.5±7.1", "+5.0 [−25.4, 35.4]"]


def test_csv_holds_the_numbers_of_the_table(results):
    make_report(results)
    with open(results / "main.csv") as fh:
        rows = list(csv.DictReader(fh))
    grpo_hh = next(r for r in rows if r["row"] == "grpo" and r["env"] == "household")
    assert float(grpo_hh["household_All_mean"]) == pytest.approx(75.0)
    assert grpo_hh["seeds"] == "0 1"
    assert grpo_hh["best_steps"] == "20 30"
    proas_shop = next(r for r in rows if r["row"] == "grpo_proas" and r["env"] == "shop")
    assert float(proas_shop["shop_TS_mean"]) == pytest.approx(70.0)
    assert proas_shop["household_All_mean"] == ""
    # the new columns: final, training SR and its Welch interval, both Spd.@K
    proas_hh = next(r for r in rows if r["row"] == "grpo_proas" and r["env"] == "household")
    assert proas_hh["train_window"] == "11-30" and proas_hh["final_steps"] == "30 30"
    assert float(proas_hh["household_Final_mean"]) == pytest.approx(62.5)
    assert float(proas_hh["household_Final_std"]) == pytest.approx(25 / math.sqrt(2), abs=1e-4)
    assert float(proas_hh["household_TrainSR_mean"]) == pytest.approx(55.5)
    assert float(proas_hh["household_TrainSR_std"]) == pytest.approx(math.sqrt(50), abs=1e-4)
    half = 0.95 / math.sqrt(2 * 0.975 * 0.025) * math.sqrt(50)  # t(0.975, df=2) in closed form, times se
    assert float(proas_hh["household_dTrainSR"]) == pytest.approx(30.0)
    assert float(proas_hh["household_dTrainSR_lo"]) == pytest.approx(30 - half, abs=1e-4)
    assert float(proas_hh["household_dTrainSR_hi"]) == pytest.approx(30 + half, abs=1e-4)
    assert proas_hh["household_Spd@70"] == "1.50×" and proas_hh["household_Spd@35"] == "1.00×"
    assert proas_shop["shop_Spd@25"] == "0.50×" and proas_shop["train_window"] == "7-20"
    assert float(proas_shop["shop_dTrainSR"]) == pytest.approx(40.0)
    assert proas_shop["shop_dTrainSR_lo"] == "" and proas_shop["shop_dTrainSR_hi"] == ""
    assert proas_shop["household_TrainSR_mean"] == ""
    grpo_shop = next(r for r in rows if r["row"] == "grpo" and r["env"] == "shop")
    assert grpo_shop["shop_dTrainSR"] == "" and float(grpo_shop["shop_TrainSR_mean"]) == pytest.approx(23.5)


def test_curves_are_png_files(results):
    md = make_report(results).read_text()
    for name in ("main_curves.png", "ablation_shaping_curves.png"):
        assert (results / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"({name})" in md


def test_report_cli_writes_to_another_folder(results, tmp_path, capsys):
    assert main(["report", str(results), "--out", str(tmp_path / "rep"), "--no-plots"]) == 0
    assert (tmp_path / "rep" / "report.md").exists()
    assert not (tmp_path / "rep" / "main_curves.png").exists()


def test_reduced_budget_is_stated(results):
    md = make_report(results, budget=10).read_text()
    assert "**Reduced budget (household):** compared within 10 steps, not the paper's 150." in md
    rows = _table_rows(md, "Main results")
    # within 10 steps GRPO's best are 0.5 and 0.25
    assert rows["GRPO"][6] == "37.5±17.7"


def test_runs_that_stopped_early_are_flagged(tmp_path):
    root = tmp_path / "res"
    (root / "studies").mkdir(parents=True)
    (root / "studies" / "main.yaml").write_text(MAIN)
    _write_run(root, "household", "grpo", 0, [_val(0, 0.0), _val(10, 0.5)])
    md = make_report(root, plots=False).read_text()
    assert ("**Reduced budget (household):** some runs stopped at step 10, so every row is compared within "
            "10 steps, not the 30 steps of the study (the paper's setting is 150)") in md


def test_rows_are_compared_within_the_steps_every_run_reached(tmp_path):
    root = tmp_path / "res"
    (root / "studies").mkdir(parents=True)
    (root / "studies" / "main.yaml").write_text(MAIN)
    # GRPO ran 30 steps and peaked at step 30; +ProAS was stopped at step 20: GRPO is judged
    # within 20 steps too (best 0.5, not 0.9)
    _write_run(root, "household", "grpo", 0, [_val(0, 0.0), _val(10, 0.5), _val(20, 0.25), _val(30, 0.9)])
    _write_run(root, "household", "grpo_proas", 0, [_val(0, 0.0), _val(10, 0.25), _val(20, 0.75)])
    rows = _table_rows(make_report(root, plots=False).read_text(), "Main results")
    assert rows["GRPO"][6] == "50.0" and rows["GRPO+ProAS"][6] == "**75.0**"
    assert rows["GRPO+ProAS"][7] == "≥1.00×"  # GRPO never reaches 70 within 20 steps


def test_speedup_cases():
    base = [(0, 0.0, 0), (10, 50.0, 0), (20, 70.0, 0), (30, 90.0, 0)]
    fast = [(0, 0.0, 0), (10, 75.0, 0), (20, 80.0, 0), (30, 90.0, 0)]
    never = [(0, 0.0, 0), (10, 10.0, 0), (20, 20.0, 0), (30, 30.0, 0)]
    assert speedup(base, fast, 70, 30) == ("2.00×", None)
    assert speedup(fast, base, 70, 30) == ("0.50×", None)
    text, note = speedup(never, fast, 70, 30)
    assert text == "≥3.00×" and "base never reaches 70%" in note
    text, note = speedup(base, never, 70, 30)
    assert text == "≤0.67×" and "+ProAS never reaches 70%" in note
    assert speedup(never, never, 70, 30) == ("n/r", "neither reaches 70% within 30 steps")
    # reaching K already at step 0 counts as one step
    assert speedup([(0, 80.0, 0)], [(0, 80.0, 0)], 70, 30)[0] == "1.00×"


def test_first_reach_and_best_within_and_std():
    assert first_reach([(0, 10.0, 0), (10, 69.9, 0), (20, 70.0, 0)], 70) == 20
    assert first_reach([(0, 10.0, 0)], 70) is None
    m, sd = mean_std([87.5, 75.0])
    assert m == 81.25 and sd == pytest.approx(math.sqrt(2 * 6.25 ** 2))
    assert mean_std([5.0]) == (5.0, 0.0)


def test_truncated_last_line_is_ignored_but_corruption_inside_is_an_error(tmp_path):
    d = _write_run(tmp_path, "household", "grpo", 0, [_val(0, 0.0), _val(10, 0.5)], extra_lines=['{"step": 11, "tra'])
    run = read_run(d)
    assert [r["step"] for r in run.val] == [0, 10] and best_within(run, 30)["step"] == 10
    bad = _write_run(
        tmp_path, "household", "grpo", 1, [_val(0, 0.0)], extra_lines=["garbage", json.dumps(_val(10, 1.0))]
    )
    with pytest.raises(ProasError, match=r"metrics.jsonl:2: not a metrics record"):
        read_run(bad)


def test_missing_results_dir_is_a_clear_error(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "no such results directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    assert "no studies/ folder" in capsys.readouterr().err


def test_an_sft_row_reports_its_best_epoch_and_does_not_shrink_the_rl_budget(tmp_path):
    root = tmp_path / "res"
    (root / "studies").mkdir(parents=True)
    (root / "studies" / "main.yaml").write_text(MAIN.replace(
        '{id: sft, label: SFT, not_run: "waits for proas sft"}', '{id: sft, label: SFT, sft: [--epochs, "3"]}'))
    _write_run(root, "household", "grpo", 0, [_val(0, 0.0), _val(10, 0.5), _val(20, 0.25), _val(30, 0.9)])
    # SFT's records are epochs 0-3; its best (epoch 2) counts although the RL runs went to step 30
    _write_run(root, "household", "sft", 0, [_val(0, 0.0), _val(1, 0.25), _val(2, 0.625), _val(3, 0.5)])
    md = make_report(root, plots=False).read_text()
    rows = _table_rows(md, "Main results")
    assert rows["SFT"][6] == "62.5" and rows["GRPO"][6] == "90.0"  # GRPO judged within its 30 steps
    assert "Reduced budget" not in md
    assert "SFT: `proas sft` (supervised training on the oracle's actions in the training tasks), best " \
           "validation over its 3 epochs." in md


def test_t_quantile_matches_closed_forms_and_tables():
    # df 1 (Cauchy): tan(pi (p - 1/2)); df 2: (2p - 1) / sqrt(2 p (1 - p))
    assert t_quantile(0.975, 1) == pytest.approx(math.tan(0.475 * math.pi), rel=1e-9)
    assert t_quantile(0.975, 2) == pytest.approx(0.95 / math.sqrt(2 * 0.975 * 0.025), rel=1e-9)
    # df 4: a = 4p(1-p), q = cos(arccos(sqrt a) / 3) / sqrt a, t = 2 sqrt(q - 1)
    a = 4 * 0.975 * 0.025
    q = math.cos(math.acos(math.sqrt(a)) / 3) / math.sqrt(a)
    assert t_quantile(0.975, 4) == pytest.approx(2 * math.sqrt(q - 1), rel=1e-9)
    # printed tables: 3.182 (df 3), 2.228 (df 10), 2.042 (df 30); the normal's 1.960 for large df
    assert t_quantile(0.975, 3) == pytest.approx(3.1824, abs=1e-4)
    assert t_quantile(0.975, 10) == pytest.approx(2.2281, abs=1e-4)
    assert t_quantile(0.975, 30) == pytest.approx(2.0423, abs=1e-4)
    assert t_quantile(0.975, 1e6) == pytest.approx(1.95996, abs=1e-5)
    # Welch's df is real: between the neighbouring integers, and symmetric
    assert t_quantile(0.975, 3) < t_quantile(0.975, 2.5) < t_quantile(0.975, 2)
    assert t_quantile(0.025, 2.5) == pytest.approx(-t_quantile(0.975, 2.5))
    assert t_quantile(0.5, 7) == pytest.approx(0.0, abs=1e-9)


def test_welch_interval_by_hand():
    # a = [1, 3] (var 2, n 2), b = [0, 0, 0] (var 0): se^2 = 2/2 = 1, df = 1 / (1^2 / 1) = 1
    diff, lo, hi, df = welch_ci([1.0, 3.0], [0.0, 0.0, 0.0])
    t1 = math.tan(0.475 * math.pi)
    assert (diff, df) == (2.0, pytest.approx(1.0)) and lo == pytest.approx(2 - t1) and hi == pytest.approx(2 + t1)
    # a = [0, 2, 4] (var 4, n 3), b = [0, 2] (var 2, n 2): se^2 = 4/3 + 1 = 7/3,
    # df = (7/3)^2 / ((4/3)^2 / 2 + 1^2 / 1) = 49/17; t(0.975, 49/17) = 3.257210 (scipy.stats.t.ppf)
    diff, lo, hi, df = welch_ci([0.0, 2.0, 4.0], [0.0, 2.0])
    assert diff == 1.0 and df == pytest.approx(49 / 17)
    assert hi - 1.0 == pytest.approx(3.257210 * math.sqrt(7 / 3), rel=1e-6) and 1.0 - lo == pytest.approx(hi - 1.0)
    # one seed on a side: no spread to estimate, no interval
    assert welch_ci([5.0], [1.0, 3.0]) == (3.0, None, None, None)
    # no spread on either side: the interval is the difference itself
    assert welch_ci([5.0, 5.0], [1.0, 1.0]) == (4.0, 4.0, 4.0, None)


def test_train_window_and_resumed_run_count_the_last_record_of_a_step(tmp_path):
    assert train_window(150) == (51, 150) and train_window(30) == (11, 30) and train_window(20) == (7, 20)
    assert train_window(10) == (4, 10)
    # resumed after step 5 (steps 4 and 5 written twice: the second record counts), and the run's
    # records of steps 4-10 miss step 7
    recs = [{"step": 0, "val/sr": 0.0}] + [{"step": s, "train/sr": 0.9} for s in range(1, 6)]
    recs += [{"step": s, "train/sr": s / 10} for s in (4, 5, 6, 8, 9)] + [{"step": 10, "train/sr": 1.0, "val/sr": 0.5}]
    d = tmp_path / "run"
    d.mkdir()
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    run = read_run(d)
    # steps 4 5 6 8 9 10: (0.4 + 0.5 + 0.6 + 0.8 + 0.9 + 1.0) / 6 = 0.7
    mean, n = train_sr_mean(run, 4, 10)
    assert mean == pytest.approx(70.0) and n == 6
    assert train_sr_mean(run, 11, 20) == (None, 0)


def test_a_run_missing_training_records_in_the_window_is_noted(tmp_path):
    root = tmp_path / "res"
    (root / "studies").mkdir(parents=True)
    (root / "studies" / "main.yaml").write_text(MAIN)
    _write_run(root, "household", "grpo", 0, [_val(0, 0.0), _val(10, 0.5), _val(20, 0.25), _val(30, 0.9)],
               train=lambda s: 0.5)
    d = _write_run(root, "household", "grpo", 1, [_val(0, 0.0), _val(10, 0.5), _val(20, 0.25), _val(30, 0.9)],
                   train=lambda s: 0.3)
    # seed 1 lost the training keys of steps 11-20 (kept: 21-30, mean 30%)
    lines = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    lines = [{k: v for k, v in r.items() if not (k == "train/sr" and 11 <= r["step"] <= 20)} for r in lines]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    md = make_report(root, plots=False).read_text()
    rows = _table_rows(md, "Main results")
    assert rows["GRPO"][10] == "40.0±14.1"  # 50 and 30
    assert ("GRPO, household Train SR 11-30: seed 1 has training records for 10 of its 20 steps; its mean is "
            "over those.") in md


def test_training_curve_is_binned_by_ten_steps_and_averaged_over_seeds(tmp_path):
    from proas.experiments.report import train_curve

    a = _write_run(tmp_path, "household", "grpo", 0, [_val(0, 0.0), _val(10, 0.5), _val(20, 0.5), _val(25, 0.5)],
                   train=lambda s: s / 100)
    b = _write_run(tmp_path, "household", "grpo", 1, [_val(0, 0.0), _val(10, 0.5), _val(20, 0.5), _val(25, 0.5)],
                   train=lambda s: s / 100 + 0.1)
    # bins 1-10, 11-20, 21-25 (the budget ends the last): step/100 averages 5.5, 15.5, 23 there,
    # the other seed 10 points more; std of two values 10 apart is sqrt(50)
    curve = train_curve([read_run(a), read_run(b)], 25)
    assert [(e, m) for e, m, _ in curve] == [(10, pytest.approx(10.5)), (20, pytest.approx(20.5)),
                                             (25, pytest.approx(28.0))]
    assert all(sd == pytest.approx(math.sqrt(50)) for _, _, sd in curve)
    # within a budget of 15 the last bin is 11-15 (mean 13 and 23)
    assert [(e, m) for e, m, _ in train_curve([read_run(a), read_run(b)], 15)] == [
        (10, pytest.approx(10.5)), (15, pytest.approx(18.0))]
