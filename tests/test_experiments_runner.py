"""The grid runner on a toy study: runs, dependencies, skip of finished runs, resume, conflicts."""

import json
import os
from pathlib import Path

import pytest

from proas.cli import main
from proas.errors import ProasError
from proas.experiments.runner import run_grid, run_status
from proas.experiments.spec import load_study, parse_study, shipped_studies

TESTS = Path(__file__).resolve().parent
COMMON = ["env.fixed_train_set.path=null", "env.options.n_train=24", "env.options.n_valid=8",
          "env.tasks_per_step=4", "env.group_size=4", "train.val_every=2", "train.save_every=2",
          "algo.minibatch_size=16", "train.progress=false", "algo.graph.oracle_tasks=8"]


def _study(rows, steps=4, seeds=(0,)):
    return parse_study({"study": "toy", "title": "Toy", "kind": "main", "envs": ["toy_env:make_env"],
                        "seeds": list(seeds), "steps": steps, "common": COMMON, "rows": rows}, "toy.yaml")


@pytest.fixture(autouse=True)
def _toy_on_path(monkeypatch):
    # the runner's `proas train` processes import the toy env from tests/
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS))


def _metrics(run_dir):
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


@pytest.mark.slow
def test_grid_runs_dependencies_in_order_then_skips_finished_runs(tmp_path):
    study = _study([
        {"id": "teacher", "label": "T", "hidden": True,
         "overrides": ["algo.shaping=none", "algo.graph.source=rollouts"]},
        {"id": "distill", "label": "D", "needs": ["teacher"],
         "overrides": ["algo.shaping=proas", "algo.graph.source=load",
                       "algo.graph.path={out}/toy_env_make_env/teacher/seed{seed}/checkpoints/step_{steps:06d}/graph.json"]},
    ])
    out = tmp_path / "res"
    log: list[str] = []
    res = run_grid(study, study.runs(out), out, jobs=2, log=log.append, poll_s=0.1)
    assert res.failed == [] and sorted(res.done) == ["toy_env_make_env/distill/seed0", "toy_env_make_env/teacher/seed0"]
    starts = [x.split()[-1] for x in log if x.strip().startswith("start")]
    dones = [x.split()[-1] for x in log if x.strip().startswith("done")]
    # the student starts only after its teacher finished, although two jobs were allowed
    assert log.index(f"  done   {dones[0]}") < log.index(f"  start  {starts[1]}")
    assert starts == ["toy_env_make_env/teacher/seed0", "toy_env_make_env/distill/seed0"]
    teacher, student = out / "toy_env_make_env" / "teacher" / "seed0", out / "toy_env_make_env" / "distill" / "seed0"
    for d in (teacher, student):
        assert json.loads((d / "summary.json").read_text())["steps"] == 4
    assert (out / "studies").is_dir()
    cfg = (student / "config.yaml").read_text()
    assert f"path: {teacher.resolve()}/checkpoints/step_000004/graph.json" in cfg

    before = {d: (d / "metrics.jsonl").read_text() for d in (teacher, student)}
    log.clear()
    again = run_grid(study, study.runs(out), out, jobs=2, log=log.append, poll_s=0.1)
    assert again.done == [] and again.failed == [] and len(again.skipped) == 2
    assert not any(x.strip().startswith(("start", "resume")) for x in log)
    assert {d: (d / "metrics.jsonl").read_text() for d in (teacher, student)} == before


def test_an_sft_row_runs_proas_sft_and_an_interrupted_one_starts_over(tmp_path):
    study = _study([{"id": "sft", "label": "SFT", "sft": ["--epochs", "2", "--batch-size", "8"]}])
    out = tmp_path / "res"
    (spec,) = study.runs(out)
    run_dir = spec.run_dir(out)
    run_dir.mkdir(parents=True)
    # what a killed SFT run leaves: its config and one epoch's record, no summary
    from proas.train.config import build_config
    from proas.train.loop import write_run_config

    write_run_config(run_dir, build_config(list(spec.overrides)))
    (run_dir / "metrics.jsonl").write_text('{"step": 0, "val/sr": 0.0}\n')
    assert run_status(spec, out, study.steps) == "partial"
    log: list[str] = []
    res = run_grid(study, [spec], out, jobs=1, log=log.append, poll_s=0.1)
    assert res.done == [spec.key], (run_dir / "train.log").read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["baseline"] == "sft" and summary["epochs"] == 2
    assert [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2]
    assert run_status(spec, out, study.steps) == "done"
    log.clear()
    assert run_grid(study, [spec], out, jobs=1, log=log.append, poll_s=0.1).skipped == [spec.key]


