"""The household environment: ALFWorld's six task types, offline, on the real engine and a fast simulator.

Public API::

    from proas.envs.household import make_household_env, task_ids
    env = make_household_env(backend="fast")          # or "alfworld" (the real engine)
    obs, info = env.reset("train-pick-0007")
    obs, reward, terminated, truncated, info = env.step("go to countertop 1")
    env.oracle("train-pick-0007")                       # shortest walkthrough
    task_ids("train"), task_ids("valid")                # splits; "valid" = the fixed 128

See docs/household.md.
"""

from proas.envs.household.env import (
    MAX_STEPS,
    WIN_REWARD,
    HouseholdEnv,
    game_file,
    load_task,
    make_household_env,
    official_task_ids,
    oracle_trajectory,
    task_ids,
)
from proas.envs.household.generator import (
    GENERATOR_VERSION,
    SPLIT_SIZES,
    TASK_TYPES,
    VALID_COUNTS,
    fixed_valid_ids,
    parse_task_id,
)

__all__ = [
    "GENERATOR_VERSION",
    "HouseholdEnv",
    "MAX_STEPS",
    "SPLIT_SIZES",
    "TASK_TYPES",
    "VALID_COUNTS",
    "WIN_REWARD",
    "fixed_valid_ids",
    "game_file",
    "load_task",
    "make_household_env",
    "official_task_ids",
    "oracle_trajectory",
    "parse_task_id",
    "task_ids",
]
