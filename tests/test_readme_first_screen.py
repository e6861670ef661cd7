"""The README's first screen (everything before its install notes) is what a newcomer needs
(issue #45): what proas is, the answer, the two commands, what the main job gives, where to go
next; no commit hashes or dated timings. Its main-job figures are docs/training.md's."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
FIRST = README.split("### Install notes", 1)[0]


def test_the_first_screen_has_no_commit_hashes_or_dates():
    assert "### Install notes" in README
    assert not re.findall(r"`[0-9a-f]{7,40}`|\bat [0-9a-f]{7,40}\b", FIRST)
    assert not re.findall(r"\b20\d\d-\d\d-\d\d\b", FIRST)


def test_the_first_screen_gives_the_two_commands_and_ci_runs_the_test_command():
    assert "pip install torch==2.13.0 && pip install -e \".[alfworld]\" && proas train" in FIRST
    test_command = 'pip install torch==2.13.0 && pip install -e ".[test,alfworld]" && python3 -m pytest -q\n'
    assert test_command in FIRST
    assert re.search(r"^python3 -m pytest -q$", (ROOT / ".ci" / "run").read_text(encoding="utf-8"), re.M)


def test_the_first_screen_states_the_answer_and_links_the_studies():
    assert "**Does ProAS help?**" in FIRST
    for link in ("results/heldout/README.md", "results/lm/README.md", "results/README.md"):
        assert f"]({link})" in FIRST


def test_the_main_job_figures_are_those_of_docs_training():
    best = re.search(r"best validation SR is \*\*([\d.]+) ± ([\d.]+)%\*\*", FIRST)
    last = re.search(r"last validation ([\d.]+) ± ([\d.]+)%", FIRST)
    assert best and last
    section = (ROOT / "docs" / "training.md").read_text(encoding="utf-8").split("## The main job: figures", 1)[1]
    row = re.search(r"^\| ([\d.]+) ± ([\d.]+) \| .*? \| ([\d.]+) ± ([\d.]+) \|", section, re.M)
    assert row and row.groups() == best.groups() + last.groups()
