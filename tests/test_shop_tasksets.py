"""The shipped shop catalog and task sets: they verify, match the env's splits and regenerate
byte for byte from the code."""

import gzip
import json

import pytest

from proas import tasksets
from proas.envs.shop import catalog as synth
from proas.envs.shop import make_shop_env
from proas.envs.shop.catalog_spec import TYPES
from taskset_helpers import shipped


@pytest.fixture(scope="module")
def env():
    return make_shop_env(nouns="stored")


def _load_gz(path):
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def test_shipped_catalog_is_what_the_generator_writes(tmp_path):
    paths = synth.write_catalog(tmp_path)
    for key, name in (("items", synth.ITEMS_FILE), ("attrs", synth.ATTRS_FILE), ("human", synth.HUMAN_FILE)):
        assert paths[key].read_bytes() == (synth.DATA_DIR / name).read_bytes(), name


def test_shipped_catalog_size_and_coverage():
    items = _load_gz(synth.DATA_DIR / synth.ITEMS_FILE)
    assert len(items) >= 1000
    assert {p["category"] for p in items} == {"beauty", "electronics", "fashion", "food", "furniture"}
    assert len({p["asin"] for p in items}) == len(items)
    assert (
        sum((synth.DATA_DIR / f).stat().st_size for f in (synth.ITEMS_FILE, synth.ATTRS_FILE, synth.HUMAN_FILE))
        < 5_000_000
    )
    per_query = {}
    for p in items:
        per_query[p["query"]] = per_query.get(p["query"], 0) + 1
    assert len(per_query) == sum(len(t) for t in TYPES.values()) and min(per_query.values()) >= 20


def test_attributes_matter_in_the_catalog(env):
    """A same-type product lacking a goal attribute cannot score 1 for that goal."""
    cat = env.catalog
    checked = 0
    for tid in env.task_ids("valid")[:20]:
        goal = env.goal(tid)
        for p in cat.products:
            if p["query"] == goal["query"] and not set(goal["attributes"]) <= set(p["Attributes"]):
                assert cat.best_options(p["asin"], goal)[0] < 1.0
                checked += 1
    assert checked > 100


def test_shipped_val_set_is_the_envs_valid_split(env):
    val = tasksets.load_val_set("shop")
    assert val.task_ids == env.task_ids("valid")


@pytest.mark.parametrize("seed, ppo", shipped("shop"))
def test_shipped_schedules_verify_and_regenerate(env, tmp_path, seed, ppo):
    shipped = tasksets.load_schedule(tasksets.schedule_dir("shop", seed, ppo=ppo))
    assert len(shipped.steps) == 150 and shipped.per_step == (128 if ppo else 16)
    train = set(env.task_ids("train"))
    assert all(t in train for step in shipped.steps for t in step)
    tasksets.make_val_set("shop", env.task_ids("valid"), tmp_path)
    out = tasksets.make_schedule("shop", env.task_ids("train"), seed=seed, ppo=ppo, root=tmp_path,
                                 per_step=128 if ppo else 16, source=env.taskset_source)
    again = tasksets.load_schedule(out)
    assert again.steps == shipped.steps
    assert (out / tasksets.SCHEDULE_FILE).read_bytes() == (shipped.path / tasksets.SCHEDULE_FILE).read_bytes()
