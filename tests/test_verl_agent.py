"""The verl-agent recipe against verl-agent's own code (a checkout at commit 796ed31).

Needs ``VERL_AGENT_DIR`` (the checkout, unpatched or patched with the recipe) and the verl venv
(.ci/verl_env.sh, which also installs ``openai``: verl-agent's ray_trainer module imports it);
skipped otherwise. verl-agent's ``verl`` package is a fork that would shadow the PyPI verl the
other verl tests import, so its code runs in a subprocess (tests/verl_agent_check.py) on a
rollout recorded from proas's household env (tests/data/verl_agent_rollout.json.gz).
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

REPO = Path(__file__).resolve().parents[1]
PATCH = REPO / "recipes" / "verl_agent" / "verl-agent.patch"
CHECKOUT = Path(VERL_AGENT_DIR)
TOUCHED = [
    "agent_system/environments/env_manager.py",
    "agent_system/multi_turn_rollout/rollout_loop.py",
    "verl/trainer/ppo/ray_trainer.py",
    "verl/trainer/config/ppo_trainer.yaml",
]

pytestmark = pytest.mark.verl


def git_apply(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "apply", *args, str(PATCH)], cwd=cwd, capture_output=True, text=True)


def test_the_patch_applies_cleanly(tmp_path):
    forward = git_apply("--check", cwd=CHECKOUT)
    if forward.returncode != 0:
        # a checkout the recipe was already applied to: the patch must come off exactly
        back = git_apply("--check", "--reverse", cwd=CHECKOUT)
        assert back.returncode == 0, f"the patch neither applies nor is applied:\n{forward.stderr}\n{back.stderr}"
        pytest.skip("the checkout is already patched (the patch reverses cleanly)")
    # apply it to a copy of the four files, which must then compile and load
    for rel in TOUCHED:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(CHECKOUT / rel, tmp_path / rel)
    done = git_apply("--verbose", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("Applied patch") == len(TOUCHED)
    for rel in TOUCHED[:3]:
        py_compile.compile(str(tmp_path / rel), doraise=True)
    assert_proas_step_follows_compute_advantage((tmp_path / TOUCHED[2]).read_text(encoding="utf-8"))
    cfg = OmegaConf.load(tmp_path / TOUCHED[3])
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


def patched_copy(dest: Path) -> Path:
    """verl-agent's Python packages with the patch applied, without copying its env packages'
    data (linked instead)."""
    shutil.copytree(CHECKOUT / "verl", dest / "verl")
    shutil.copytree(CHECKOUT / "gigpo", dest / "gigpo")
    envs = Path("agent_system") / "environments"
    shutil.copytree(CHECKOUT / "agent_system", dest / "agent_system",
                    ignore=lambda d, names: ["env_package"] if Path(d) == CHECKOUT / envs else [])
    (dest / envs / "env_package").symlink_to(CHECKOUT / envs / "env_package")
    if git_apply("--check", cwd=dest).returncode != 0:
        pytest.skip("the checkout is already patched; the round trip runs on an unpatched one")
    done = git_apply(cwd=dest)
    assert done.returncode == 0, done.stderr
    return dest


def test_the_patched_trainer_saves_the_graph_with_its_checkpoint_and_restores_it_on_resume(tmp_path):
    copy = patched_copy(tmp_path / "verl-agent")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(copy), str(REPO / "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "verl_agent_check.py"), "--checkpoint",
                           str(tmp_path / "run")], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["saved"] == ["graph.json.gz", "state.json"]
    assert out["auto"] == [4, 4, True] and out["resume_path"] == [4, 4, True]
    assert out["disable"] == [0, 0]  # resume_mode disable: a fresh graph
    assert out["actor_calls"] == ["load"]


@pytest.fixture(scope="module")
def results():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(CHECKOUT), str(REPO / "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "verl_agent_check.py"),
         str(REPO / "tests" / "data" / "verl_agent_rollout.json.gz")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(out["verl"]).resolve().is_relative_to(CHECKOUT.resolve())  # verl-agent's verl, not PyPI's
    return out


def test_with_shaping_none_proas_gives_verl_agents_own_advantages_penalty_included(results):
    rows = results["verl_agent_parity"]
    assert [(r["estimator"], r["mode"]) for r in rows] == [
        ("grpo", "mean_norm"), ("dapo", "mean_norm"), ("gigpo", "mean_norm"), ("gigpo", "mean_std_norm")]
    for r in rows:
        assert r["max_abs_diff"] < 1e-4, r  # float32 sums in verl-agent, float64 in proas
        assert r["invalid_rows"] > 0 and r["nonzero"] > 0, r  # the penalty was in play
    # DAPO's dynamic sampling dropped the groups whose rewards were all equal
    assert rows[1]["rows"] < rows[0]["rows"]


def test_the_proas_step_equals_compute_credit_for_every_estimator_and_shaping(results):
    rows = results["credit_parity"]
    assert len(rows) == 4 * len(SHAPINGS)
    for r in rows:
        assert r["pad"] > 0, r  # verl-agent's adjust_batch added copies
        assert r["max_abs_diff"] < 1e-5, r
        assert r["changed"] is (r["shaping"] != "none"), r
