"""The critic of the ``ppo`` estimator: a value model over hashed context features.

``V(s_t)`` is a learned linear function of the same hashed text features of the context that
the ``scorer`` policy uses (what the ``lm`` prompt shows: task, step count, recent history,
observation, admissible actions). It serves both
policies: for the ``lm`` policy it is a cheap stand-in for verl-agent's separate LLM critic
(documented in docs/training.md), so PPO runs on one GPU without a second model.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn

from proas.policies.base import Context
from proas.policies.features import Featurizer

__all__ = ["ValueModel"]


class ValueModel(nn.Module):
    """``V(c) = b + sum_{f in features(c)} w_f``."""

    def __init__(self, bits: int = 16):
        super().__init__()
        self.features = Featurizer(bits)
        self.table = nn.EmbeddingBag(1 << bits, 1, mode="sum")
        self.bias = nn.Parameter(torch.zeros(()))
        with torch.no_grad():
            self.table.weight.zero_()

    def forward(self, contexts: Sequence[Context]) -> torch.Tensor:
        """Values, shape ``(len(contexts),)``."""
        ids = [self.features.context_ids(c) for c in contexts]
        lengths = np.fromiter((len(i) for i in ids), dtype=np.int64, count=len(ids))
        off = np.zeros(len(ids), dtype=np.int64)
        if len(ids) > 1:
            np.cumsum(lengths[:-1], out=off[1:])
        flat = torch.from_numpy(np.concatenate(ids)) if ids else torch.zeros(0, dtype=torch.long)
        return self.table(flat, torch.from_numpy(off)).squeeze(-1) + self.bias
