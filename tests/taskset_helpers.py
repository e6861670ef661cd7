"""Helpers shared by the shipped-task-set tests."""

from __future__ import annotations

from proas import tasksets


def shipped(env: str) -> list[tuple[int, bool]]:
    """(seed, ppo) of every schedule the package ships for ``env``: each is checked, not only the paper's."""
    out = []
    for ppo in (False, True):
        parent = tasksets.schedule_dir(env, 0, ppo=ppo).parents[1]
        out += [(int(d.name[4:]), ppo) for d in parent.glob("seed*") if (d / env).is_dir()]
    return sorted(out)
