"""The held-out study's machinery: configs that match the protocol, tuning selection, its sets."""

import json
from pathlib import Path

import pytest

from proas import tasksets
from proas.cli import main as proas_main
from proas.errors import ProasError
from proas.experiments import heldout
from proas.experiments.spec import load_study, parse_study


def test_shipped_tuning_configs_are_what_the_protocol_constants_give():
    for start in ("random", "sft"):
        assert heldout.config_path(start).read_text(encoding="utf-8") == heldout.study_yaml(start)
    assert proas_main(["heldout", "configs", "--check"]) == 0


def test_the_tuning_grid_runs_each_arm_on_its_own_env_only(tmp_path):
    study = load_study("heldout_tune")
    specs = study.runs(tmp_path)
    per_env = {e: {(s.row, s.seed) for s in specs if s.env == e} for e in ("household", "shop")}
    # household: 6 arms x 7 settings; shop: 4 arms x 7 + GiGPO's 2 arms x 7 x 2 modes; 2 seeds each
    assert len(per_env["household"]) == 6 * 7 * 2
    assert len(per_env["shop"]) == (4 * 7 + 2 * 14) * 2
    assert not any(r.endswith(("_mn", "_msn")) for r, _ in per_env["household"])
    assert not any(r.startswith("gigpo") and not r.endswith(("_mn", "_msn")) for r, _ in per_env["shop"])
    assert {s.seed for s in specs} == set(heldout.TUNING_SEEDS)
    # every run validates on the tuning tasks, never on the evaluation set
    for s in specs:
        val = [o for o in s.overrides if o.startswith("env.fixed_val_set.path=")]
        assert val and val[0].endswith(f"tuning_val_set/{s.env}.jsonl"), s


def test_a_row_restricted_to_envs_must_name_the_studys_envs():
    base = {"study": "x", "envs": ["household", "shop"], "seeds": [0], "steps": 1}
    ok = parse_study(dict(base, rows=[{"id": "a", "overrides": ["seed=1"], "envs": ["shop"]}]), "t")
    assert ok.rows[0].envs == ("shop",)
    with pytest.raises(ProasError, match="envs"):
        parse_study(dict(base, rows=[{"id": "a", "overrides": ["seed=1"], "envs": ["garden"]}]), "t")


