"""The layout shows the architecture (issue #28, item 6): the package root holds only the ground
floor, and the command line names every command module in an import that a reader and the
import linter can follow. A concept has one home (issue #45): no package holds only the command
line of code that lives elsewhere, and the lm and the task sets each live in one package."""

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


def _module(path: Path) -> str:
    return ".".join(("proas", *path.relative_to(SRC).with_suffix("").parts))


#: the command modules that stand in the front door rather than in their subsystem's package,
#: because their work needs floors above it (``proas.cli``'s docstring says why)
FRONT_DOOR_COMMANDS = {"proas.cli.lm"}


def test_every_command_module_is_imported_by_name_in_the_cli():
    """``proas.cli.COMMANDS`` holds every ``cli`` module of the package and the front door's own
    command modules, each imported by a plain import statement (no ``importlib``, whose arrows no
    reader or linter sees)."""
    front_door = {_module(p) for p in (SRC / "cli").glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert front_door == FRONT_DOOR_COMMANDS
    modules = {_module(p) for p in SRC.rglob("cli.py")} | front_door
    assert {m.__name__ for m in proas.cli.COMMANDS} == modules
    tree = ast.parse(Path(proas.cli.__file__).read_text(encoding="utf-8"))
    imported = {f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert modules <= imported
    assert not any(isinstance(n, (ast.Import, ast.ImportFrom)) and "importlib" in ast.unparse(n)
                   for n in ast.walk(tree))


def test_no_package_holds_only_a_command_line():
    """A package with a ``cli`` module holds code of its own beside it: a command stands with
    the code it runs (``proas play`` with the envs, ``proas schedule`` with the task sets), not in
    a room of its own."""
    for cli in SRC.rglob("cli.py"):
        package = cli.parent
        own = {p.name for p in package.glob("*.py")} - {"__init__.py", "__main__.py", "cli.py"}
        subpackages = [d for d in package.iterdir() if (d / "__init__.py").is_file()]
        code_in_init = len((package / "__init__.py").read_text(encoding="utf-8").splitlines()) > 40
        assert own or subpackages or code_in_init, f"{package.relative_to(SRC)}/ holds only a command line"


def test_the_lm_and_the_task_sets_each_have_one_home():
    """Every module named for the lm (``lm*.py``, or one in a folder ``lm``) is in ``proas.lm``,
    except its commands in the front door; the task sets' code (named ``tasksets`` or
    ``schedule``) is in ``proas.tasksets``."""
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        name = _module(path)
        if path.stem.startswith("lm") or "lm" in rel.parts[:-1]:
            assert name.startswith("proas.lm.") or name in FRONT_DOOR_COMMANDS, name
        if path.stem in ("tasksets", "schedule") or {"tasksets", "schedule"} & set(rel.parts[:-1]):
            assert name.startswith("proas.tasksets."), name
    assert (SRC / "tasksets" / "cli.py").is_file() and (SRC / "lm" / "options.py").is_file()
