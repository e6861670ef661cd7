"""The verl-agent recipe against verl-agent's own code (a checkout at commit 796ed31).

Needs ``VERL_AGENT_DIR`` (the checkout, unpatched or patched with the recipe: the tests run the
same on both) and the verl venv (.ci/verl_env.sh, which also installs ``openai``, which
verl-agent's ray_trainer module imports, and what proas's shop and household envs need);
skipped otherwise. verl-agent's ``verl`` package is a fork that would shadow the PyPI verl the
other verl tests import, so its code runs in a subprocess (tests/verl_agent_check.py): its
rollout loop (``TrajectoryCollector``) with a scripted model on proas's envs, its advantage
code, its trainer's checkpoint methods and its ``main_ppo``.
"""

from __future__ import annotations

import ast
import json
import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

VERL_AGENT_DIR = os.environ.get("VERL_AGENT_DIR")
if not VERL_AGENT_DIR:
    pytest.skip("VERL_AGENT_DIR is unset: point it at a verl-agent checkout at commit 796ed31 "
                "(docs/verl.md) to test the recipe against verl-agent's code", allow_module_level=True)

from omegaconf import OmegaConf  # noqa: E402

from proas.credit import SHAPINGS  # noqa: E402
from proas.integrations.verl.verl_agent import VERL_AGENT_COMMIT  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PATCH = REPO / "recipes" / "verl_agent" / "verl-agent.patch"
CHECKOUT = Path(VERL_AGENT_DIR)
TOUCHED = [
    "agent_system/environments/env_manager.py",
    "agent_system/multi_turn_rollout/rollout_loop.py",
    "verl/trainer/main_ppo.py",
    "verl/trainer/ppo/ray_trainer.py",
    "verl/trainer/config/ppo_trainer.yaml",
]

pytestmark = pytest.mark.verl


def git_apply(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "apply", *args, str(PATCH)], cwd=cwd, capture_output=True, text=True)


def already_patched() -> bool:
    """The checkout carries exactly the recipe's patch (it reverses cleanly), or none of it."""
    if git_apply("--check", cwd=CHECKOUT).returncode == 0:
        return False
    back = git_apply("--check", "--reverse", cwd=CHECKOUT)
    assert back.returncode == 0, f"the patch neither applies to {CHECKOUT} nor is applied there:\n{back.stderr}"
    return True


def test_the_checkout_is_the_pinned_commit():
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=CHECKOUT, capture_output=True, text=True)
    assert head.returncode == 0, f"{CHECKOUT} is not a git checkout: {head.stderr}"
    assert head.stdout.strip() == VERL_AGENT_COMMIT, (
        f"{CHECKOUT} is at {head.stdout.strip()}, the recipe is for {VERL_AGENT_COMMIT}: "
        f"git checkout {VERL_AGENT_COMMIT}")
    assert VERL_AGENT_COMMIT in PATCH.read_text(encoding="utf-8").split("diff --git", 1)[0]


def test_the_patch_applies_cleanly(tmp_path):
    # a copy of the five files as verl-agent has them (a patched checkout's with the patch taken off)
    for rel in TOUCHED:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(CHECKOUT / rel, tmp_path / rel)
    if already_patched():
        back = git_apply("--reverse", cwd=tmp_path)
        assert back.returncode == 0, back.stderr
    done = git_apply("--verbose", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("Applied patch") == len(TOUCHED)
    for rel in TOUCHED[:4]:
        py_compile.compile(str(tmp_path / rel), doraise=True)
    assert_proas_step_follows_compute_advantage((tmp_path / TOUCHED[3]).read_text(encoding="utf-8"))
    cfg = OmegaConf.load(tmp_path / TOUCHED[4])
    assert cfg.proas.enable is False and cfg.proas.estimator_options.group_stats == "steps"
    assert cfg.actor_rollout_ref.actor.invalid_action_penalty_coef == 0.1  # verl-agent's own, untouched


def assert_proas_step_follows_compute_advantage(source: str) -> None:
    """In the patched ``RayPPOTrainer.fit``, the statement after ``batch = compute_advantage(...)``
    is the ProAS step, and it reshapes that same ``batch``."""
    tree = ast.parse(source)
    fit = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "fit")
    found = 0
    for node in ast.walk(fit):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if not isinstance(stmts, list):
                continue
            for k, stmt in enumerate(stmts):
                if (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)
                        and getattr(stmt.value.func, "id", None) == "compute_advantage"):
                    found += 1
                    nxt = stmts[k + 1]
                    assert isinstance(nxt, ast.If) and "self.proas" in ast.unparse(nxt.test)
                    assert "self.proas.reshape(batch)" in ast.unparse(nxt.body[0])
    assert found == 1