def _fake_run(root: Path, env: str, row: str, seed: int, vals: dict[int, float]):
    d = root / env / row / f"seed{seed}"
    d.mkdir(parents=True)
    lines = [json.dumps({"step": s, "val/sr": v}) for s, v in sorted(vals.items())]
    (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_mean_validation_needs_every_reading_of_its_window():
    recs = [{"step": s, "val/sr": s / 1000} for s in range(0, 151, 10)]
    assert heldout.mean_val(recs) == pytest.approx(sum(range(50, 151, 10)) / 11 / 1000)
    assert heldout.mean_val([r for r in recs if r["step"] != 100]) is None


def test_selection_takes_the_best_mean_and_breaks_ties_towards_the_smaller_rate(tmp_path):
    arm = heldout.Arm("household", "grpo", "none")
    grid = heldout.settings(arm)
    # every setting scores 0.2 except sgd0.3 and sgd1, which tie at 0.5 on the mean
    for s in grid:
        for seed in heldout.TUNING_SEEDS:
            v = {"sgd0.3": (0.4, 0.6), "sgd1": (0.6, 0.4)}.get(s.tag, (0.2, 0.2))[heldout.TUNING_SEEDS.index(seed)]
            _fake_run(tmp_path, arm.env, heldout.row_id(arm, s), seed, {k: v for k in range(0, 151, 10)})
    choices = {(c.arm.env, c.arm.name): c for c in heldout.select(tmp_path)}
    assert choices[("household", "grpo_none")].chosen.tag == "sgd0.3"
    assert choices[("household", "grpo_proas")].chosen is None  # no runs at all
    text = heldout.render_selection(list(choices.values()))
    assert "household grpo_none: sgd0.3" in text


def _grid(root: Path, arm, score) -> None:
    """Fake finished tuning runs of every grid setting of ``arm``, scored by ``score(setting, seed)``."""
    for s in heldout.settings(arm):
        for seed in heldout.TUNING_SEEDS:
            _fake_run(root, arm.env, heldout.row_id(arm, s), seed, {k: score(s, seed) for k in range(0, 151, 10)})


def test_a_best_at_the_grids_edge_waits_for_the_extension_then_chooses_among_all(tmp_path):
    arm = heldout.Arm("household", "grpo", "none")
    # AdamW 0.001 (the lower edge of AdamW's rates) is best; everything else 0.1
    _grid(tmp_path, arm, lambda s, seed: 0.4 if s.tag == "adamw0.001" else 0.1)
    c = next(c for c in heldout.select(tmp_path) if c.arm == arm)
    assert c.chosen is None and "extend to adamw0.0003" in c.note
    need = heldout.extensions_needed(heldout.select(tmp_path))
    assert need == [(arm, heldout.Setting("adamw", 0.001))]
    ext = parse_study(heldout.extension_study(need), "t")
    assert [r.id for r in ext.rows] == ["grpo_none_adamw0.0003"]
    assert "policy.scorer.lr=0.0003" in ext.rows[0].overrides and ext.rows[0].envs == ("household",)
    # the extension loses: the edge stays chosen; it wins: it is chosen (once: no further extension)
    for ext_score, want in ((0.3, "adamw0.001"), (0.5, "adamw0.0003")):
        for seed in heldout.TUNING_SEEDS:
            d = tmp_path / "household" / "grpo_none_adamw0.0003" / f"seed{seed}"
            if d.exists():
                for f in d.iterdir():
                    f.unlink()
                d.rmdir()
            _fake_run(tmp_path, "household", "grpo_none_adamw0.0003", seed, {k: ext_score for k in range(0, 151, 10)})
        c = next(c for c in heldout.select(tmp_path) if c.arm == arm)
        assert c.chosen.tag == want and "extended once" in c.note
    # an interior best never waits
    inner = heldout.Arm("household", "grpo", "proas")
    _grid(tmp_path, inner, lambda s, seed: 0.4 if s.tag == "sgd0.3" else 0.1)
    c = next(c for c in heldout.select(tmp_path) if c.arm == inner)
    assert c.chosen.tag == "sgd0.3" and c.note == ""


def test_an_unfinished_setting_is_waited_for_unless_it_cannot_win(tmp_path):
    arm = heldout.Arm("household", "dapo", "proas")
    _grid(tmp_path, arm, lambda s, seed: 0.6 if s.tag == "sgd0.3" else 0.1)
    # adamw0.003 has only seed 200: at 0.1 it could reach (0.1 + 1.0) / 2 = 0.55 < 0.6: decided
    run = tmp_path / "household" / "dapo_proas_adamw0.003" / "seed201" / "metrics.jsonl"
    run.unlink()
    c = next(c for c in heldout.select(tmp_path) if c.arm == arm)
    assert c.chosen.tag == "sgd0.3" and "unfinished" in c.note
    # ... at 0.3 it could reach 0.65 > 0.6: the arm waits
    _fake_run(tmp_path / "b", "household", "dapo_proas_adamw0.003", 200, {k: 0.3 for k in range(0, 151, 10)})
    records = heldout.load_records([tmp_path, tmp_path / "b"])
    c = next(c for c in heldout.select(records) if c.arm == arm)
    assert c.chosen is None and "incomplete" in c.note


def test_run_records_round_trip_and_select_like_the_runs_they_came_from(tmp_path):
    runs = tmp_path / "runs"
    arm = heldout.Arm("shop", "dapo", "proas")
    _grid(runs, arm, lambda s, seed: 0.5 + 0.001 * seed if s.tag == "sgd1" else 0.01 * s.lr + 0.001 * seed)
    records = heldout.collect(runs)
    assert len(records) == 7 * len(heldout.TUNING_SEEDS)
    csv = tmp_path / "runs.csv"
    heldout.write_records(records, csv)
    back = heldout.read_records(csv)
    assert back.keys() == records.keys()
    for key, rec in records.items():
        assert back[key]["tuning_metric"] == rec["tuning_metric"]  # exactly: ties must stay ties
        assert back[key]["val150"] == pytest.approx(rec["tuning_metric"])
    by_dir = {c.arm: (c.chosen, c.table) for c in heldout.select(runs)}
    by_csv = {c.arm: (c.chosen, c.table) for c in heldout.select(back)}
    assert by_dir == by_csv and by_csv[arm][0].tag == "sgd1"
    # a later source's run replaces an earlier one's
    other = tmp_path / "later"
    _fake_run(other, "shop", "dapo_proas_sgd0.1", 200, {k: 0.9 for k in range(0, 151, 10)})
    merged = heldout.load_records([csv, other])
    assert merged[("shop", "dapo_proas_sgd0.1", 200)]["tuning_metric"] == pytest.approx(0.9)
    # an unfinished run (its window incomplete) is no record
    _fake_run(other, "shop", "dapo_proas_sgd1", 200, {k: 0.9 for k in range(0, 101, 10)})
    assert ("shop", "dapo_proas_sgd1", 200) not in heldout.collect(other)


def test_a_broken_records_csv_is_one_line_error(tmp_path):
    bad = tmp_path / "r.csv"
    bad.write_text("env,row,seed\nshop,x,1\n")
    with pytest.raises(ProasError, match="tuning_metric"):
        heldout.read_records(bad)
    bad.write_text("env,row,seed,tuning_metric\nshop,x,one,0.5\n")
    with pytest.raises(ProasError, match="line 2"):
        heldout.read_records(bad)
    bad.write_text("env,row,seed,tuning_metric\nshop,x,1,nan\n")
    with pytest.raises(ProasError, match="line 2"):
        heldout.read_records(bad)
    with pytest.raises(ProasError, match="no such"):
        heldout.load_records([tmp_path / "missing"])


def test_select_writes_records_and_the_evaluation_config_only_once_every_arm_is_chosen(tmp_path, capsys):
    runs = tmp_path / "runs"
    for arm in heldout.arms():
        _grid(runs, arm, lambda s, seed: 0.5 if s.tag in ("sgd0.3", "sgd0.3_mn") else 0.1)
    missing = heldout.Arm("shop", "gigpo", "proas")
    rec = runs / "shop" / heldout.row_id(missing, heldout.settings(missing)[0]) / "seed200"
    (rec / "metrics.jsonl").unlink()
    cfg = tmp_path / "main.yaml"
    assert proas_main(["heldout", "select", str(runs), "--eval-config", str(cfg)]) != 0
    assert "shop/gigpo_proas" in capsys.readouterr().err
    assert not cfg.exists()
    # the env whose arms are all chosen can start alone, with the same rows as in the full grid
    assert proas_main(["heldout", "select", str(runs), "--eval-config", str(cfg), "--eval-envs", "household"]) == 0
    alone = load_study(str(cfg))
    assert alone.envs == ("household",) and len(alone.rows) == 6
    _fake_run(tmp_path / "more", "shop", rec.parent.name, 200, {k: 0.1 for k in range(0, 151, 10)})
    out = tmp_path / "sel.md"
    assert proas_main(["heldout", "select", str(runs), str(tmp_path / "more"), "--out", str(out),
                       "--records", str(tmp_path / "r.csv"), "--eval-config", str(cfg)]) == 0
    study = load_study(str(cfg))
    assert study.name == "heldout_main" and study.seeds == heldout.EVAL_SEEDS
    # every arm at sgd 0.3 (shop GiGPO with mean_norm): no ProAS arm needs a second setting
    assert len(study.rows) == 12 and all("policy.scorer.lr=0.3" in r.overrides for r in study.rows)
    assert [(r.id, r.overrides) for r in study.rows if r.envs == ("household",)] == [
        (r.id, r.overrides) for r in alone.rows]
    assert len(heldout.read_records(tmp_path / "r.csv")) == sum(
        len(heldout.settings(a)) for a in heldout.arms()) * len(heldout.TUNING_SEEDS)


def test_select_refuses_an_sft_ablation_config_before_it_writes_any_output(tmp_path, capsys):
    # the refusal came after --out and --records were written: a failed command left half its outputs
    runs = tmp_path / "runs"
    runs.mkdir()
    out, rec, abl = tmp_path / "sel.md", tmp_path / "r.csv", tmp_path / "abl.yaml"
    assert proas_main(["heldout", "select", str(runs), "--start", "sft", "--out", str(out), "--records", str(rec),
                       "--ablation-config", str(abl)]) == 2
    assert "--ablation-config needs --start random" in capsys.readouterr().err
    assert not out.exists() and not rec.exists() and not abl.exists()


def test_the_tuning_sets_share_no_task_with_training_or_evaluation(tmp_path):
    """`proas schedule make-tuning-val` is deterministic (the shipped sets are what it writes)
    and its sets are disjoint from the training pool and the evaluation validation set."""
    from proas.envs import make

    for env in ("shop",):  # household's generator is slow to build every split; shop covers the code
        out = tmp_path / f"{env}.jsonl"
        assert proas_main(["schedule", "make-tuning-val", "--env", env, "--out", str(out)]) == 0
        made = tasksets.load_val_set(env, path=out)
        shipped = tasksets.load_val_set(env, path=tasksets.tuning_val_set_path(env))
        assert made.task_ids == shipped.task_ids and made.manifest["kind"] == "tuning_val_set"
        e = make(env)
        assert not set(made.task_ids) & set(e.task_ids("train"))
        assert not set(made.task_ids) & set(e.task_ids("valid"))
    household = tasksets.load_val_set("household", path=tasksets.tuning_val_set_path("household"))
    assert all(t.startswith("valid_unseen-") for t in household.task_ids)


def test_paired_interval_p_value_and_verdicts_follow_the_protocol():
    # ten seeds, differences 1..10 points: mean 5.5, sd 3.03, t(0.975, 9) = 2.262
    d = [k / 100 for k in range(1, 11)]
    res = heldout.paired(d)
    assert res["n"] == 10 and res["up"] == 10
    assert res["mean"] == pytest.approx(0.055)
    half = 2.2621571628 * res["sd"] / 10 ** 0.5
    assert (res["lo"], res["hi"]) == pytest.approx((0.055 - half, 0.055 + half), abs=1e-9)
    assert res["p"] == pytest.approx(2.78e-4, rel=0.01)  # t = 5.745 on 9 df
    assert heldout.verdict(res["lo"], res["hi"]) == "helps"
    assert heldout.verdict(-0.08, -0.01) == "hurts"
    assert heldout.verdict(-0.03, 0.04) == "no effect"
    assert heldout.verdict(-0.03, 0.07) == "unresolved"
    assert heldout.verdict(None, None) == "unresolved"


def test_holm_adjusts_in_order_and_keeps_monotone():
    assert heldout.holm([0.01, 0.04, 0.03, None]) == pytest.approx([0.03, 0.06, 0.06, None])


def test_the_evaluation_grid_runs_proas_at_its_own_and_at_its_bases_setting():
    chosen = {f"{a.env}/{a.name}": {"optimizer": "sgd", "lr": 1.0, "gigpo_mode": None} for a in heldout.arms()}
    chosen["shop/grpo_proas"] = {"optimizer": "adamw", "lr": 0.003, "gigpo_mode": None}
    study = parse_study(heldout.evaluation_study(chosen), "t")
    ids = [r.id for r in study.rows]
    assert "grpo_proas_at_base_shop" in ids and "grpo_proas_at_base_household" not in ids
    assert len(ids) == 12 + 1
    assert study.seeds == heldout.EVAL_SEEDS
    assert "train.final_val_temperatures=[1,0]" in study.common
    row = study.row("grpo_proas_at_base_shop")
    assert row.envs == ("shop",) and "policy.scorer.optimizer=sgd" in row.overrides
    del chosen["household/dapo_none"]
    with pytest.raises(ProasError, match="household/dapo_none"):
        heldout.evaluation_study(chosen)


def test_the_other_baselines_evaluation_runs_ppo_as_it_was_tuned():
    """start="other": PPO and MiGPO, unshaped, at their own settings on seeds 100-104; PPO keeps its
    tuning grid's single-trajectory batches and the PPO schedules, MiGPO neither."""
    chosen = {f"{a.env}/{a.name}": {"optimizer": "adamw", "lr": 0.003, "gigpo_mode": None}
              for a in heldout.arms(start="other")}
    study = parse_study(heldout.evaluation_study(chosen, "other"), "t")
    assert [r.id for r in study.rows] == ["ppo_none_household", "migpo_none_household", "ppo_none_shop",
                                          "migpo_none_shop"]
    assert study.seeds == heldout.EVAL_SEEDS_SHORT and study.name == "heldout_other"
    ppo, migpo = study.row("ppo_none_shop"), study.row("migpo_none_shop")
    for over in heldout.OTHER_OVERRIDES["ppo"]:
        assert over in ppo.overrides and over not in migpo.overrides
    assert ppo.schedule == "ppo" and migpo.schedule != "ppo"
    assert "policy.scorer.lr=0.003" in ppo.overrides and "algo.shaping=none" in migpo.overrides
    # the tuning rows of the chosen setting are the evaluation rows, up to the validation set
    tuned = {r["id"]: r for r in heldout.tuning_study("other")["rows"]}
    assert set(tuned["ppo_none_adamw0.003"]["overrides"]) == set(ppo.overrides)
    del chosen["shop/migpo_none"]
    with pytest.raises(ProasError, match="shop/migpo_none"):
        heldout.evaluation_study(chosen, "other")


def test_analyse_pairs_by_seed_and_writes_every_figure(tmp_path):
    """An evaluation grid of fake runs: the per-seed CSV holds a row per finished run, the pairs
    are matched by seed (an unpaired seed is left out), and the verdict follows the interval."""
    chosen = {f"{a.env}/{a.name}": {"optimizer": "sgd", "lr": 1.0, "gigpo_mode": None} for a in heldout.arms()}
    chosen["shop/grpo_proas"] = {"optimizer": "sgd", "lr": 0.3, "gigpo_mode": None}
    study = heldout.evaluation_study(chosen)
    res = tmp_path / "res"
    (res / "studies").mkdir(parents=True)
    import yaml

    (res / "studies" / "heldout_main.yaml").write_text(yaml.safe_dump(study))
    for k, seed in enumerate(heldout.EVAL_SEEDS):
        base = 0.20 + 0.01 * (k % 3)
        for row, v in (("grpo_none_shop", base), ("grpo_proas_shop", base + 0.05 + 0.001 * k),
                       ("grpo_proas_at_base_shop", base - 0.002 * k)):
            if row == "grpo_proas_shop" and seed == 109:
                continue  # unfinished: no summary, so that seed is not paired
            _fake_run(res, "shop", row, seed, {s: v for s in range(0, 151, 10)})
            run = res / "shop" / row / f"seed{seed}"
            (run / "summary.json").write_text(json.dumps({"commit": "c0ffee"}))
    assert proas_main(["heldout", "analyse", str(res), "--out", str(tmp_path / "out")]) == 0
    rows = (tmp_path / "out" / "heldout_main_per_seed.csv").read_text().splitlines()
    assert rows[0].startswith("row,env,seed,commit,primary")
    assert len(rows) == 1 + 10 + 9 + 10 and all(",c0ffee," in r for r in rows[1:])
    pairs = (tmp_path / "out" / "heldout_main_pairs.md").read_text()
    own = next(line for line in pairs.splitlines() if "| shop | grpo +ProAS (own setting)" in line)
    assert "| 9 |" in own and "9/9" in own and own.rstrip().endswith("| helps |")
    at_base = next(line for line in pairs.splitlines() if "| shop | grpo +ProAS (base's setting)" in line)
    assert "| 10 |" in at_base and at_base.rstrip().endswith("| hurts |")
    household = next(line for line in pairs.splitlines() if "| household | grpo +ProAS (own setting)" in line)
    assert household.rstrip().endswith("| not run |")
    # Holm waits for the whole family of primary pairs: household is not in yet
    assert "| pending |" in own and "| pending |" in household
    assert "| shop | grpo_proas_shop | 9 |" in pairs and "| shop | grpo_none_shop | 10 | 20.9 ± 0.9 |" in pairs
    # the per-seed CSV alone (what results/ keeps) gives the same analysis, curves included;
    # a results directory given after it replaces its runs
    cfg = tmp_path / "study.yaml"
    cfg.write_text(yaml.safe_dump(study))
    again = tmp_path / "again"
    assert proas_main(["heldout", "analyse", str(tmp_path / "out" / "heldout_main_per_seed.csv"),
                       "--study", str(cfg), "--out", str(again)]) == 0
    assert (again / "heldout_main_pairs.md").read_text() == pairs
    assert (again / "heldout_main_per_seed.csv").read_text().splitlines() == rows
    per_seed = heldout.read_per_seed(again / "heldout_main_per_seed.csv")
    assert per_seed[("grpo_none_shop", "shop", 100)]["val120"] == pytest.approx(0.20)
    later = tmp_path / "later"
    _fake_run(later, "shop", "grpo_none_shop", 100, {s: 0.9 for s in range(0, 151, 10)})
    (later / "shop" / "grpo_none_shop" / "seed100" / "summary.json").write_text("{}")
    merged = heldout.per_seed_rows([again / "heldout_main_per_seed.csv", later], study)
    assert next(r for r in merged if (r["row"], r["seed"]) == ("grpo_none_shop", 100))["primary"] == pytest.approx(0.9)
    assert len(merged) == 29
    bad = tmp_path / "bad.csv"
    bad.write_text("row,env,seed,primary\ngrpo_none_shop,shop,100,\n")
    with pytest.raises(ProasError, match="line 2"):
        heldout.read_per_seed(bad)


def test_the_ablations_run_at_grpo_proas_setting_and_are_read_against_the_main_grid(tmp_path):
    import yaml

    chosen = {f"{a.env}/{a.name}": {"optimizer": "sgd", "lr": 1.0, "gigpo_mode": None} for a in heldout.arms()}
    chosen["household/grpo_proas"] = {"optimizer": "adamw", "lr": 0.001, "gigpo_mode": None}
    abl = heldout.ablation_study(chosen)
    study = parse_study(abl, "t")
    assert study.seeds == heldout.EVAL_SEEDS_SHORT and len(study.rows) == 6
    hh = {r.id: r.overrides for r in study.rows if r.envs == ("household",)}
    assert set(hh) == {"grpo_no_apr_household", "grpo_no_mui_household", "grpo_rea_node_household"}
    assert all("policy.scorer.optimizer=adamw" in o and "policy.scorer.lr=0.001" in o for o in hh.values())
    assert {"algo.graph.rea=node", "algo.shaping=proas"} <= set(hh["grpo_rea_node_household"])
    assert "algo.shaping=no_apr" in hh["grpo_no_apr_household"]
    # analysis: the ablation rows from the ablation grid, the references from the main grid
    res, main = tmp_path / "abl", tmp_path / "main"
    for seed in heldout.EVAL_SEEDS_SHORT:
        for root, row, v in ((res, "grpo_no_apr_shop", 0.30), (main, "grpo_proas_shop", 0.40 + 0.01 * (seed % 2)),
                             (main, "grpo_none_shop", 0.20)):
            _fake_run(root, "shop", row, seed, {s: v for s in range(0, 151, 10)})
            (root / "shop" / row / f"seed{seed}" / "summary.json").write_text("{}")
    rows, pairs = heldout.analyse([res, main], yaml.safe_load(yaml.safe_dump(abl)))
    # three ablations per env share their two references: each reference run is one row
    keys = [(r["row"], r["env"], r["seed"]) for r in rows]
    assert len(keys) == len(set(keys)) == 3 * len(heldout.EVAL_SEEDS_SHORT)
    by = {(p["env"], p["pair"]): p for p in pairs}
    vs_full = by[("shop", "no_apr vs grpo_proas")]
    assert vs_full["n"] == 5 and vs_full["mean"] == pytest.approx(-0.104) and vs_full["verdict"] == "hurts"
    vs_base = by[("shop", "no_apr vs grpo_none")]
    assert vs_base["mean"] == pytest.approx(0.10) and vs_base["up"] == 5
    assert by[("household", "no_apr vs grpo_proas")]["verdict"] == "not run"
    assert all("p_holm" not in p for p in pairs)


def test_the_other_baselines_are_read_against_each_proas_arm_of_the_main_grid(tmp_path):
    """Δ = ProAS arm − other baseline, paired by seed, the ProAS runs read from the main grid's results;
    an arm the sources lack is "not run"; no Holm (not a primary pair)."""
    import yaml

    chosen = {f"{a.env}/{a.name}": {"optimizer": "sgd", "lr": 0.3, "gigpo_mode": None}
              for a in heldout.arms(start="other")}
    other = yaml.safe_load(yaml.safe_dump(heldout.evaluation_study(chosen, "other")))
    res, main = tmp_path / "other", tmp_path / "main"
    for seed in heldout.EVAL_SEEDS_SHORT:
        for root, row, v in ((res, "migpo_none_shop", 0.50), (res, "ppo_none_shop", 0.10 + 0.01 * (seed % 2)),
                             (main, "grpo_proas_shop", 0.30), (main, "grpo_none_shop", 0.05)):
            _fake_run(root, "shop", row, seed, {s: v for s in range(0, 151, 10)})
            (root / "shop" / row / f"seed{seed}" / "summary.json").write_text("{}")
    rows, pairs = heldout.analyse([res, main], other)
    # the main grid's base rows are not part of this comparison
    assert sorted({r["row"] for r in rows}) == ["grpo_proas_shop", "migpo_none_shop", "ppo_none_shop"]
    by = {(p["env"], p["pair"]): p for p in pairs}
    assert len(by) == 2 * 2 * 3
    vs_migpo = by[("shop", "grpo_proas vs migpo")]
    assert vs_migpo["n"] == 5 and vs_migpo["mean"] == pytest.approx(-0.20) and vs_migpo["verdict"] == "hurts"
    assert vs_migpo["base"] == "migpo_none_shop" and vs_migpo["proas"] == "grpo_proas_shop"
    vs_ppo = by[("shop", "grpo_proas vs ppo")]
    assert vs_ppo["mean"] == pytest.approx(0.196) and vs_ppo["up"] == 5 and vs_ppo["verdict"] == "helps"
    assert by[("shop", "dapo_proas vs ppo")]["verdict"] == "not run"
    assert by[("household", "gigpo_proas vs migpo")]["n"] == 0
    assert all("p_holm" not in p for p in pairs)
    # the CLI finds the study config the runner saved under studies/
    (res / "studies").mkdir()
    (res / "studies" / "heldout_other.yaml").write_text(yaml.safe_dump(other))
    assert proas_main(["heldout", "analyse", str(res), str(main), "--out", str(tmp_path / "out")]) == 0
    assert "| shop | grpo_proas vs migpo | 5 | -20.0 |" in (tmp_path / "out" / "heldout_other_pairs.md").read_text()


def test_speed_at_k_follows_the_protocol():
    steps = len(heldout.VAL_STEPS)
    base = [min(0.5, 0.05 * i) for i in range(steps)]  # 0, .05, ..., max 0.5 from step 100
    fast = [min(0.5, 0.1 * i) for i in range(steps)]
    # K = 0.25 (50% of 0.5): base first at step 50, fast at step 30 (0.3 >= 0.25 at i=3)
    assert heldout.spd_at(base, fast, 0.5) == pytest.approx(50 / 30)
    assert heldout.spd_at(base, [0.0] * steps, 0.5) is None  # never reaches K: n/r
    assert heldout.spd_at(base, base, 0.75) == pytest.approx(1.0)
    # a paired secondary reading: the interval of the differences of that reading
    rows = [{"row": r, "env": "shop", "seed": s, "best_val": v + 0.01 * s, **{f"val{k}": v for k in heldout.VAL_STEPS}}
            for s in range(4) for r, v in (("a", 0.2), ("b", 0.3))]
    sec = heldout.secondary(rows, [{"env": "shop", "pair": "p", "base": "a", "proas": "b"}])[0]
    assert sec["n"] == 4 and sec["best_val"]["mean"] == pytest.approx(0.1) and sec["train_sr"] is None
    assert "| shop | p | 4 | +10.0 [+10.0, +10.0] |" in heldout.render_secondary([sec])


def test_holm_is_applied_once_every_primary_pair_has_all_its_seeds(tmp_path):
    chosen = {f"{a.env}/{a.name}": {"optimizer": "sgd", "lr": 1.0, "gigpo_mode": None} for a in heldout.arms()}
    study = heldout.evaluation_study(chosen, envs=["shop"])
    for k, seed in enumerate(heldout.EVAL_SEEDS):
        for est, gain in (("grpo", 0.05), ("dapo", 0.0), ("gigpo", 0.02)):
            for row, v in ((f"{est}_none_shop", 0.2), (f"{est}_proas_shop", 0.2 + gain + 0.01 * (k % 3))):
                _fake_run(tmp_path, "shop", row, seed, {s: v for s in range(0, 151, 10)})
                (tmp_path / "shop" / row / f"seed{seed}" / "summary.json").write_text("{}")
    _, pairs = heldout.analyse(tmp_path, study)
    primary = [p for p in pairs if p["pair"].endswith("(own setting)")]
    assert len(primary) == 3 and all(p["n"] == 10 for p in primary)
    assert [p["p_holm"] for p in primary] == pytest.approx(heldout.holm([p["p"] for p in primary]))


@pytest.mark.parametrize("start", heldout.STARTS)
def test_every_edge_of_every_grid_has_a_rate_beyond_it(start):
    """A best setting on an edge waits on the rate past it: every grid's four edges have one, about a
    factor of 3 outwards (the SFT grid's AdamW top edge, 0.003, was missing and stopped the selection)."""
    sgd, adamw = heldout._rates(start)
    for opt, grid in (("sgd", sgd), ("adamw", adamw)):
        for edge, outward in ((grid[0], -1), (grid[-1], +1)):
            past = heldout.beyond_edge(heldout.Setting(opt, edge), start)
            assert past is not None and past.optimizer == opt
            assert 2.5 < (past.lr / edge) ** outward < 3.5
        assert heldout.beyond_edge(heldout.Setting(opt, grid[1]), start) is None
