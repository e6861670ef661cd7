"""The layout shows the architecture (issue #28, item 6): the package root holds only the ground
floor, and the command line names every command module in an import that a reader and the
import linter can follow."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import proas
import proas.cli

tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")

SRC = Path(proas.__file__).resolve().parent
ROOT = SRC.parents[1]


def _layers() -> list[list[str]]:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    floors = next(c for c in cfg["contracts"] if c["type"] == "layers")["layers"]
    return [[m.strip() for m in floor.split("|")] for floor in floors]


def test_the_package_root_holds_only_the_ground_floor():
    """Every module at the root (other than the package's own ``__init__`` and ``__main__``) is
    on one of the floors below the credit core, and every other floor is a package."""
    layers = _layers()
    credit = next(i for i, floor in enumerate(layers) if "proas.credit" in floor)
    ground = {m for floor in layers[credit + 1:] for m in floor}
    root_modules = {f"proas.{p.stem}" for p in SRC.glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert root_modules == ground, f"root modules not on the ground floor: {sorted(root_modules - ground)}; " \
                                   f"ground-floor names with no root module: {sorted(ground - root_modules)}"
    for floor in layers[:credit + 1]:
        for name in floor:
            assert (SRC / name.removeprefix("proas.").replace(".", "/") / "__init__.py").is_file(), name


def test_every_command_module_is_imported_by_name_in_the_cli():
    """``proas.cli.COMMANDS`` holds every ``cli`` module of the package, each imported by a plain
    import statement (no ``importlib``, whose arrows no reader or linter sees)."""
    modules = {".".join(("proas", *p.relative_to(SRC).with_suffix("").parts))
               for p in SRC.rglob("cli.py")}
    assert {m.__name__ for m in proas.cli.COMMANDS} == modules
    tree = ast.parse(Path(proas.cli.__file__).read_text(encoding="utf-8"))
    imported = {f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert modules <= imported
    assert not any(isinstance(n, (ast.Import, ast.ImportFrom)) and "importlib" in ast.unparse(n)
                   for n in ast.walk(tree))