def test_the_device_runs_sdpa_patch_applies_and_reads_the_switch(tmp_path):
    """recipes/verl_agent/device/sdpa.patch (the one-GPU run only): verl-agent's three hard-coded
    flash_attention_2 become $PROAS_ATTN_IMPLEMENTATION, flash_attention_2 when unset."""
    rel = "verl/workers/fsdp_workers.py"
    (tmp_path / rel).parent.mkdir(parents=True)
    shutil.copy(CHECKOUT / rel, tmp_path / rel)
    sdpa = REPO / "recipes" / "verl_agent" / "device" / "sdpa.patch"
    done = subprocess.run(["git", "apply", str(sdpa)], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / rel).read_text(encoding="utf-8")
    py_compile.compile(str(tmp_path / rel), doraise=True)
    assert 'attn_implementation="flash_attention_2"' not in text
    assert text.count('os.environ.get("PROAS_ATTN_IMPLEMENTATION", "flash_attention_2")') == 3


def test_the_device_runs_resume_check_patch_applies_where_the_checkpoint_is_loaded(tmp_path):
    """recipes/verl_agent/device/resume_check.patch: with PROAS_RESUME_CHECK set, verl-agent's FSDP
    checkpoint manager compares the model's state with the loaded file right after loading it."""
    rel = "verl/utils/checkpoint/fsdp_checkpoint_manager.py"
    (tmp_path / rel).parent.mkdir(parents=True)
    shutil.copy(CHECKOUT / rel, tmp_path / rel)
    if "PROAS_RESUME_CHECK" in (tmp_path / rel).read_text(encoding="utf-8"):
        pytest.skip("the checkout's copy already carries the resume check")
    patch = REPO / "recipes" / "verl_agent" / "device" / "resume_check.patch"
    done = subprocess.run(["git", "apply", str(patch)], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / rel).read_text(encoding="utf-8")
    py_compile.compile(str(tmp_path / rel), doraise=True)
    load = text.index("self.model.load_state_dict(model_state_dict)")
    check = text.index("check_loaded(self.model.state_dict(), model_state_dict, self.rank)")
    assert load < check < text.index("self.optimizer.load_state_dict(optimizer_state_dict)")


