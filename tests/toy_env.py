"""A tiny text environment implementing proas's env protocol, for the trainer's tests.

"fetch" tasks: an item lies at one of a few places; the agent must go there, take it, go to the
target and drop it. Layouts are derived from the task id, so everything is deterministic. The
env offers invalid candidates (taking an item that is not there), marks rejected actions as
errors, and can be told to raise on a given task (``crash_task``) to test failure handling.
Loaded by the CLI tests as ``env.name=toy_env:make_env`` with ``tests/`` on ``PYTHONPATH``.
"""

from __future__ import annotations

import random
from typing import Any

ITEMS = ("apple", "key", "book", "mug")
PLACES = ("shelf", "desk", "bed", "sofa", "table", "drawer")


class ToyEnv:
    name = "toy"

    def __init__(self, max_steps: int = 12, crash_task: str | None = None, n_train: int = 40, n_valid: int = 16,
                 n_places: int = len(PLACES)):
        self.max_steps = max_steps
        self.places = PLACES[:n_places]
        self.crash_task = crash_task
        self.n_train = n_train
        self.n_valid = n_valid
        self.task: str | None = None

    # layout of a task: item, where it lies, where it must go
    def _layout(self, task_id: str) -> tuple[str, str, str]:
        rnd = random.Random(task_id)
        item = rnd.choice(ITEMS)
        src, dst = rnd.sample(self.places, 2)
        return item, src, dst

    def task_ids(self, split: str) -> list[str]:
        n = {"train": self.n_train, "valid": self.n_valid}.get(split, 0)
        return [f"{split}-{i:03d}" for i in range(n)]

    def oracle(self, task_id: str) -> list[str]:
        item, src, dst = self._layout(task_id)
        return [f"go to {src}", f"take {item} from {src}", f"go to {dst}", f"drop {item} on {dst}"]

    def _info(self, error: bool, won: bool) -> dict[str, Any]:
        item, src, dst = self.layout
        adm = [f"go to {p}" for p in self.places if p != self.at]
        invalid = []
        if self.at == src and not self.holding and not self.placed:
            adm.append(f"take {item} from {src}")
        elif not self.holding:
            invalid.append(f"take {item} from {self.at}")
        if self.holding:
            adm.append(f"drop {item} on {self.at}")
        stage = "placed" if self.placed else ("hold" if self.holding else "search")
        where = "target" if self.at == dst else ("source" if self.at == src else "other")
        return {
            "won": won,
            "score": 1.0 if won else 0.0,
            "error": error,
            "admissible": adm,
            "invalid_candidates": invalid,
            "abstract_state": f"fetch|{stage}|{where}",
            "anchor": self.obs,
            "task_type": "fetch",
        }

    def reset(self, task_id: str):
        if task_id == self.crash_task:
            raise RuntimeError("toy env crashed on purpose")
        self.task = task_id
        self.layout = self._layout(task_id)
        item, src, dst = self.layout
        self.at = "door"
        self.holding = False
        self.placed = False
        self.steps = 0
        self.obs = f"You are at the door.\nYour task is to: put the {item} on the {dst}."
        return self.obs, self._info(False, False)

    def step(self, action: str):
        item, src, dst = self.layout
        won = False
        error = False
        if action.startswith("go to ") and action[6:] in self.places and action[6:] != self.at:
            self.at = action[6:]
            there = f" You see a {item}." if self.at == src and not self.holding and not self.placed else ""
            self.obs = f"You arrive at the {self.at}.{there}"
        elif action == f"take {item} from {src}" and self.at == src and not self.holding and not self.placed:
            self.holding = True
            self.obs = f"You take the {item}."
        elif action == f"drop {item} on {self.at}" and self.holding:
            self.holding = False
            self.placed = self.at == dst
            won = self.placed
            self.obs = f"You drop the {item} on the {self.at}."
            if not self.placed:
                self.layout = (item, self.at, dst)  # the item now lies here
        else:
            error = True
            self.obs = "Nothing happens."
        self.steps += 1
        truncated = not won and self.steps >= self.max_steps  # the step limit (env protocol: terminated vs truncated)
        return self.obs, (10.0 if won else 0.0), won, truncated, self._info(error, won)


def make_env(**kwargs: Any) -> ToyEnv:
    return ToyEnv(**kwargs)
