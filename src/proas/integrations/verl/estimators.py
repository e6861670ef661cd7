"""ProAS variants as verl advantage estimators (``register_adv_est``), and what they can see.

verl 0.9.1's ``compute_advantage`` calls a registered estimator with only
``token_level_rewards``, ``response_mask``, ``config`` (the ``algorithm`` section) and, when the
batch has it, ``index`` (the ``uid`` column). ProAS needs more: which rows form a trajectory
(``traj_uid``), their order, the abstract states, the error flags and the graph. None of that
passes through the interface, so a registered ProAS estimator reads it from the batch that a
``ProASCredit`` *bound* for the call (``with credit.bind(batch): compute_advantage(batch, ...)``,
or :func:`compute_advantage` here, which does both). It checks that the rows it is asked about
are the bound batch's rows (same count, same ``uid`` column) and refuses otherwise, rather than
silently shaping with another batch's data.

Names: ``proas_grpo``, ``proas_dapo``, ``proas_gigpo``, ``proas_rloo``, ``proas_reinforce_pp``;
``proas_<base>`` is base estimator ``<base>`` followed by the bound object's shaping.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import numpy as np

from proas.errors import ProasError
from proas.integrations.verl.hook import HOOK_ESTIMATORS, ProASCredit
from proas.integrations.verl.rows import broadcast_to_tokens

__all__ = [
    "ESTIMATOR_NAMES",
    "register_estimators",
    "bind",
    "bound",
    "compute_advantage",
    "patch_ray_trainer",
]

#: the names ``register_estimators`` adds to verl's registry
ESTIMATOR_NAMES = tuple(f"proas_{base}" for base in HOOK_ESTIMATORS)

# (credit, data) pairs bound by ``bind``; innermost last. The driver is single-threaded.
_BOUND: list[tuple[ProASCredit, Any]] = []


@contextlib.contextmanager
def bind(credit: ProASCredit, data: Any) -> Iterator[None]:
    """Make ``data`` (a ``DataProto``) and ``credit`` visible to the registered estimators."""
    _BOUND.append((credit, data))
    try:
        yield
    finally:
        _BOUND.pop()


def bound() -> tuple[ProASCredit, Any] | None:
    """The innermost bound ``(credit, data)``, or ``None``."""
    return _BOUND[-1] if _BOUND else None


def _make_estimator(base: str) -> Callable[..., tuple[Any, Any]]:
    name = f"proas_{base}"

    def estimator(token_level_rewards: Any, response_mask: Any, config: Any = None, index: Any = None, **_: Any):
        current = bound()
        if current is None:
            raise ProasError(
                f"advantage estimator {name!r} needs the whole batch (traj_uid, abstract states, "
                f"action validity), which verl's interface does not pass; call it inside "
                f"`with credit.bind(batch):` or through proas.integrations.verl.compute_advantage"
            )
        credit, data = current
        if credit.base != "proas":
            raise ProasError(f"{name}: a registered estimator computes the base itself; use base='proas'")
        if credit.estimator != base:
            raise ProasError(
                f"adv_estimator is {name!r} but the bound ProASCredit uses estimator "
                f"{credit.estimator!r}; make them agree"
            )
        n = response_mask.shape[0]
        group = data.non_tensor_batch.get(credit.columns.group)
        if len(data) != n or (
            index is not None and (group is None or not np.array_equal(np.asarray(index), np.asarray(group)))
        ):
            raise ProasError(
                f"{name}: the rows verl passed ({n}) are not the bound batch's rows ({len(data)}); "
                f"bind the batch that compute_advantage receives"
            )
        adv = broadcast_to_tokens(credit.step_advantages(data.non_tensor_batch), response_mask)
        adv = adv.to(token_level_rewards.dtype)
        return adv, adv.clone()

    estimator.__name__ = f"compute_{name}_advantage"
    estimator.__doc__ = (
        f"verl estimator {name!r}: proas base estimator {base!r} + the bound ProASCredit's shaping, "
        f"broadcast to every response token. Returns (advantages, returns), shape (bs, response_length)."
    )
    return estimator


_ESTIMATORS = {f"proas_{base}": _make_estimator(base) for base in HOOK_ESTIMATORS}


def register_estimators() -> tuple[str, ...]:
    """Add ``proas_<base>`` to verl's advantage-estimator registry; safe to call again.

    Returns the registered names. Raises ``ProasError`` if another function already holds one
    of the names.
    """
    from verl.trainer.ppo import core_algos

    for name, fn in _ESTIMATORS.items():
        held = core_algos.ADV_ESTIMATOR_REGISTRY.get(name)
        if held is fn:
            continue
        if held is not None:
            raise ProasError(f"verl already has an advantage estimator named {name!r} ({held!r})")
        core_algos.register_adv_est(name)(fn)
    return ESTIMATOR_NAMES


def compute_advantage(data: Any, adv_estimator: str, credit: ProASCredit | None = None, **kwargs: Any) -> Any:
    """verl's ``compute_advantage`` with the batch bound for the ProAS estimators.

    For ``adv_estimator`` in ``ESTIMATOR_NAMES`` the estimators are registered (once) and
    ``credit`` is required; other names go straight to verl. ``kwargs`` are verl's
    (``gamma``, ``lam``, ``norm_adv_by_std_in_grpo``, ``config``, ...).
    """
    from verl.trainer.ppo.ray_trainer import compute_advantage as verl_compute_advantage

    name = getattr(adv_estimator, "value", adv_estimator)
    if name not in ESTIMATOR_NAMES:
        return verl_compute_advantage(data, adv_estimator, **kwargs)
    if credit is None:
        raise ProasError(f"adv_estimator {name!r} needs a ProASCredit (credit=...)")
    register_estimators()
    with bind(credit, data):
        return verl_compute_advantage(data, name, **kwargs)


@contextlib.contextmanager
def patch_ray_trainer(credit: ProASCredit) -> Iterator[None]:
    """Route verl's own trainer through the binding, for as long as the context lasts.

    verl 0.9.1's ``RayPPOTrainer.fit`` calls the module-level
    ``verl.trainer.ppo.ray_trainer.compute_advantage(batch, adv_estimator=..., ...)`` on the whole
    batch. Inside this context that name is a wrapper that binds ``credit`` to the batch for the
    ``proas_*`` estimators (registered on entry) and passes every other name through, so
    ``algorithm.adv_estimator=proas_gigpo`` works without editing the trainer::

        with patch_ray_trainer(credit):
            trainer.fit()
    """
    from verl.trainer.ppo import ray_trainer

    original = ray_trainer.compute_advantage
    register_estimators()

    def wrapped(data: Any, adv_estimator: Any, *args: Any, **kwargs: Any) -> Any:
        name = getattr(adv_estimator, "value", adv_estimator)
        if name not in ESTIMATOR_NAMES:
            return original(data, adv_estimator, *args, **kwargs)
        with bind(credit, data):
            return original(data, name, *args, **kwargs)

    ray_trainer.compute_advantage = wrapped
    try:
        yield
    finally:
        ray_trainer.compute_advantage = original
