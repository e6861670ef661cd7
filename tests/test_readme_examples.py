"""The README's credit examples run as written (issue #27, item 12): its shell block makes
every file it names from what the repository ships, and every Python block that needs no verl
runs after it, in a fresh directory beside a checkout (``src/`` as in a clone)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from proas.credit import ReferenceGraph, compute_credit, read_trajectories

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DEMO = ROOT / "src" / "proas" / "data" / "examples" / "household_demo.jsonl"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def _credit_shell_block() -> str:
    blocks = [b for b in _blocks("bash") if "proas credit " in b]
    assert len(blocks) == 1
    return blocks[0]


def _clone_like(tmp_path: Path) -> dict:
    """A directory that looks like a fresh clone's root to the examples, and an environment
    whose ``proas`` and ``python`` are this checkout's."""
    (tmp_path / "src").symlink_to(ROOT / "src")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    if shutil.which("proas") is None:  # not installed: a stand-in that runs this checkout
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "proas").write_text(f'#!/bin/sh\nexec {sys.executable} -m proas "$@"\n')
        (bin_dir / "proas").chmod(0o755)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def test_the_credit_example_names_only_files_it_makes_or_the_repo_ships(tmp_path):
    block = _credit_shell_block()
    made = set(re.findall(r">\s*(\S+)", block))
    named = set(re.findall(r"--(?:trajectories|build-from|graph)\s+(\S+)", block))
    for name in named - made:
        assert (ROOT / name).is_file(), f"the README's credit example reads {name}, which nothing makes"
    for name in re.findall(r"(src/\S+)", block):
        assert (ROOT / name).is_file(), name


def test_the_credit_shell_and_python_examples_run_as_written(tmp_path):
    env = _clone_like(tmp_path)
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", _credit_shell_block()], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(x) for x in (tmp_path / "credit.jsonl").read_text().splitlines()]
    assert rows and {"rea", "pa", "fd", "base_advantage", "advantage"} <= set(rows[0])
    assert (tmp_path / "arg.json.gz").is_file()
    python = [b for b in _blocks("python") if "integrations.verl" not in b]
    assert python
    for block in python:
        code = block + "\nassert len(res.advantage) == sum(len(t.steps) for t in batch)\n"
        out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr


def test_the_credit_api_takes_json_records_as_it_takes_trajectories():
    trajs = read_trajectories(DEMO)
    records = [json.loads(line) for line in DEMO.read_text().splitlines() if line.strip()]
    oracle = [t for t in trajs if t.group == "oracle"]
    batch = [t for t in trajs if t.group != "oracle"]
    a = compute_credit(batch, ReferenceGraph.from_trajectories(oracle), estimator="gigpo", evolve=True)
    b = compute_credit([r for r in records if r["group"] != "oracle"],
                       ReferenceGraph.from_trajectories([r for r in records if r["group"] == "oracle"]),
                       estimator="gigpo", evolve=True)
    assert a.advantage.tolist() == b.advantage.tolist() and a.rea.tolist() == b.rea.tolist()
    with pytest.raises(ValueError, match="trajectory 0: missing field 'steps'"):
        compute_credit([{"group": "g", "trajectory": "t", "reward": 1.0}], ReferenceGraph())
