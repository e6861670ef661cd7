"""The shipped household task sets: verified, the paper's sizes and per-type counts, reproducible."""

from __future__ import annotations

from collections import Counter

import pytest

from proas import tasksets
from proas.envs.household import fixed_valid_ids, parse_task_id, task_ids
from taskset_helpers import shipped


def test_shipped_validation_set_has_the_papers_per_type_counts():
    val = tasksets.load_val_set("household")
    assert len(val.task_ids) == 128 == len(set(val.task_ids))
    counts = Counter(parse_task_id(t)[1] for t in val.task_ids)
    assert counts == {"pick": 33, "look": 12, "clean": 25, "heat": 12, "cool": 24, "pick2": 22}
    assert all(parse_task_id(t)[0] == "valid_seen" for t in val.task_ids)
    assert val.task_ids == fixed_valid_ids() == task_ids("valid")


@pytest.mark.parametrize("seed, ppo", shipped("household"))
def test_shipped_schedules_verify_and_are_reproducible(seed, ppo):
    per_step = 128 if ppo else 16
    path = tasksets.schedule_dir("household", seed, ppo=ppo)
    sched = tasksets.load_schedule(path)
    assert len(sched.steps) == 150 and sched.per_step == per_step
    assert all(len(set(b)) == per_step for b in sched.steps)
    val = set(fixed_valid_ids())
    train = set(task_ids("train"))
    assert all(t in train and t not in val for b in sched.steps for t in b)
    # exactly what `proas schedule make` draws from the training pool
    assert sched.steps == tasksets.draw_schedule(sorted(train), 150, per_step, seed)
    assert sched.manifest["made_by"].startswith(f"proas schedule make --env household --seed {seed}")


def test_seeds_give_different_schedules():
    a = tasksets.load_schedule(tasksets.schedule_dir("household", 0)).steps
    b = tasksets.load_schedule(tasksets.schedule_dir("household", 1)).steps
    assert a != b


def test_config_selects_shipped_sets_like_the_seed():
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(
        {"fixed_train_set": {"path": "fixed_train_set/seed1/household"}, "fixed_val_set": {"enabled": True}}
    )
    sched = tasksets.schedule_from_config(cfg)
    assert sched is not None and sched.seed == 1 and sched.tasks_at(150) == sched.steps[0]
    val = tasksets.val_set_from_config(cfg, "household")
    assert val is not None and len(val.task_ids) == 128
    off = OmegaConf.create({"fixed_train_set": {"path": None}, "fixed_val_set": {"enabled": False}})
    assert tasksets.schedule_from_config(off) is None and tasksets.val_set_from_config(off, "household") is None
    assert tasksets.schedule_from_config({}) is None


def test_config_with_a_missing_path_is_a_clear_error():
    from proas.errors import ProasError

    with pytest.raises(ProasError, match="not found"):
        tasksets.schedule_from_config({"fixed_train_set": {"path": "fixed_train_set/seed9/household"}})


def test_val_set_from_config_reads_the_trainers_path_key():
    cfg = {"fixed_val_set": {"enabled": True, "path": "fixed_val_set/household.jsonl"}}
    assert len(tasksets.val_set_from_config(cfg, "household").task_ids) == 128
    from proas.errors import ProasError

    with pytest.raises(ProasError, match="not found"):
        tasksets.val_set_from_config({"fixed_val_set": {"enabled": True, "path": "nosuch/val.jsonl"}}, "household")
