"""The critic of the ``ppo`` estimator: a value model over hashed features (``algo.critic_features``).

``V(s_t)`` is a learned linear function of hashed features (one weight per feature, plus a bias).
Two feature sets:

- ``context``: the hashed text features of the context that the ``scorer`` policy uses (what the
  ``lm`` prompt shows: task, step count, recent history, observation, admissible actions). A
  linear function of words cannot tell whether the page in view fits the task (that is an
  interaction of task words with observation words), so this critic cannot fit the value of a
  state: on shop its explained variance stayed below 0 (docs/credit.md, "GAE and its critic").
- ``state`` (the default): a weight for the env's abstract state of the step (``Step.state``, the
  key of the reference graph's nodes, which ProAS and MiGPO read too), one for that state
  crossed with the step count, and the **mean** of the context features' weights. The weight per
  (state, step count) makes the critic a table over those pairs, which is what the expected
  return depends on in both envs (docs/shop.md and docs/household.md describe the
  abstractions); the context features refine it. The mean, not the sum, because the critic
  trains with Adam, whose step is about ``critic_lr`` on every weight a batch touches: summed
  over the 100-300 words of a page, one update moved V by several units of a 0-10 return, and
  the ``context`` critic's explained variance stayed below 0 on shop.
  The policy never sees the state: only the critic does (an asymmetric actor-critic), as a
  stand-in for an LLM critic's reading of the same page.

The critic serves both policies: for the ``lm`` policy it is a cheap stand-in for verl-agent's
separate LLM critic (documented in docs/training.md), so PPO runs on one GPU without a second
model. The trainer calls it on steps (``Step``, with ``extra["context"]``); the ``context``
critic also takes bare ``Context`` objects.
"""

from __future__ import annotations

from typing import Sequence, Union

import numpy as np
import torch
from torch import nn

from proas.policies.base import Context
from proas.policies.features import Featurizer
from proas.train.config import CRITIC_FEATURES
from proas.types import Step

__all__ = ["CRITIC_FEATURES", "ValueModel", "critic_metrics", "explained_variance"]

class ValueModel(nn.Module):
    """``V(s) = b + sum_{f in features(s)} w_f``; ``features`` is ``state`` or ``context`` (module
    docstring)."""

    def __init__(self, bits: int = 16, features: str = "context", history_length: int = 2):
        super().__init__()
        if features not in CRITIC_FEATURES:
            raise ValueError(f"unknown critic features {features!r}; choose one of: {', '.join(CRITIC_FEATURES)}")
        self.kind = features
        self.features = Featurizer(bits, history_length=history_length)
        self.table = nn.EmbeddingBag(1 << bits, 1, mode="sum")
        self.bias = nn.Parameter(torch.zeros(()))
        self._state_cache: dict[tuple[str, int], np.ndarray] = {}
        with torch.no_grad():
            self.table.weight.zero_()

    def _state_ids(self, state: str, step: int) -> np.ndarray:
        key = (state, step)
        ids = self._state_cache.get(key)
        if ids is None:
            ids = np.array([self.features._id(f"st:{state}"), self.features._id(f"sn:{state}|{step}")],
                           dtype=np.int64)
            if len(self._state_cache) < 1 << 16:
                self._state_cache[key] = ids
        return ids

    def ids(self, item: Union[Step, Context]) -> np.ndarray:
        """The context feature ids of one step (or, for the ``context`` critic, one context)."""
        if isinstance(item, Context):
            if self.kind != "context":
                raise TypeError("the state critic values steps (it reads Step.state), not bare contexts")
            return self.features.context_ids(item)
        return self.features.context_ids(item.extra["context"])

    def state_ids(self, item: Step) -> np.ndarray:
        """The two state feature ids of a step: its abstract state, and the state with the step count."""
        return self._state_ids(str(item.state), int(item.extra["context"].step))

    def forward(self, items: Sequence[Union[Step, Context]]) -> torch.Tensor:
        """Values, shape ``(len(items),)``."""
        ids = [self.ids(i) for i in items]
        lengths = np.fromiter((len(i) for i in ids), dtype=np.int64, count=len(ids))
        off = np.zeros(len(ids), dtype=np.int64)
        if len(ids) > 1:
            np.cumsum(lengths[:-1], out=off[1:])
        flat = torch.from_numpy(np.concatenate(ids)) if ids else torch.zeros(0, dtype=torch.long)
        if self.kind == "context":
            return self.table(flat, torch.from_numpy(off)).squeeze(-1) + self.bias
        # the state critic: the mean of the context weights, so that an Adam step (about
        # ``critic_lr`` on every weight it touches) moves V by about critic_lr however many words
        # the page has, plus the state's two weights
        ctx = nn.functional.embedding_bag(flat, self.table.weight, torch.from_numpy(off), mode="mean")
        st = torch.from_numpy(np.stack([self.state_ids(i) for i in items]) if items else np.zeros((0, 2), np.int64))
        return (ctx.squeeze(-1) + self.table.weight[st, 0].sum(-1)) + self.bias


def explained_variance(values: np.ndarray, returns: np.ndarray) -> float:
    """``1 − Var(returns − values) / Var(returns)`` (population variances): 1 for a perfect critic, 0
    for one that predicts only the mean, below 0 for one worse than that; NaN when the returns do
    not vary (a batch without a success)."""
    values = np.asarray(values, dtype=np.float64)
    returns = np.asarray(returns, dtype=np.float64)
    var = float(returns.var()) if returns.size else 0.0
    if var <= 0.0:
        return float("nan")
    return 1.0 - float((returns - values).var()) / var


def critic_metrics(values: np.ndarray, returns: np.ndarray) -> dict[str, float]:
    """The step's ``critic/*`` metrics: the values the critic gave the batch before its update
    against GAE's returns (explained variance, left out when the returns do not vary; mean value;
    mean return)."""
    out = {"critic/value_mean": float(np.mean(values)) if len(values) else 0.0,
           "critic/return_mean": float(np.mean(returns)) if len(returns) else 0.0}
    ev = explained_variance(values, returns)
    if np.isfinite(ev):
        out["critic/ev"] = ev
    return out
