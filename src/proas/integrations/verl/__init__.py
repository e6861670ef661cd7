"""ProAS inside verl / verl-agent: reshape a ``DataProto``'s advantages after ``compute_advantage``.

- ``ProASCredit`` (``hook``): reshapes ``advantages`` in place from the step rows' ``uid``,
  ``traj_uid``, step index, abstract states, anchors and ``is_action_valid``, and builds,
  evolves and checkpoints the reference graph beside the trainer.
- ``register_estimators`` / ``compute_advantage`` (``estimators``): the ``proas_<base>`` names
  for ``algorithm.adv_estimator``, with what verl's estimator interface lets them see.
- ``ProasEnvManager`` / ``step_columns`` (``envs``): proas environments behind verl-agent's
  env-manager contract, and the ProAS columns a rollout loop copies into each step's rows.
- ``StepColumns``, ``rows_to_batch``, ``rows_to_trajectories``, ``trajectories_to_rows``,
  ``broadcast_to_tokens`` (``rows``): the conversion between verl's step rows and proas's
  credit arrays (the hook's path) or trajectories.

verl itself is imported only by ``register_estimators`` and ``compute_advantage``; the rest
works on any object with verl's ``batch`` / ``non_tensor_batch`` layout. Recipe: docs/verl.md.
"""

from proas.integrations.verl.envs import ERROR_COLUMN, ProasEnvManager, project_action, step_columns
from proas.integrations.verl.estimators import (
    ESTIMATOR_NAMES,
    bind,
    bound,
    compute_advantage,
    patch_ray_trainer,
    register_estimators,
)
from proas.integrations.verl.hook import (
    BASES,
    CHECKPOINT_SUBDIR,
    HOOK_ESTIMATORS,
    VERL_BASE_ESTIMATORS,
    ProASCredit,
    first_response_values,
)
from proas.integrations.verl.rows import (
    BatchLayout,
    RowLayout,
    StepColumns,
    broadcast_to_tokens,
    response_mask_of,
    rows_to_batch,
    rows_to_trajectories,
    step_values_to_rows,
    trajectories_to_rows,
)

__all__ = [
    "BASES",
    "BatchLayout",
    "CHECKPOINT_SUBDIR",
    "ERROR_COLUMN",
    "ESTIMATOR_NAMES",
    "HOOK_ESTIMATORS",
    "ProASCredit",
    "ProasEnvManager",
    "RowLayout",
    "StepColumns",
    "VERL_BASE_ESTIMATORS",
    "bind",
    "bound",
    "broadcast_to_tokens",
    "compute_advantage",
    "first_response_values",
    "patch_ray_trainer",
    "project_action",
    "register_estimators",
    "response_mask_of",
    "rows_to_batch",
    "rows_to_trajectories",
    "step_columns",
    "step_values_to_rows",
    "trajectories_to_rows",
]
