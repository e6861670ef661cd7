"""results/ holds results, by one rule (results/README.md, "What results/ holds"), and the repo
holds no symbolic links.

Allowed under results/, judged on the files git tracks (the index, so a file is caught when it
is added, before it is committed):
- Markdown, CSV and PNG files (``*.md``, ``*.csv``, ``*.png``);
- YAML configs (``*.yaml``): a run's ``config.yaml`` and the study configs a study ran from;
- a run's ``metrics.jsonl``, with its ``config.yaml`` beside it;
- text excerpts (``*.txt``) of at most ``TEXT_CAP`` bytes: a GPU run's log excerpt
  (``train.log.txt``), a runner's log, a benchmark's output. A full log is cut to its head and
  tail first;
- ``results/.gitignore``, which repeats this rule for ``git add``.
No file is over ``FILE_CAP`` bytes. Nothing else: no checkpoints, archives, JSON summaries,
full logs, scripts (they live in scripts/, tests/test_scripts_smoke.py), symbolic links, or
superseded tries (git history keeps those; results/lm/README.md says at which commit).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = {".md", ".csv", ".png", ".yaml"}
NAMES = {"metrics.jsonl"}
TEXT_CAP = 16 * 1024
FILE_CAP = 1024 * 1024
SPECIAL = {"results/.gitignore"}
#: a directory named like a superseded try (first_try, try2, ...): git history keeps those
TRY_DIR = re.compile(r"(^|_)try\d*$")
SYMLINK = "120000"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def index() -> list[tuple[str, str, str]]:
    """(mode, blob, path) of every file git tracks."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = []
    for entry in _git("ls-files", "-s", "-z").split("\0"):
        if entry:
            meta, path = entry.split("\t", 1)
            mode, blob, _stage = meta.split()
            out.append((mode, blob, path))
    return out


def _sizes(blobs: list[str]) -> dict[str, int]:
    """The size in bytes of each blob, as git stores it (one ``cat-file`` call for all)."""
    if not blobs:
        return {}
    out = subprocess.run(["git", "cat-file", "--batch-check=%(objectname) %(objectsize)"], cwd=ROOT,
                         input="\n".join(blobs) + "\n", capture_output=True, text=True, check=True).stdout
    return {name: int(size) for name, size in (line.split() for line in out.splitlines() if line)}


def offences(entries: list[tuple[str, str, str]], sizes: dict[str, int]) -> list[str]:
    """One line per path under results/ that the rule does not allow, naming the path and why."""
    bad = []
    paths = {path for _, _, path in entries}
    for mode, blob, path in entries:
        if not path.startswith("results/"):
            continue
        p = PurePosixPath(path)
        size = sizes.get(blob, 0)
        if mode == SYMLINK:
            bad.append(f"{path}: a symbolic link")
            continue
        tries = [part for part in p.parts[1:-1] if TRY_DIR.search(part)]
        if tries:
            bad.append(f"{path}: under {tries[0]}/, a superseded try (git history keeps it)")
        elif path in SPECIAL:
            pass
        elif p.name in NAMES:
            if str(p.parent / "config.yaml") not in paths:
                bad.append(f"{path}: a run's metrics.jsonl without its config.yaml beside it")
        elif p.suffix == ".txt":
            if size > TEXT_CAP:
                bad.append(f"{path}: a text excerpt of {size} bytes, over the cap of {TEXT_CAP}")
        elif p.suffix not in SUFFIXES:
            bad.append(f"{path}: not a kind of file results/ holds (Markdown, CSV, PNG, YAML configs, "
                       "a run's metrics.jsonl, short *.txt excerpts)")
        if size > FILE_CAP:
            bad.append(f"{path}: {size} bytes, over the cap of {FILE_CAP} for any file in results/")
    return bad


def test_results_holds_only_what_its_rule_allows(index):
    bad = offences(index, _sizes([blob for mode, blob, path in index if path.startswith("results/")]))
    assert not bad, ("results/ holds files its rule does not allow (results/README.md, "
                     "\"What results/ holds\"):\n  " + "\n  ".join(bad))


def test_the_repo_holds_no_symbolic_links(index):
    links = [path for mode, _, path in index if mode == SYMLINK]
    assert not links, ("symbolic links are tracked (copy the file, or name the path in a README):\n  "
                       + "\n  ".join(links))


def test_the_rule_names_each_kind_of_offence():
    # the checker itself, on a made-up index: each offending path is named, once, with its reason
    entries = [("100644", "a", "results/lm/runs/x/seed0/metrics.jsonl"),
               ("100644", "b", "results/lm/runs/x/seed0/config.yaml"),
               ("100644", "c", "results/lm/runs/x/seed0/train.log.txt"),
               ("100644", "d", "results/lm/runs/y/seed0/metrics.jsonl"),
               ("100644", "e", "results/lm/runs/x/seed0/summary.json"),
               ("100644", "f", "results/lm/runs/x/seed0/checkpoints/step_10/state.pt"),
               ("100644", "g", "results/study.tgz"),
               ("120000", "h", "results/lm/runs/lm_start/shop"),
               ("100644", "i", "results/lm/first_try/README.md"),
               ("100644", "j", "results/lm/runs/x/seed0/train.log"),
               ("100644", "k", "results/big.txt"),
               ("100644", "l", "results/huge.png"),
               ("100644", "m", "results/analyse.py"),
               ("100644", "n", "results/.gitignore"),
               ("100644", "o", "results/heldout/main/heldout_main.yaml"),
               ("100644", "p", "src/proas/data/x.json")]
    sizes = {"c": 900, "k": TEXT_CAP + 1, "l": FILE_CAP + 1}
    bad = offences(entries, sizes)
    named = [line.split(":")[0] for line in bad]
    assert named == ["results/lm/runs/y/seed0/metrics.jsonl", "results/lm/runs/x/seed0/summary.json",
                     "results/lm/runs/x/seed0/checkpoints/step_10/state.pt", "results/study.tgz",
                     "results/lm/runs/lm_start/shop", "results/lm/first_try/README.md",
                     "results/lm/runs/x/seed0/train.log", "results/big.txt", "results/huge.png",
                     "results/analyse.py"]
    assert "symbolic link" in bad[4] and "superseded try" in bad[5] and "over the cap" in bad[7]