def test_the_device_runs_patches_apply_in_order_and_leave_no_auto_model_for_vision2seq(tmp_path):
    """copy_verl_agent.sh's order: sdpa.patch, resume_check.patch, then transformers5.patch, which
    swaps the AutoModelForVision2Seq that transformers 5 removed for AutoModelForImageTextToText."""
    rels = ["verl/workers/fsdp_workers.py", "verl/utils/checkpoint/fsdp_checkpoint_manager.py"]
    if "PROAS_ATTN_IMPLEMENTATION" in (CHECKOUT / rels[0]).read_text(encoding="utf-8"):
        pytest.skip("the checkout is the device copy already")
    for rel in rels:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(CHECKOUT / rel, tmp_path / rel)
    for name in ("sdpa.patch", "resume_check.patch", "transformers5.patch"):
        done = subprocess.run(["git", "apply", str(REPO / "recipes" / "verl_agent" / "device" / name)],
                              cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, (name, done.stderr)
    for rel in rels:
        text = (tmp_path / rel).read_text(encoding="utf-8")
        py_compile.compile(str(tmp_path / rel), doraise=True)
        assert "AutoModelForVision2Seq" not in text and "AutoModelForImageTextToText" in text


@pytest.fixture(scope="module")
def patched(tmp_path_factory) -> Path:
    """A verl-agent tree with the recipe applied: the checkout itself when it is patched already,
    else a copy of its Python packages (its env packages' data linked, not copied) patched here."""
    if already_patched():
        return CHECKOUT
    dest = tmp_path_factory.mktemp("verl-agent")
    shutil.copytree(CHECKOUT / "verl", dest / "verl")
    shutil.copytree(CHECKOUT / "gigpo", dest / "gigpo")
    envs = Path("agent_system") / "environments"
    shutil.copytree(CHECKOUT / "agent_system", dest / "agent_system",
                    ignore=lambda d, names: ["env_package"] if Path(d) == CHECKOUT / envs else [])
    (dest / envs / "env_package").symlink_to(CHECKOUT / envs / "env_package")
    done = git_apply(cwd=dest)
    assert done.returncode == 0, done.stderr
    return dest


def run_check(patched: Path, *args: str, timeout: int = 900) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(patched), str(REPO / "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "verl_agent_check.py"), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_the_patched_trainer_saves_the_graph_with_its_checkpoint_and_restores_it_on_resume(patched, tmp_path):
    out = run_check(patched, "--checkpoint", str(tmp_path / "run"))
    assert out["saved"] == ["graph.json.gz", "state.json"]
    assert out["auto"] == [4, 4, True] and out["resume_path"] == [4, 4, True]
    assert out["disable"] == [0, 0]  # resume_mode disable: a fresh graph
    assert out["actor_calls"] == ["load"]


def test_main_ppo_refuses_an_env_without_states_before_ray_starts(patched):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(patched), str(REPO / "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", "env.env_name=sokoban", "proas.enable=True"],
                          cwd=patched, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("proas: proas.enable=True, but env.env_name='sokoban'")
    assert "Traceback" not in proc.stderr and "ray init" not in proc.stdout


@pytest.fixture(scope="module")
def sft(patched):
    return run_check(patched, "--sft")


def test_sft_data_prompts_are_verl_agents_alfworld_templates(sft):
    assert sft["tasks"] == 6 and sft["rows"] > 6
    assert sft["first_is_no_history_template"] and sft["later_are_history_template"], sft


def test_sft_data_prompts_are_what_alfredtwenv_shows_the_policy_on_the_exported_games(sft):
    if sft["alfworld_same_prompts"] is None:
        pytest.skip("TextWorld is not installed in this interpreter (the main one has it, with the alfworld extra)")
    # every step of the 6 tasks, one of each type, prompt for prompt; the rows' actions win each game
    assert sft["alfworld_same_prompts"] == [sft["rows"], sft["rows"]]
    assert sft["alfworld_won"] == [6, 6]


def test_sft_rows_tokens_and_targets_are_verls_sft_datasets(sft):
    if sft["sft_dataset_same_tokens"] is None:
        pytest.skip("verl's SFT dataset needs pandas and pyarrow (the verl venv has them)")
    assert sft["sft_dataset_same_tokens"] == [sft["rows"], sft["rows"]]


@pytest.fixture(scope="module")
def loops(patched):
    return run_check(patched, "--loop")["loops"]


def test_verl_agents_rollout_loop_plays_proas_envs_behind_its_own_managers(loops):
    assert [(r["env"], r["manager"]) for r in loops] == [("proas/household", "AlfWorldEnvironmentManager"),
                                                        ("proas/shop", "WebshopEnvironmentManager")]
    for r in loops:
        # every row is one step the env manager returned, with the ProAS columns
        assert r["columns"] == ["abstract_state", "action", "env_error", "next_abstract_state", "step_index"], r
        assert r["rows"] == r["steps"] and r["rows_equal_recording"], r
        assert r["groups"] == 3 and r["trajectories"] == 12, r
        assert r["env_errors"] > r["invalid_format"] > 0, r  # detours and untagged answers were played
        # verl-agent's templates put the task in every prompt; the tokenizer's chat template wraps it
        assert r["task_in_every_prompt"] and r["chat_template_in_prompts"] and r["prompts_decoded"] > 0, r
    assert loops[0]["won"] > 0  # the oracle's moves win household tasks


@pytest.fixture(scope="module")
def results(patched):
    out = run_check(patched, "--parity", timeout=1800)
    assert Path(out["verl"]).resolve().is_relative_to(patched.resolve())  # verl-agent's verl, not PyPI's
    return out


def test_with_shaping_none_proas_gives_verl_agents_own_advantages_penalty_included(results):
    rows = results["verl_agent_parity"]
    assert [(r["estimator"], r["mode"]) for r in rows] == [
        ("grpo", "mean_norm"), ("dapo", "mean_norm"), ("gigpo", "mean_norm"), ("gigpo", "mean_std_norm")]
    for r in rows:
        assert r["max_abs_diff"] < 1e-4, r  # float32 sums in verl-agent, float64 in proas
        assert r["invalid_rows"] > 0 and r["nonzero"] > 0, r  # the penalty was in play
    assert rows[1]["rollouts"] > 1  # DAPO: the dynamic loop sampled again after dropping equal-reward groups


def test_the_proas_step_equals_compute_credit_for_every_estimator_and_shaping(results):
    rows = results["credit_parity"]
    assert len(rows) == 4 * len(SHAPINGS)
    for r in rows:
        assert r["pad"] > 0, r  # verl-agent's adjust_batch added copies
        assert r["max_abs_diff"] < 1e-5, r
        assert r["changed"] is (r["shaping"] != "none"), r


def test_the_device_runs_model_calls_pass_the_cpu_preflight(patched, tmp_path):
    """recipes/verl_agent/device/cpu_check.py: run.sh's overrides compose in verl-agent's config,
    and its HF rollout, log-prob and update run on a from-scratch model of proas's, as run.sh makes it."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(patched), str(REPO / "src"), env.get("PYTHONPATH", "")])
    proas = [sys.executable, "-m", "proas", "lm"]
    tok, model = str(tmp_path / "tok"), str(tmp_path / "model")
    for cmd in (["tokenizer", "--env", "household", "--vocab", "512", "--max-tasks", "20", "--out", tok],
                ["new-model", "--tokenizer", tok, "--size", "tiny", "--out", model]):
        made = subprocess.run(proas + cmd, env=env, capture_output=True, text=True, timeout=600)
        assert made.returncode == 0, made.stderr[-2000:]
    check = REPO / "recipes" / "verl_agent" / "device" / "cpu_check.py"
    proc = subprocess.run([sys.executable, str(check), "--model", model], cwd=patched, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[-1] == "cpu_check: ok" and any(s.startswith("update: ") and " moved" in s for s in lines)