@pytest.mark.slow
def test_interrupted_run_is_resumed_to_the_metrics_of_an_uninterrupted_one(tmp_path):
    from proas.train.config import build_config
    from proas.train.loop import train

    study = _study([{"id": "grpo", "label": "GRPO", "overrides": ["algo.shaping=proas", "seed=2"]}])
    out = tmp_path / "res"
    (spec,) = study.runs(out)
    cfg = build_config(list(spec.overrides))
    train(cfg, run_dir=spec.run_dir(out), stop_after=3)  # a run cut off after 3 of 4 steps
    assert not (spec.run_dir(out) / "summary.json").exists()
    assert run_status(spec, out, study.steps) == "partial"
    log: list[str] = []
    res = run_grid(study, [spec], out, jobs=1, log=log.append, poll_s=0.1)
    assert res.done == [spec.key] and any(x.strip().startswith("resume") for x in log)
    reference = tmp_path / "ref"
    train(build_config(list(spec.overrides)), run_dir=reference)
    assert _metrics(spec.run_dir(out)) == _metrics(reference)
    assert run_status(spec, out, study.steps) == "done"


@pytest.mark.slow
def test_a_failed_run_fails_the_runs_that_need_it_and_the_grid_reports_it(tmp_path):
    study = _study(
        [
            {
                "id": "broken",
                "label": "B",
                "overrides": ["algo.graph.source=load", "algo.graph.path=/nonexistent/graph.json"],
            },
            {"id": "after", "label": "A", "needs": ["broken"], "overrides": ["algo.shaping=none"]},
        ]
    )
    out = tmp_path / "res"
    log: list[str] = []
    res = run_grid(study, study.runs(out), out, jobs=2, log=log.append, poll_s=0.1)
    assert sorted(res.failed) == ["toy_env_make_env/after/seed0", "toy_env_make_env/broken/seed0"]
    assert not (out / "toy_env_make_env" / "after" / "seed0").exists()  # never started
    assert (out / "toy_env_make_env" / "broken" / "seed0" / "train.log").read_text().strip()


def test_a_run_dir_with_another_config_is_refused_before_anything_starts(tmp_path):
    from proas.train.config import build_config
    from proas.train.loop import write_run_config

    study = _study([{"id": "a", "label": "A", "overrides": ["algo.shaping=none"]},
                    {"id": "b", "label": "B", "overrides": ["algo.shaping=proas"]}])
    out = tmp_path / "res"
    spec_a, spec_b = study.runs(out)
    spec_b.run_dir(out).mkdir(parents=True)
    write_run_config(spec_b.run_dir(out), build_config(list(spec_b.overrides) + ["algo.estimator=dapo"]))
    with pytest.raises(ProasError, match=r"holds a run with another config than study 'toy' asks for \(row 'b'\)"):
        run_grid(study, [spec_a, spec_b], out, jobs=2, log=lambda _: None)
    assert not spec_a.run_dir(out).exists()
    # a different step budget alone is no conflict: the run is continued to the new budget
    write_run_config(spec_b.run_dir(out), build_config(list(spec_b.overrides) + ["train.steps=2"]))
    assert run_status(spec_b, out, study.steps) == "partial"


def test_a_run_made_from_another_checkout_counts_as_this_studys_run(tmp_path):
    """Results made on another machine (its own copy of proas/data) are skipped or resumed here."""
    from proas.train.config import build_config
    from proas.train.loop import write_run_config

    study = load_study("main")
    out = tmp_path / "res"
    (spec,) = study.runs(out, rows=["grpo"], seeds=[1], envs=["shop"])
    run_dir = spec.run_dir(out)
    run_dir.mkdir(parents=True)
    elsewhere = "/tmp/other-machine/src/proas/data/fixed_train_set/seed1/shop"
    moved = [x for x in spec.overrides if not x.startswith("env.fixed_train_set.path=")]
    write_run_config(run_dir, build_config(moved + [f"env.fixed_train_set.path={elsewhere}", "train.steps=20"]))
    assert run_status(spec, out, study.steps) == "partial"
    # the same run on another seed's schedule is still a conflict
    write_run_config(run_dir, build_config(moved + [f"env.fixed_train_set.path={elsewhere.replace('seed1', 'seed2')}"]))
    with pytest.raises(ProasError, match="another config"):
        run_status(spec, out, study.steps)


