"""``credit_arrays`` is the one place an advantage is made (issue #28, item 1): nothing in ``src/``
but it calls a base estimator or a shaping. The trainer and the verl hook reach them through it.

An AST scan of every module: a call whose callee is a registered estimator or shaping function
(by name, or through an entry's ``.fn``), ``shape``, ``get_estimator`` or one of the shaping
kernels is allowed only inside ``credit_arrays`` and inside the two modules that define them
(an estimator built on another, ``dapo`` on ``grpo``; ``shape`` dispatching to a shaping)."""

from __future__ import annotations

import ast
from pathlib import Path

import proas
from proas.credit import ESTIMATORS, SHAPINGS
from proas.credit import pipeline as pipeline_mod

SRC = Path(proas.__file__).resolve().parent
#: the modules that define the estimators and the shapings, relative to the package
DEFINING = {"credit/estimators.py", "credit/shaping.py"}
PIPELINE = Path(pipeline_mod.__file__).resolve().relative_to(SRC).as_posix()
#: the functions that make an advantage, or a part of one
GUARDED = ({spec.fn.__name__ for spec in ESTIMATORS.values()} | {spec.fn.__name__ for spec in SHAPINGS.values()}
           | {"shape", "get_estimator", "mask_unreasonable", "redistribute_penalty", "progress_bonus",
              "random_annotations", "fn"})


#: what gives access to a registry entry's ``fn``
REGISTRY_NAMES = {"ESTIMATORS", "SHAPINGS", "estimator_spec", "shaping_spec", "check_options"}


def _calls(path: Path) -> list[tuple[str, str, int]]:
    """``(callee, enclosing top-level function or '', line)`` of every guarded call in ``path``:
    a guarded name imported from ``proas.credit`` (or an attribute of a ``proas.credit`` module
    imported whole), or ``.fn(...)`` in a module that imports a registry."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    imported: set[str] = set()  # local names bound to guarded functions
    modules: set[str] = set()  # local names bound to proas.credit modules
    registry = False
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("proas.credit"):
            for alias in node.names:
                local = alias.asname or alias.name
                if alias.name in GUARDED:
                    imported.add(local)
                if alias.name in REGISTRY_NAMES:
                    registry = True
                if node.module == "proas.credit" and alias.name in {"estimators", "shaping", "registry"}:
                    modules.add(local)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("proas.credit"):
                    modules.add(alias.asname or alias.name.split(".")[0])
                    registry = True
    out = []

    def guarded(f: ast.expr) -> str:
        if isinstance(f, ast.Name) and f.id in imported:
            return f.id
        if isinstance(f, ast.Attribute):
            if f.attr == "fn" and registry:
                return "fn"
            if f.attr in GUARDED and isinstance(f.value, (ast.Name, ast.Attribute)):
                root = f.value
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(root, ast.Name) and root.id in modules:
                    return f.attr
        return ""

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and not where:
                inner = child.name
            if isinstance(child, ast.Call):
                name = guarded(child.func)
                if name:
                    out.append((name, where, child.lineno))
            visit(child, inner)

    visit(tree, "")
    return out


def test_only_credit_arrays_calls_the_estimators_and_shapings():
    offenders = []
    found_in_credit_arrays = set()
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in DEFINING:
            continue
        for name, where, line in _calls(path):
            if rel == PIPELINE and where == "credit_arrays":
                found_in_credit_arrays.add(name)
                continue
            offenders.append(f"src/proas/{rel}:{line}: {name}() in {where or 'module level'}")
    assert not offenders, "only credit_arrays may call an estimator or a shaping:\n" + "\n".join(offenders)
    # the scan sees what it guards: credit_arrays itself calls an estimator, a shaping and the bonus
    assert {"fn", "shape", "progress_bonus"} <= found_in_credit_arrays


def test_the_scan_catches_a_call_outside(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import numpy as np\n"
                   "from proas.credit import ESTIMATORS, shape, get_estimator\n"
                   "from proas.credit import estimators\n"
                   "def f(b, a, ann):\n"
                   "    x = shape('proas', a, ann, b) + get_estimator('grpo')(b).traj\n"
                   "    return ESTIMATORS['rloo'].fn(b), estimators.gigpo(b), np.shape(x)\n")
    assert [(n, w) for n, w, _ in _calls(bad)] == [("shape", "f"), ("get_estimator", "f"), ("fn", "f"),
                                                   ("gigpo", "f")]
