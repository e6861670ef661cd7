"""Every benchmark keeps working (issue #27, item 13: shop_env.py had rotted): each has a quick
mode, and CI (.ci/run) runs every one of them in it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_"))
CI = (ROOT / ".ci" / "run").read_text()


def _options(path: Path) -> set[str]:
    """The option strings the script's argument parser declares (read from its source)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            out |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return out


def test_there_are_benchmarks():
    assert len(BENCHMARKS) >= 10


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_every_benchmark_has_a_quick_mode_that_its_docstring_names(path):
    assert "--quick" in _options(path), f"{path.name} has no --quick"
    assert "--quick" in (ast.get_docstring(ast.parse(path.read_text())) or ""), f"{path.name}'s docstring"


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_ci_runs_every_benchmarks_quick_mode(path):
    """Either the loop over ``benchmarks/[a-z]*.py`` runs it (it is not skipped there), or a line
    of its own runs it with ``--quick``."""
    looped = re.search(r'for bench in benchmarks/\[a-z\]\*\.py; do(.*?)done', CI, flags=re.S)
    assert looped and 'python3 "$bench" --quick' in looped.group(1)
    skipped = re.findall(r'\[ "\$bench" = benchmarks/(\S+\.py) \] && continue', looped.group(1))
    if path.name in skipped:
        assert re.search(rf"python\S* benchmarks/{re.escape(path.name)} --quick", CI), path.name
    else:
        assert path.name.startswith(tuple("abcdefghijklmnopqrstuvwxyz")), path.name