def test_shipped_studies_cover_the_papers_tables():
    assert shipped_studies() == ["ablation_arg", "ablation_rea", "ablation_shaping", "heldout_tune",
                                "heldout_tune_other", "heldout_tune_sft", "lm_competent", "lm_screen", "lm_warm",
                                "main", "main_warm"]
    # the lm study: hidden SFT candidates, then GRPO +- ProAS from the chosen start
    lm = load_study("lm_warm")
    assert [r.id for r in lm.rows if not r.hidden] == ["grpo_lm", "grpo_proas_lm"]
    sft = [r for r in lm.rows if r.sft]
    assert sft and all(r.hidden and "policy.lm.model_path={out}/models/{env}" in r.overrides for r in sft)
    # every RL row (the shown ones and the hidden learning-rate rows) starts from the chosen start
    assert all("policy.lm.init_from={out}/lm_start/{env}" in r.overrides for r in lm.rows if not r.sft)
    assert "policy=lm" in lm.common and "policy.lm.mode=score" in lm.common
    # the competent-start study: SFT with the whole-sequence loss on every seed; each RL row (shop)
    # waits for and starts from its own seed's SFT run of the start it names
    comp = load_study("lm_competent")
    sft_rows = [r for r in comp.rows if r.sft]
    assert {r.id for r in sft_rows} == {"sft_seq_household", "sft_seq_shop", "sft_weak_shop"}
    assert all(r.sft[r.sft.index("--sequence-loss") + 1] == "1" for r in sft_rows)
    for row in comp.rows:
        if row.sft is None:
            assert row.envs == ("shop",) and len(row.needs) == 1
            assert f"policy.lm.init_from={{out}}/{{env}}/{row.needs[0]}/seed{{seed}}" in row.overrides
    assert {r.id: r.base for r in comp.rows if r.base} == {"grpo_proas_comp": "grpo_comp",
                                                             "grpo_proas_weak": "grpo_weak"}
    # the warm-start table: every RL row starts from its seed's SFT run
    warm = load_study("main_warm")
    assert warm.row("sft_start").sft == ("--epochs", "1", "--max-tasks", "80")
    for row in warm.rows:
        if row.sft is None:
            assert row.needs == ("sft_start",)
            assert "policy.scorer.init_from={out}/{env}/sft_start/seed{seed}" in row.overrides
    rea = load_study("ablation_rea")
    assert {r.id: r.overrides for r in rea.rows}["rea_node"][-1] == "algo.graph.rea=node"
    main_study = load_study("main")
    assert [r.label for r in main_study.rows if not r.hidden] == [
        "Proprietary model (ReAct)", "Direct Prompt", "SFT", "PPO", "MiGPO", "GRPO", "GRPO+ProAS", "DAPO",
        "DAPO+ProAS", "GiGPO", "GiGPO+ProAS"]
    assert {r.id for r in main_study.rows if r.not_run} == {"react"}
    assert main_study.row("sft").sft == ("--epochs", "10")
    assert main_study.row("direct").untrained_of == "grpo"
    assert main_study.seeds == (0, 1, 2) and main_study.steps == 150 and main_study.envs == ("household", "shop")
    assert {r.id: r.base for r in main_study.rows if r.base} == {"grpo_proas": "grpo", "dapo_proas": "dapo",
                                                                 "gigpo_proas": "gigpo"}
    shaping = load_study("ablation_shaping")
    assert [r.id for r in shaping.rows] == ["grpo", "grpo_proas", "grpo_progress_reward", "grpo_no_mui",
                                            "grpo_no_apr", "grpo_mask_pm", "grpo_suffix"]
    arg = load_study("ablation_arg")
    assert [r.id for r in arg.rows if not r.hidden] == ["grpo", "grpo_proas", "arg_random", "arg_static",
                                                        "arg_incomplete", "arg_incomplete_static", "arg_distill"]


