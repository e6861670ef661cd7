"""The verl-agent recipe (recipes/verl_agent/) without verl-agent: every row's dry run, the
patch's shape, the config defaults, and the proas side the patch calls (envs, columns, graphs).

The checks against verl-agent's own code are in tests/test_verl_agent.py (verl venv +
``VERL_AGENT_DIR``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from proas.cli import main as proas_main
from proas.credit import ReferenceGraph
from proas.errors import ProasError
from proas.integrations.verl import ProasEnvManager
from proas.integrations.verl.verl_agent import (
    build_graph,
    make_envs,
    proas_settings,
    rollout_columns,
    sft_examples,
    trainer_credit,
)

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "verl_agent"


def load_launch():
    spec = importlib.util.spec_from_file_location("verl_agent_launch", RECIPE / "launch.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


launch = load_launch()


def dry_run(*argv: str) -> str:
    argv = list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert launch.main([*argv[:cut], "--dry-run", "--out", "/runs", *argv[cut:]]) == 0
    return buf.getvalue()


def trainer_args(text: str) -> dict[str, str]:
    """The ``key=value`` overrides of the printed ``main_ppo`` command."""
    body = text.split("verl.trainer.main_ppo", 1)[1].split("# ", 1)[0]
    pairs = [a.strip().strip("'").rstrip("\\").strip() for a in body.split("\n")]
    return dict(p.split("=", 1) for p in pairs if "=" in p)


def resolved(text: str) -> dict | None:
    if "# resolved proas config:" not in text:
        return None
    return OmegaConf.to_container(OmegaConf.create(text.split("# resolved proas config:\n", 1)[1]))["proas"]


# ---------------------------------------------------------------------- every row's dry run
EXPECTED_ESTIMATOR = {  # verl-agent's adv_estimator, proas's estimator (None: ProAS off)
    "grpo": ("grpo", None), "grpo_proas": ("grpo", "grpo"), "dapo": ("grpo", None),
    "dapo_proas": ("grpo", "dapo"), "gigpo": ("gigpo", None), "gigpo_proas": ("gigpo", "gigpo"),
    "ppo": ("gae", None), "ppo_proas": ("gae", None), "migpo": ("grpo", "migpo"),
    "progress_reward": ("grpo", "grpo"), "no_mui": ("grpo", "grpo"), "no_apr": ("grpo", "grpo"),
    "mask_pm": ("grpo", "grpo"), "suffix": ("grpo", "grpo"), "arg_random": ("grpo", "grpo"),
    "arg_static": ("grpo", "grpo"), "arg_incomplete": ("grpo", "grpo"),
    "arg_incomplete_static": ("grpo", "grpo"), "arg_teacher": ("gigpo", "gigpo"),
    "arg_distill": ("grpo", "grpo"),
}
EXPECTED_SHAPING = {
    "grpo_proas": "proas", "dapo_proas": "proas", "gigpo_proas": "proas", "migpo": "none",
    "progress_reward": "progress_reward", "no_mui": "no_mui", "no_apr": "no_apr", "mask_pm": "mask_pm",
    "suffix": "suffix", "arg_random": "random", "arg_static": "proas", "arg_incomplete": "proas",
    "arg_incomplete_static": "proas", "arg_teacher": "none", "arg_distill": "proas",
}
EXPECTED_GRAPH = {  # build-graph variant before training
    "grpo_proas": "oracle", "dapo_proas": "oracle", "gigpo_proas": "oracle", "migpo": "oracle",
    "progress_reward": "oracle", "no_mui": "oracle", "no_apr": "oracle", "mask_pm": "oracle",
    "suffix": "oracle", "arg_random": "oracle", "arg_static": "oracle", "arg_incomplete": "incomplete",
    "arg_incomplete_static": "incomplete", "arg_distill": "distill",
}


def test_the_rows_are_the_papers_tables():
    assert set(launch.ROWS) == set(EXPECTED_ESTIMATOR) | {"sft"}


@pytest.mark.parametrize("row", sorted(EXPECTED_ESTIMATOR))
@pytest.mark.parametrize("env", ["household", "shop"])
def test_dry_run_of_every_rl_row(row, env):
    text = dry_run(row, "--env", env, "--size", "1.5b", "--seed", "2")
    args = trainer_args(text)
    adv, estimator = EXPECTED_ESTIMATOR[row]
    assert args["algorithm.adv_estimator"] == adv
    assert args["env.env_name"] == f"proas/{env}"
    assert args["env.seed"] == "2"
    assert args["env.max_steps"] == {"household": "50", "shop": "15"}[env]
    assert args["actor_rollout_ref.model.path"] == "Qwen/Qwen2.5-1.5B-Instruct"
    assert args["actor_rollout_ref.actor.invalid_action_penalty_coef"] == "0.1"
    assert args["trainer.default_local_dir"] == f"/runs/{env}/{row}/1.5b/seed2"
    if adv == "gae":  # PPO: one rollout of 128 tasks, a critic
        assert args["data.train_batch_size"] == "128" and "env.rollout.n" not in args
        assert args["critic.model.path"] == "Qwen/Qwen2.5-1.5B-Instruct"
        # verl-agent's PPO scripts: actor / critic micro batches 16 / 16 (ALFWorld), 8 / 4 (WebShop)
        assert (args["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"],
                args["critic.ppo_micro_batch_size_per_gpu"]) == {"household": ("16", "16"), "shop": ("8", "4")}[env]
    else:  # verl-agent's 16 tasks x 8 rollouts
        assert args["data.train_batch_size"] == "16" and args["env.rollout.n"] == "8"
    if row.startswith("dapo"):
        assert args["algorithm.filter_groups.enable"] == "True"
        assert args["actor_rollout_ref.actor.clip_ratio_high"] == "0.28"
    if adv == "gigpo":
        assert args["algorithm.gamma"] == "0.95"
        assert args["algorithm.gigpo.mode"] == {"household": "mean_std_norm", "shop": "mean_norm"}[env]
    cfg = resolved(text)
    if estimator is None:
        assert "proas.enable" not in args and cfg is None
        assert "# proas: off" in text
        return
    assert args["proas.enable"] == "True" and args["proas.seed"] == "2"
    assert cfg["estimator"] == estimator
    assert cfg["shaping"] == EXPECTED_SHAPING[row]
    assert cfg["estimator_options"]["group_stats"] == "steps"
    assert cfg["invalid_action_penalty"] == 0.1
    assert cfg["rea"] == "transition" and cfg["base"] == "proas"
    assert cfg["columns"] == {"error": "env_error"}
    assert cfg["evolve"] is (row not in ("arg_static", "arg_incomplete_static"))
    if estimator == "gigpo":
        assert cfg["estimator_options"] == {
            "group_stats": "steps", "gamma": 0.95, "step_weight": 1.0,
            "mode": {"household": "mean_std_norm", "shop": "mean_norm"}[env],
        }
    graph = EXPECTED_GRAPH.get(row)
    builds = re.findall(r"proas verl build-graph .*?--variant (\w+)", text.replace(" \\\n    ", " "))
    if graph is None:
        assert builds == [] and "graph" not in cfg  # the teacher grows its graph from nothing
    else:
        assert builds == [graph]
        assert cfg["graph"] == args["proas.graph"]
        if graph == "oracle":
            assert cfg["graph"] == f"/runs/{env}/graphs/oracle.json.gz"
        elif graph == "incomplete":  # pruned with the run's seed
            assert cfg["graph"] == f"/runs/{env}/graphs/incomplete_seed2.json.gz"
            assert "--seed 2" in text.replace(" \\\n    ", " ")
        else:  # the teacher's last checkpoint's graph
            assert f"/runs/{env}/arg_teacher/1.5b/seed2/global_step_150/proas/graph.json.gz" in text


@pytest.mark.parametrize("size,model,gpus", [("1.5b", "Qwen/Qwen2.5-1.5B-Instruct", "2"),
                                             ("7b", "Qwen/Qwen2.5-7B-Instruct", "4")])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dry_run_by_size_and_seed(size, model, gpus, seed):
    args = trainer_args(dry_run("gigpo_proas", "--size", size, "--seed", str(seed)))
    assert args["actor_rollout_ref.model.path"] == model
    assert args["trainer.n_gpus_per_node"] == gpus
    assert args["env.seed"] == args["proas.seed"] == str(seed)
    assert args["trainer.experiment_name"] == f"gigpo_proas_{size}_seed{seed}"


@pytest.mark.parametrize("env", ["household", "shop"])
def test_dry_run_of_sft_builds_the_data_then_runs_verls_sft_trainer(env):
    text = dry_run("sft", "--env", env, "--size", "7b").replace(" \\\n    ", " ")
    assert f"proas verl sft-data --env {env} --out /runs/{env}/sft_data.parquet" in text
    assert "-m verl.trainer.fsdp_sft_trainer" in text and "--nproc_per_node=4" in text
    assert "model.partial_pretrain=Qwen/Qwen2.5-7B-Instruct" in text
    assert "data.prompt_key=prompt data.response_key=response" in text


def test_extra_overrides_reach_the_trainer_and_the_resolved_config():
    text = dry_run("gigpo_proas", "--", "proas.rea=node", "algorithm.gigpo.step_advantage_w=0.5")
    assert trainer_args(text)["proas.rea"] == "node"
    cfg = resolved(text)
    assert cfg["rea"] == "node" and cfg["estimator_options"]["step_weight"] == 0.5
    with pytest.raises(ProasError, match="unknown shaping"):
        dry_run("grpo_proas", "--", "proas.shaping=sideways")


def test_ppo_proas_says_it_is_ppos_run():
    text = dry_run("ppo_proas")
    assert "the same run as ppo" in text and "proas.enable" not in text


def test_the_dry_run_cd_line_pastes_into_a_shell(monkeypatch):
    monkeypatch.delenv("VERL_AGENT_DIR", raising=False)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert launch.main(["grpo", "--dry-run"]) == 0
    assert buf.getvalue().splitlines()[1] == 'cd "$VERL_AGENT_DIR"'  # double quotes: the shell expands it
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert launch.main(["grpo", "--dry-run", "--verl-agent", "/opt/verl agent"]) == 0
    assert buf.getvalue().splitlines()[1] == "cd '/opt/verl agent'"


def test_the_launcher_without_proas_says_so_in_one_line(tmp_path):
    """``python -I -S``: no site-packages, so neither proas nor omegaconf is importable."""
    import subprocess

    run = [sys.executable, "-I", "-S", str(RECIPE / "launch.py"), "grpo_proas"]
    proc = subprocess.run([*run, "--verl-agent", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "proas is not installed in this Python" in proc.stderr
    proc = subprocess.run([*run, "--dry-run"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert "-m verl.trainer.main_ppo" in proc.stdout.replace(" \\\n    ", " ")
    assert proc.stdout.rstrip().splitlines()[-1].startswith("# proas config not resolved: proas is not installed")


def test_a_real_launch_needs_the_checkout(monkeypatch, capsys):
    monkeypatch.delenv("VERL_AGENT_DIR", raising=False)
    with pytest.raises(SystemExit):
        launch.main(["grpo"])
    assert "--verl-agent DIR" in capsys.readouterr().err


# ---------------------------------------------------------------------- the patch and the config
def patch_files() -> dict[str, list[str]]:
    """Added lines of the patch, by file."""
    out: dict[str, list[str]] = {}
    current = None
    for line in (RECIPE / "verl-agent.patch").read_text(encoding="utf-8").splitlines():
        if line.startswith("+++ b/"):
            current = line[6:]
            out[current] = []
        elif current and line.startswith("+") and not line.startswith("+++"):
            out[current].append(line[1:])
    return out


def test_the_patch_touches_the_five_places_and_calls_proas():
    added = patch_files()
    assert set(added) == {
        "agent_system/environments/env_manager.py",
        "agent_system/multi_turn_rollout/rollout_loop.py",
        "verl/trainer/main_ppo.py",
        "verl/trainer/ppo/ray_trainer.py",
        "verl/trainer/config/ppo_trainer.yaml",
    }
    # the start-up check runs in main() before run_ppo (before Ray starts)
    main = [ln.strip() for ln in added["verl/trainer/main_ppo.py"]]
    assert main[-1] == "check_config(config)"
    trainer = "\n".join(added["verl/trainer/ppo/ray_trainer.py"])
    for needed in ("trainer_credit(config, envs=(envs, val_envs))", "self.proas.reshape(batch)",
                   "self.proas.save_checkpoint(", "self.proas.load_checkpoint(global_step_folder)"):
        assert needed in trainer
    assert "rollout_columns(infos)" in "\n".join(added["agent_system/multi_turn_rollout/rollout_loop.py"])
    # verl-agent's make_envs rebound, wrapped: the last added line of env_manager.py
    assert added["agent_system/environments/env_manager.py"][-1] == "make_envs = with_proas_envs(make_envs)"


def test_the_proas_step_comes_right_after_compute_advantage_in_the_patch():
    text = (RECIPE / "verl-agent.patch").read_text(encoding="utf-8")
    hunk = text[text.index("gigpo_similarity_thresh=self.config.algorithm.gigpo.similarity_thresh"):]
    lines = [ln for ln in hunk.splitlines()[1:6]]
    # the call's closing parenthesis (context), then the added ProAS step, before anything else
    assert lines[0].strip() == ")"
    assert [ln[0] for ln in lines[1:4]] == ["+", "+", "+"]
    assert "self.proas.reshape(batch)" in lines[3]


def test_the_patchs_config_section_is_proas_yaml():
    added = patch_files()["verl/trainer/config/ppo_trainer.yaml"]
    assert "\n".join(added).strip() == (RECIPE / "proas.yaml").read_text(encoding="utf-8").strip()


def verl_agent_config(**proas):
    base = OmegaConf.load(RECIPE / "proas.yaml")
    base.merge_with({
        "algorithm": {"adv_estimator": "gigpo", "gamma": 0.95, "norm_adv_by_std_in_grpo": True,
                      "gigpo": {"mode": "mean_std_norm", "step_advantage_w": 1.0}},
        "actor_rollout_ref": {"actor": {"use_invalid_action_penalty": True, "invalid_action_penalty_coef": 0.1}},
        "env": {"env_name": "proas/household", "seed": 3, "max_steps": 7, "history_length": 1,
                "rollout": {"n": 4}},
        "data": {"train_batch_size": 2, "val_batch_size": 3},
    })
    base.merge_with({"proas": proas})
    return base


def test_the_config_is_off_by_default_and_follows_verl_agents_settings_when_on():
    assert trainer_credit(verl_agent_config()) is None
    credit = trainer_credit(verl_agent_config(enable=True))
    assert credit.estimator == "gigpo"
    assert credit.estimator_options == {"group_stats": "steps", "gamma": 0.95, "mode": "mean_std_norm",
                                        "step_weight": 1.0}
    assert credit.invalid_action_penalty == 0.1 and credit.rea == "transition" and credit.evolve
    assert credit.columns.error == "env_error" and credit.graph.num_nodes == 0
    # verl-agent's switch turns the penalty off; explicit values win over verl-agent's
    cfg = verl_agent_config(enable=True)
    cfg.actor_rollout_ref.actor.use_invalid_action_penalty = False
    assert trainer_credit(cfg).invalid_action_penalty == 0.0
    cfg = verl_agent_config(enable=True, invalid_action_penalty=0.3, estimator="grpo")
    cfg.algorithm.norm_adv_by_std_in_grpo = False
    credit = trainer_credit(cfg)
    assert credit.invalid_action_penalty == 0.3
    assert credit.estimator_options == {"group_stats": "steps", "norm_by_std": False}
    cfg = verl_agent_config(enable=True)
    cfg.algorithm.adv_estimator = "gae"
    with pytest.raises(ProasError, match="no ProAS counterpart"):
        proas_settings(cfg)


def test_the_config_loads_the_graph_it_names(tmp_path):
    g = build_graph("household", tasks=5)
    g.save(tmp_path / "arg.json.gz")
    credit = trainer_credit(verl_agent_config(enable=True, graph=str(tmp_path / "arg.json.gz")))
    assert credit.graph.num_edges == g.num_edges > 0


def test_checkpoints_keep_the_envs_task_draws_so_a_resume_draws_what_the_run_would_have(tmp_path):
    cfg = verl_agent_config(enable=True)
    envs, val_envs = make_envs(cfg)
    credit = trainer_credit(cfg, envs=(envs, val_envs))
    assert credit.envs == [envs, val_envs]
    envs.reset()
    val_envs.reset()
    credit.save_checkpoint(tmp_path / "global_step_1")
    after = [envs.reset()[0]["text"] for _ in range(2)], val_envs.reset()[0]["text"]
    # a fresh trainer (same seeds, so it would redraw the first batch) resumes from the checkpoint
    envs2, val_envs2 = make_envs(cfg)
    fresh = trainer_credit(cfg, envs=(envs2, val_envs2))
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("1")
    assert fresh.resume(tmp_path) == 1
    assert ([envs2.reset()[0]["text"] for _ in range(2)], val_envs2.reset()[0]["text"]) == after
    # without the restore the same seeds give the first batch again, not the next one
    envs3, _ = make_envs(cfg)
    assert envs3.reset()[0]["text"] != after[0][0]
    # a checkpoint with another number of envs, or a bad generator state, is refused
    other = trainer_credit(cfg, envs=(envs2,))
    with pytest.raises(ProasError, match="2 env draw states for 1 attached envs"):
        other.load_checkpoint(tmp_path / "global_step_1")
    with pytest.raises(ProasError, match="expected the 'rng' of a PCG64"):
        envs2.load_state_dict({"rng": {"bit_generator": "MT19937"}})


# ---------------------------------------------------------------------- envs and columns
def test_make_envs_builds_proas_envs_for_proas_names_only():
    cfg = verl_agent_config()
    envs, val_envs = make_envs(cfg)
    assert isinstance(envs, ProasEnvManager) and envs.group_n == 4 and envs.env_num == 2
    assert val_envs.group_n == 1 and val_envs.env_num == 3 and envs.history_length == 1
    obs, infos = envs.reset()  # verl-agent's call: tasks drawn from the training split
    assert len(obs["text"]) == 8 and len(infos) == 8
    assert envs.envs[0].max_steps == 7
    assert len({infos[k]["abstract_state"] for k in range(0, 8, 4)}) >= 1
    cfg.env.env_name = "alfworld/AlfredTWEnv"
    assert make_envs(cfg) is None
    cfg.env.env_name = "proas/shop"
    shop, _ = make_envs(cfg)
    obs, _ = shop.reset()
    assert len(obs["text"]) == 8


def test_rollout_columns_only_for_proas_rows():
    assert rollout_columns([{"is_action_valid": True}, {}]) == {}
    manager = ProasEnvManager(lambda: __import__("proas.envs.household", fromlist=["x"]).make_household_env(),
                              group_n=2)
    manager.reset(["train-pick-0000"])
    _, _, _, infos = manager.step(["<think>x</think><action>look</action>", "no tags"])
    cols = rollout_columns(infos)
    assert cols["step_index"].tolist() == [0, 0]
    assert cols["env_error"].tolist()[1] is True  # the untagged answer
    assert cols["action"].tolist() == ["look", "no tags"]


# ---------------------------------------------------------------------- graphs and SFT data
def test_build_graph_cli_oracle_incomplete_and_distill(tmp_path, capsys):
    oracle, pruned = tmp_path / "oracle.json.gz", tmp_path / "incomplete.json.gz"
    assert proas_main(["verl", "build-graph", "--env", "household", "--tasks", "40", "--out", str(oracle)]) == 0
    assert "oracle graph of household" in capsys.readouterr().out
    assert proas_main(["verl", "build-graph", "--env", "household", "--tasks", "40", "--variant", "incomplete",
                       "--seed", "1", "--out", str(pruned)]) == 0
    full, cut = ReferenceGraph.load(oracle), ReferenceGraph.load(pruned)
    assert full.meta["built_from"] == 40 and cut.meta["prune"] == 0.4
    assert 0 < cut.num_edges < full.num_edges
    # the same seed prunes the same pairs; another seed others
    again = build_graph("household", "incomplete", tasks=40, seed=1)
    other = build_graph("household", "incomplete", tasks=40, seed=2)
    assert sorted(again.edges()) == sorted(cut.edges())
    assert sorted(other.edges()) != sorted(cut.edges())
    # distill: from a saved graph (a teacher's checkpoint) or a teacher's trajectory log
    out = tmp_path / "distill.json.gz"
    assert proas_main(["verl", "build-graph", "--env", "household", "--variant", "distill",
                       "--from", str(oracle), "--out", str(out)]) == 0
    assert ReferenceGraph.load(out).num_edges == full.num_edges
    assert proas_main(["verl", "build-graph", "--env", "household", "--variant", "distill", "--out", str(out)]) == 2
    assert "needs --from" in capsys.readouterr().err


@pytest.mark.parametrize("source", ["an empty JSONL", "failures only", "an empty graph"])
def test_distill_from_nothing_to_distil_is_one_line_and_writes_nothing(tmp_path, capsys, source):
    """As the oracle variant refuses a graph of no walkthroughs. *Found:* a teacher log of no
    successes (or an empty file) was written as an empty ARG and offered with `use it with`."""
    from proas.types import Step, Trajectory

    src = tmp_path / ("teacher.jsonl" if "JSONL" in source or "failures" in source else "teacher.json")
    if source == "an empty JSONL":
        src.write_text("")
    elif source == "failures only":
        lost = Trajectory(group="g", trajectory="0", reward=0.0, steps=[Step(state="a", action="x", next_state="b")])
        src.write_text(json.dumps(lost.to_json()) + "\n")
    else:
        ReferenceGraph().save(src)
    out = tmp_path / "distill.json.gz"
    assert proas_main(["verl", "build-graph", "--env", "shop", "--variant", "distill", "--from", str(src),
                       "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"proas: error: {src}: ") and err.count("\n") == 1, err
    assert "no graph to distil" in err and not out.exists()


def test_oracle_graph_of_shop():
    g = build_graph("shop", tasks=10)
    assert g.num_edges > 0 and g.meta["built_from"] == 10 and g.meta["env"] == "shop"


def test_sft_data_replays_the_oracle_in_the_rl_prompt_format(tmp_path):
    rows = sft_examples("household", tasks=2)
    from proas.envs.household import make_household_env

    env = make_household_env()
    walk = [a for tid in ("train-pick-0000",) for a in env.oracle(tid)]
    first = [r for r in rows if r["task_id"] == "train-pick-0000"]
    assert [re.search(r"<action>(.*)</action>", r["response"]).group(1) for r in first] == walk
    assert all(r["response"].startswith("<think>") for r in rows)
    assert "Admissible actions:" in first[0]["prompt"] and "Your most recent" in first[1]["prompt"]
    out = tmp_path / "sft.jsonl"
    assert proas_main(["verl", "sft-data", "--env", "household", "--tasks", "2", "--out", str(out)]) == 0
    assert [json.loads(line) for line in out.read_text().splitlines()] == rows


@pytest.mark.parametrize("name", ["sft.txt", "sft.parquet"])
def test_sft_data_checks_its_format_before_the_oracle_walk(tmp_path, capsys, monkeypatch, name):
    """*Found:* any --out but .jsonl was taken for parquet, and a missing pyarrow was found
    only after the oracle's walk (22 s on household)."""
    import proas.integrations.verl.verl_agent as verl_agent

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as without verl: importing it fails
    monkeypatch.setattr(verl_agent, "sft_examples", lambda *a, **k: pytest.fail("walked the oracle first"))
    assert proas_main(["verl", "sft-data", "--env", "household", "--out", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert ("give a .parquet" if name.endswith(".txt") else "writing parquet needs pyarrow") in err
    assert not list(tmp_path.iterdir())


def test_from_config_refuses_a_null_estimator_and_defaults_a_null_penalty():
    from proas.integrations.verl import ProASCredit

    with pytest.raises(ProasError, match="trainer_credit"):
        ProASCredit.from_config({"estimator": None})
    assert ProASCredit.from_config({"invalid_action_penalty": None}).invalid_action_penalty == 0.1
