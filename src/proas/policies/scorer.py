"""The ``scorer`` policy: a fast CPU policy that picks one of the env's candidate actions.

At each step the candidates are the admissible commands plus the invalid candidates the env
offers (so that the policy can make the mistakes ProAS is about). Each candidate ``a`` in
context ``c`` gets the logit

    score(c, a) = u(c) . v(a) + sum_{f in pair(c, a)} w_f

where ``u`` and ``v`` are sums of learned embeddings of hashed text features of the context
and of the action (``proas.policies.features``), and ``w`` is a learned weight per pair
feature. The context features are what the ``lm`` policy's prompt shows, no more and no less:
the task, the step count, the last ``history_length`` (observation, action) pairs, the current
observation and the admissible actions; so the two policies decide on the same information.
The policy is ``softmax(score / temperature)`` over the candidates. For the losses a step is a
response of one token, the chosen candidate, so the step's log-prob is
``log_softmax(score)[chosen]`` and the same PPO/KL/entropy code serves the ``lm`` policy's token
sequences and this policy.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from proas.policies.base import Context, Decision, Policy, TokenStats, candidate_actions
from proas.policies.features import Featurizer

__all__ = ["ScorerModule", "ScorerPolicy"]


class ScorerModule(nn.Module):
    """The learned tables: context embeddings, action embeddings, pair weights."""

    def __init__(self, bits: int, dim: int, init_std: float, seed: int):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        n = 1 << bits
        self.ctx = nn.EmbeddingBag(n, dim, mode="sum", )
        self.act = nn.EmbeddingBag(n, dim, mode="sum", )
        self.pair = nn.EmbeddingBag(n, 1, mode="sum", )
        with torch.no_grad():
            self.ctx.weight.normal_(0.0, init_std, generator=gen)
            self.act.weight.normal_(0.0, init_std, generator=gen)
            self.pair.weight.zero_()

    def scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits padded to ``(n_contexts, max_candidates)``; padding is ``-inf``."""
        u = self.ctx(batch["ctx"], batch["ctx_off"])  # (B, d)
        v = self.act(batch["act"], batch["act_off"])  # (distinct actions, d)
        w = self.pair(batch["pair"], batch["pair_off"]).squeeze(-1)  # (distinct pair tuples,)
        flat = (u[batch["owner"]] * v[batch["act_of"]]).sum(-1) + w[batch["pair_of"]]  # (C,)
        out = torch.full(batch["shape"], float("-inf"), dtype=flat.dtype)
        out[batch["owner"], batch["slot"]] = flat
        return out