def test_runs_use_the_fixed_schedule_of_their_seed_and_share_rows_across_studies(tmp_path):
    from proas.tasksets import default_root

    main_runs = {r.key: r for r in load_study("main").runs(tmp_path)}
    assert len(main_runs) == 9 * 2 * 3  # 9 runnable rows (SFT, PPO, MiGPO and the six group-based ones)
    sft = main_runs["household/sft/seed0"]
    assert (
        sft.command == "sft" and sft.args == ("--epochs", "10") and main_runs["household/grpo/seed0"].command == "train"
    )
    ppo = main_runs["shop/ppo/seed1"].overrides
    assert f"env.fixed_train_set.path={default_root() / 'fix_train_set_ppo' / 'seed1' / 'shop'}" in ppo
    grpo = main_runs["household/grpo/seed2"].overrides
    assert f"env.fixed_train_set.path={default_root() / 'fixed_train_set' / 'seed2' / 'household'}" in grpo
    # GRPO of the ablation study resolves to the same trainer config as GRPO of the main table
    from proas.train.config import build_config

    abl = {r.key: r for r in load_study("ablation_shaping").runs(tmp_path)}
    assert build_config(list(abl["household/grpo/seed2"].overrides)) == build_config(list(grpo))
    # selecting the distill row pulls in its teacher
    arg = load_study("ablation_arg").runs(tmp_path, rows=["arg_distill"], seeds=[0], envs=["shop"])
    assert [r.row for r in arg] == ["arg_teacher", "arg_distill"]


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"kind": "table"}, "kind='table' is not one of main, ablation"),
        ({"seeds": []}, "'seeds' must be a non-empty list"),
        ({"steps": 0}, "'steps' must be a positive integer"),
        ({"bogus": 1}, "unknown key(s) bogus"),
        (
            {"rows": [{"id": "a", "label": "A"}]},
            "rows[0]: a row needs 'overrides', 'untrained_of', 'sft' or a 'not_run' reason",
        ),
        ({"rows": [{"id": "a", "sft": ["--epoch", "3"]}]}, "row 'a': unknown option(s) of proas sft: --epoch"),
        (
            {"rows": [{"id": "a", "overrides": ["algo.shaping=x"]}]},
            "row 'a' on toy_env:make_env: config: algo.shaping='x'",
        ),
        ({"rows": [{"id": "a", "base": "z", "overrides": ["seed=1"]}]}, "row 'a' refers to unknown row 'z'"),
        (
            {"rows": [{"id": "a", "overrides": ["seed=1"]}, {"id": "a", "overrides": ["seed=1"]}]},
            "duplicate row id 'a'",
        ),
        ({"kind": "ablation"}, "an ablation study needs 'reference'"),
    ],
)
def test_malformed_study_configs_are_one_line_errors(patch, message):
    data = {"study": "toy", "kind": "main", "envs": ["toy_env:make_env"], "seeds": [0], "steps": 2,
            "common": COMMON, "rows": [{"id": "a", "overrides": ["seed=1"]}]}
    data.update(patch)
    with pytest.raises(ProasError) as err:
        parse_study(data, "toy.yaml")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_cli_dry_run_lists_runs_and_bad_input_exits_2(tmp_path, capsys):
    assert main(["experiment", "run", "ablation_arg", "--rows", "arg_distill", "--seeds", "1", "--envs", "shop",
                 "--out", str(tmp_path), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert " ".join(lines[:-1]).split() == ["new", "shop/arg_teacher/seed1", "new", "shop/arg_distill/seed1"]
    assert lines[-1].startswith("ablation_arg: 2 runs to go")  # and how long they take
    assert main(["experiment", "run", "nosuchstudy", "--dry-run"]) == 2
    assert "neither a config file nor a shipped study" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("study: [unclosed\n")
    assert main(["experiment", "run", str(bad), "--dry-run"]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    assert main(["experiment", "run", "main", "--rows", "nope", "--dry-run"]) == 2
    assert "no row 'nope'" in capsys.readouterr().err


def test_sigterm_stops_the_runner_and_its_children(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    import yaml

    cfg = tmp_path / "toy.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "study": "toy",
                "kind": "main",
                "envs": ["toy_env:make_env"],
                "seeds": [0],
                "steps": 500,
                "common": COMMON,
                "rows": [{"id": "a", "overrides": ["algo.shaping=none"]}],
            }
        )
    )
    out = tmp_path / "res"
    proc = subprocess.Popen(
        [sys.executable, "-m", "proas", "experiment", "run", str(cfg), "--out", str(out), "--jobs", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = out / "toy_env_make_env" / "a" / "seed0" / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "stopped by SIGTERM" in err and "run the same command again" in err
    size = len(metrics.read_text())
    time.sleep(2)
    assert len(metrics.read_text()) == size  # the child was stopped with its runner
    assert not (metrics.parent / "summary.json").exists()


def test_a_run_waits_only_for_needed_rows_that_run_on_its_env():
    # one start per env (each row on one env), and a row on both envs that needs both starts:
    # each env's run waits for its own env's start, never for a run that does not exist
    study = parse_study({
        "study": "s", "title": "t", "kind": "main", "envs": ["household", "shop"], "seeds": [0], "steps": 2,
        "rows": [
            {"id": "start_h", "label": "h", "envs": ["household"], "overrides": ["algo.shaping=none"]},
            {"id": "start_s", "label": "s", "envs": ["shop"], "overrides": ["algo.shaping=none"]},
            {"id": "rl", "label": "rl", "needs": ["start_h", "start_s"], "overrides": ["algo.shaping=proas"]},
        ]}, "s.yaml", check_overrides=False)
    needs = {(r.env, r.row): r.needs for r in study.runs(Path("/tmp/out"))}
    assert needs[("household", "rl")] == ("start_h",)
    assert needs[("shop", "rl")] == ("start_s",)
