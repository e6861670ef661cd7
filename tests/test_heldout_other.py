"""The other baselines' tuning grid (docs/study-protocol.md, "What is run", item 5; issue #24)."""

from proas.experiments import heldout
from proas.experiments.spec import load_study


def test_shipped_other_baselines_config_is_what_the_protocol_constants_give():
    path = heldout.config_path("other")
    assert path.name == "heldout_tune_other.yaml"
    assert path.read_text(encoding="utf-8") == heldout.study_yaml("other")


def test_other_baselines_grid_tunes_ppo_and_migpo_by_the_protocols_rules():
    study = heldout.tuning_study("other")
    assert study["seeds"] == [200, 201] and study["envs"] == ["household", "shop"]
    assert "env.fixed_val_set.path={data}/tuning_val_set/{env}.jsonl" in study["common"]
    rows = {r["id"]: r for r in study["rows"]}
    # SGD {0.1, 0.3, 1, 3} and AdamW {0.001, 0.003, 0.01} for each, on both envs (no envs key)
    expect = {f"{est}_none_{tag}" for est in ("ppo", "migpo")
              for tag in ("sgd0.1", "sgd0.3", "sgd1", "sgd3", "adamw0.001", "adamw0.003", "adamw0.01")}
    assert set(rows) == expect and not any("envs" in r for r in rows.values())
    ppo = rows["ppo_none_adamw0.003"]
    assert ppo["schedule"] == "ppo"  # verl-agent's PPO: 128 single-trajectory tasks a step
    assert ppo["overrides"] == ["algo.estimator=ppo", "algo.shaping=none", "env.group_size=1",
                                "env.tasks_per_step=128", "algo.gamma=1.0", "policy.scorer.optimizer=adamw",
                                "policy.scorer.lr=0.003"]
    assert "schedule" not in rows["migpo_none_sgd1"]
    assert rows["migpo_none_sgd1"]["overrides"][:2] == ["algo.estimator=migpo", "algo.shaping=none"]


def test_other_baselines_runs_use_the_ppo_schedules_of_the_tuning_seeds(tmp_path):
    study = load_study(heldout.config_path("other"))
    specs = study.runs(tmp_path)
    assert len(specs) == 2 * 2 * 7 * 2
    for spec in specs:
        path = next(x for x in spec.overrides if x.startswith("env.fixed_train_set.path="))
        folder = "fix_train_set_ppo" if spec.row.startswith("ppo") else "fixed_train_set"
        assert path.endswith(f"{folder}/seed{spec.seed}/{spec.env}")
        assert (heldout.Path(path.split("=", 1)[1]) / "schedule.jsonl").exists()


def test_select_reads_the_other_baselines_arms():
    recs = {}
    for arm in heldout.arms(start="other"):
        for s in heldout.settings(arm, "other"):
            for seed in heldout.TUNING_SEEDS:
                good = s.optimizer == "sgd" and s.lr == 0.3
                recs[(arm.env, heldout.row_id(arm, s), seed)] = {"tuning_metric": 0.2 if good else 0.1}
    choices = heldout.select(recs, "other")
    assert {(c.arm.env, c.arm.name) for c in choices} == {(e, f"{est}_none") for e in ("household", "shop")
                                                          for est in ("ppo", "migpo")}
    assert all(c.chosen == heldout.Setting("sgd", 0.3) for c in choices)