def _offsets(parts: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
    off = np.zeros(len(parts), dtype=np.int64)
    if len(parts) > 1:
        np.cumsum(lengths[:-1], out=off[1:])
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return torch.from_numpy(flat), torch.from_numpy(off)


def _collate(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Pack per-step feature arrays into EmbeddingBag inputs.

    Candidates repeat across steps ("go to countertop 1"), and so do their pair features, so
    each distinct action and each distinct pair-feature tuple is embedded once per batch and
    gathered per candidate: that halves the rows the forward and backward passes touch.
    """
    ctx = []
    act_rows: dict[bytes, int] = {}
    act_parts: list[np.ndarray] = []
    pair_rows: dict[bytes, int] = {}
    pair_parts: list[np.ndarray] = []
    act_of, pair_of, owner, slot = [], [], [], []
    max_c = 0
    for i, item in enumerate(items):
        ctx.append(item["ctx"])
        n = len(item["act"])
        max_c = max(max_c, n)
        for j, (a, p) in enumerate(zip(item["act"], item["pair"])):
            key = a.tobytes()
            r = act_rows.get(key)
            if r is None:
                r = act_rows[key] = len(act_parts)
                act_parts.append(a)
            act_of.append(r)
            key = p.tobytes()
            r = pair_rows.get(key)
            if r is None:
                r = pair_rows[key] = len(pair_parts)
                pair_parts.append(p)
            pair_of.append(r)
            owner.append(i)
            slot.append(j)
    c, c_off = _offsets(ctx)
    a, a_off = _offsets(act_parts)
    p, p_off = _offsets(pair_parts)
    return {
        "ctx": c, "ctx_off": c_off, "act": a, "act_off": a_off, "pair": p, "pair_off": p_off,
        "act_of": torch.tensor(act_of, dtype=torch.long), "pair_of": torch.tensor(pair_of, dtype=torch.long),
        "owner": torch.tensor(owner, dtype=torch.long), "slot": torch.tensor(slot, dtype=torch.long),
        "shape": (len(items), max(max_c, 1)),
    }


class ScorerPolicy(Policy):
    """Scores candidate actions from hashed text features; see the module docstring.

    ``history_length`` is how many recent (observation, action) pairs the features see, as the
    ``lm`` policy's ``history_length`` is how many its prompt shows.
    """

    kind = "scorer"
    exact_rollout_logp = True

    def __init__(self, bits: int = 14, dim: int = 16, init_std: float = 0.01, seed: int = 0,
                 optimizer: str = "sgd", history_length: int = 2):
        self.optimizer = optimizer
        self.history_length = history_length
        self.features = Featurizer(bits, history_length=history_length)
        self.module = ScorerModule(bits, dim, init_std, seed)

    def make_optimizer(self, lr: float) -> torch.optim.Optimizer:
        if self.optimizer == "sgd":
            return torch.optim.SGD(self.parameters(), lr=lr)
        return torch.optim.Adam(self.parameters(), lr=lr, foreach=True)

    def candidates(self, ctx: Context) -> list[str]:
        return candidate_actions(ctx, "scorer")

    def featurize(self, ctx: Context) -> tuple[list[str], dict[str, Any]]:
        cands = self.candidates(ctx)
        data = {
            "ctx": self.features.context_ids(ctx),
            "act": [self.features.action_ids(a) for a in cands],
            "pair": self.features.pair_ids(ctx, cands),
        }
        return cands, data

    @torch.no_grad()
    def act(self, contexts: Sequence[Context], rng: np.random.Generator, temperature: float = 1.0) -> list[Decision]:
        if not contexts:
            return []
        featurized = [self.featurize(c) for c in contexts]
        scores = self.module.scores(_collate([d for _, d in featurized])).double()
        logp = torch.log_softmax(scores, dim=-1).numpy()
        if temperature > 0:
            sample_logp = torch.log_softmax(scores / temperature, dim=-1).numpy()
        out = []
        for i, (cands, data) in enumerate(featurized):
            n = len(cands)
            if temperature > 0:
                p = np.exp(sample_logp[i, :n])
                # inverse-CDF draw: one uniform per decision keeps the rng stream simple
                k = int(np.searchsorted(np.cumsum(p), rng.random() * p.sum(), side="right"))
                k = min(k, n - 1)
            else:
                k = int(np.argmax(logp[i, :n]))
            data = dict(data, choice=k)
            out.append(Decision(action=cands[k], response=cands[k], malformed=False,
                                logp=float(logp[i, k]), data=data))
        return out

    def prepare(self, data: Sequence[dict[str, Any]]) -> dict[str, Any]:
        batch = _collate(data)
        batch["choice"] = torch.tensor([d["choice"] for d in data], dtype=torch.long)
        return batch

    def evaluate(self, batch: dict[str, Any], module: nn.Module | None = None) -> TokenStats:
        module = module if module is not None else self.module
        scores = module.scores(batch)
        logp_all = torch.log_softmax(scores, dim=-1)
        choice = batch["choice"]
        logp = logp_all.gather(1, choice[:, None])
        p = logp_all.exp()
        entropy = -(p * torch.where(torch.isfinite(logp_all), logp_all, 0.0)).sum(-1, keepdim=True)
        return TokenStats(logp=logp, entropy=entropy, mask=torch.ones_like(logp))
