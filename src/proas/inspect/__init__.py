"""Look inside a run: why each step got the credit it got.

The per-step rollout log the trainer writes (``write_rollouts``) and ``proas inspect`` reads
(``read_rollouts``) is ``proas.rollout_log``, below both; its names are handed on here.
``view`` renders a logged batch in the terminal; ``html`` renders the same as one
self-contained page with the reference graph of the task type as an interactive graph
(cytoscape.js, vendored in ``vendor/``); ``cli`` is ``proas inspect``.
"""

from proas.rollout_log import (
    LoggedStep,
    LoggedTrajectory,
    RolloutLog,
    read_rollouts,
    write_rollouts,
)

__all__ = ["LoggedStep", "LoggedTrajectory", "RolloutLog", "read_rollouts", "write_rollouts"]
