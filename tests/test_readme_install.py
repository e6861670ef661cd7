"""The README's install advice: what the main job needs of ALFWorld, checked in a subprocess
where the pieces the advice says are not needed cannot be imported."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

EPISODE = """
import sys
for name in {blocked!r}:
    sys.modules[name] = None  # as if not installed
from proas.envs.household import make_household_env
env = make_household_env()
env.reset("valid_seen-heat-0003")
for action in env.oracle("valid_seen-heat-0003"):
    obs, reward, terminated, truncated, info = env.step(action)
    done = terminated or truncated
print("won" if info["won"] else "lost")
"""


def _episode(tmp_path, blocked):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PROAS_HOUSEHOLD_CACHE=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, "-c", EPISODE.format(blocked=blocked)], capture_output=True, text=True,
                          env=env, timeout=300)


def test_readme_gives_the_install_time_and_the_no_planner_install():
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"about 11 minutes on a loaded 2-core machine, most of it building\s+`fast-downward-textworld`",
                     readme)
    assert "pip install -e . && pip install --no-deps alfworld==0.4.2 && proas train" in readme


def test_the_fast_household_env_needs_neither_textworld_nor_the_planner(tmp_path):
    pytest.importorskip("alfworld")
    out = _episode(tmp_path, ["textworld", "fast_downward", "tatsu", "jericho"])
    assert out.returncode == 0 and out.stdout.strip() == "won", out.stderr


def test_without_alfworld_the_generator_error_is_the_one_the_readme_quotes(tmp_path):
    out = _episode(tmp_path, ["alfworld"])
    assert out.returncode != 0
    quoted = re.search(r'stops with "([^"]+)"', (ROOT / "README.md").read_text().replace("\n", " ")).group(1)
    assert quoted in out.stderr


def test_without_alfworld_the_error_suggests_the_readmes_fast_install(tmp_path):
    """The generator's hint is the README's no-planner install (seconds), pinned as the extra
    is, not the `proas[alfworld]` extra that builds the planner for about 11 minutes."""
    readme = (ROOT / "README.md").read_text()
    fast = re.search(r"pip install -e \. && (pip install --no-deps alfworld==[\d.]+) && proas train", readme).group(1)
    pin = re.search(r'"(alfworld==[\d.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert fast.endswith(pin)
    out = _episode(tmp_path, ["alfworld"])
    assert out.returncode != 0
    hint = out.stderr.strip().splitlines()[-1]
    assert fast in hint
    assert hint.index(fast) < hint.index("proas[alfworld]")  # the fast one first, the extra explained after
