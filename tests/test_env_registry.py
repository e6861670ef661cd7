"""`proas.envs.make` is the one table from an env name to its factory (issue #28, item 3): every
command asks it, custom ``module:function`` envs go through it, and no other table exists."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from proas import envs
from proas.envs.household import HouseholdEnv
from proas.envs.shop import ShopEnv
from proas.errors import ProasError

SRC = Path(envs.__file__).resolve().parents[1]  # src/proas


def test_the_registered_envs_are_built_by_name_with_their_options():
    assert envs.names() == ["household", "shop"]
    shop = envs.make("shop", max_steps=7)
    assert isinstance(shop, ShopEnv) and shop.max_steps == 7
    make = envs.make_factory("household", {"max_steps": 9})
    first, second = make(), make()
    assert isinstance(first, HouseholdEnv) and first is not second and second.max_steps == 9
    assert envs.ENVS["household"].tuning_split == "valid_unseen" and envs.ENVS["shop"].tuning_split == "test"


def test_a_module_function_name_builds_a_custom_env():
    env = envs.make("toy_env:make_env", n_train=3, max_steps=5)  # tests/ is on sys.path (conftest)
    assert env.name == "toy" and env.task_ids("train") == ["train-000", "train-001", "train-002"]
    envs.check_env(env, "train-000")


def test_bad_names_and_options_are_one_clear_error():
    with pytest.raises(ProasError, match=r"^unknown env 'shopp'; choose one of household, shop, or module:factory; "
                                         r"did you mean 'shop'\?$"):
        envs.make("shopp")
    with pytest.raises(ProasError, match=r"^config: env.name='garden' is not household, shop or module:factory$"):
        envs.make_factory("garden", {}, config=True)
    with pytest.raises(ProasError, match="cannot be imported"):
        envs.make_factory("no_such_module:make")  # the name is resolved when the factory is made
    with pytest.raises(ProasError, match=r"config: env.options do not fit env 'shop'"):
        envs.make_factory("shop", {"colour": "red"}, config=True)()
    with pytest.raises(ProasError, match=r"the options \['colour'\] do not fit env 'shop'"):
        envs.make("shop", colour="red")


def test_registering_an_env_is_one_call(monkeypatch):
    monkeypatch.setattr(envs.registry, "ENVS", dict(envs.ENVS))
    spec = envs.register("toy", "toy_env:make_env", splits="train, valid")
    assert envs.names() == ["household", "shop", "toy"] and spec.tuning_split is None
    assert envs.make("toy", n_train=2).task_ids("train") == ["train-000", "train-001"]
    for name, factory in (("a:b", "toy_env:make_env"), ("toy", "toy_env.make_env")):
        with pytest.raises(ValueError):
            envs.register(name, factory)


# ----------------------------------------------------------------------------- no second table
def _sources():
    for path in sorted(SRC.rglob("*.py")):
        yield path.relative_to(SRC).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def test_no_other_env_table_exists():
    """Outside ``proas/envs/``, no module imports an env's factory (``make_*_env``), names a
    factory path into ``proas.envs`` or maps the env names to anything importable; the old
    tables' names are gone everywhere. (Modules that use an env's own parts, such as the verl
    bridge's lockstep ALFWorld tracker, may import them: that is not a name → factory table.)"""
    gone = {"make_env_factory", "ENV_FACTORIES", "resolve_env", "TUNING_SPLITS"}
    bad = []
    for rel, tree in _sources():
        inside_envs = rel.startswith("envs/")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in gone:
                bad.append(f"{rel}:{node.lineno}: defines {node.name}")
            elif isinstance(node, ast.Name) and node.id in gone:
                bad.append(f"{rel}:{node.lineno}: names {node.id}")
            if inside_envs:
                continue
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("proas.envs."):
                for alias in node.names:
                    if alias.name.startswith("make_") and alias.name.endswith("_env"):
                        bad.append(f"{rel}:{node.lineno}: imports the factory {node.module}.{alias.name}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value.startswith("proas.envs.") and ":" in node.value and " " not in node.value:
                    bad.append(f"{rel}:{node.lineno}: names the factory path {node.value!r}")
            elif isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                if {"household", "shop"} <= keys:
                    for v in node.values:
                        importable = isinstance(v, (ast.Name, ast.Attribute, ast.Lambda)) or (
                            isinstance(v, ast.Constant) and isinstance(v.value, str) and ":" in v.value
                            and v.value.split(":")[0].replace(".", "").replace("_", "").isalnum())
                        if importable:
                            bad.append(f"{rel}:{node.lineno}: a dict from env names to factories")
                            break
    assert not bad, "env tables outside proas.envs.registry:\n" + "\n".join(bad)


def test_the_commands_that_build_envs_by_name_ask_the_registry():
    """The trainer, play and tasks, task sets, verl, the baselines, the probes and `proas lm`
    import the registry."""
    users = {"train/loop.py", "train/evaluate.py", "baselines/direct.py", "baselines/sft.py", "baselines/serve.py",
             "baselines/cli.py", "probes/cli.py", "probes/stats.py", "integrations/verl/verl_agent.py"}
    found = set()
    for rel, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (
                    (node.module == "proas.envs" and {a.name for a in node.names} & {"make", "make_factory"})
                    or (node.module == "proas" and "envs" in {a.name for a in node.names})):
                found.add(rel)
    assert users <= found, f"not asking proas.envs: {sorted(users - found)}"
    assert {"envs/cli.py", "tasksets/cli.py", "cli/lm.py"} <= found
