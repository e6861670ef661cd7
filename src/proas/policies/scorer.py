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
from torch.nn import functional as F

from proas.policies.base import Context, Decision, Policy, TokenStats, candidate_actions
from proas.policies.features import Featurizer, Turn, run_positions

__all__ = ["ScorerModule", "ScorerPolicy"]


class _BagSum(torch.autograd.Function):
    """``F.embedding_bag(indices, weight, offsets, mode="sum")``, with torch's gradient made
    more cheaply.

    torch's CPU backward sorts the indices (``indices.sort()``) and, index by index, adds the
    gradient of each bag the index occurs in, in that sorted order, into zeros: one BLAS call,
    with its dispatch, per occurrence (a minibatch has thousands of context ids). This backward
    sorts the same way (the same call, so equal indices come in the same order) and makes the
    same additions in the same order with one accumulating ``index_put_``, which adds serially
    in the order given: the gradient is torch's, bit for bit (``tests/test_policies_scorer.py``),
    so a run's numbers do not change. The forward is torch's."""

    @staticmethod
    def forward(ctx, weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(indices, offsets)
        ctx.rows = weight.shape[0]
        return F.embedding_bag(indices, weight, offsets, mode="sum")

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        indices, offsets = ctx.saved_tensors
        off = offsets.numpy()
        bag = np.repeat(np.arange(len(off), dtype=np.int64), np.diff(off, append=indices.shape[0]))  # each index's bag
        order = torch.sort(indices)
        rows = grad.contiguous().index_select(0, torch.from_numpy(bag).index_select(0, order.indices))
        out = grad.new_zeros((ctx.rows, grad.shape[1]))
        out.index_put_((order.values,), rows, accumulate=True)
        return out, None, None


def _bag_sum(bag: nn.EmbeddingBag, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """``bag(indices, offsets)`` (mode ``sum``), through ``_BagSum`` where a gradient is wanted."""
    if torch.is_grad_enabled() and bag.weight.requires_grad:
        return _BagSum.apply(bag.weight, indices, offsets)
    return bag(indices, offsets)


class ScorerModule(nn.Module):
    """The learned tables: context embeddings, action embeddings, pair weights."""

    def __init__(self, bits: int, dim: int, init_std: float, seed: int):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        n = 1 << bits
        self.ctx = nn.EmbeddingBag(n, dim, mode="sum")
        self.act = nn.EmbeddingBag(n, dim, mode="sum")
        self.pair = nn.EmbeddingBag(n, 1, mode="sum")
        with torch.no_grad():
            self.ctx.weight.normal_(0.0, init_std, generator=gen)
            self.act.weight.normal_(0.0, init_std, generator=gen)
            self.pair.weight.zero_()

    def scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits padded to ``(n_contexts, max_candidates)``; padding is ``-inf``."""
        u = _bag_sum(self.ctx, batch["ctx"], batch["ctx_off"])  # (B, d)
        v = _bag_sum(self.act, batch["act"], batch["act_off"])  # (distinct actions, d)
        w = _bag_sum(self.pair, batch["pair"], batch["pair_off"]).squeeze(-1)  # (distinct pair tuples,)
        # index_select: the gathers of indexing, with cheaper dispatch (the same values and gradients)
        flat = (u.index_select(0, batch["owner"]) * v.index_select(0, batch["act_of"])).sum(-1) + w.index_select(
            0, batch["pair_of"])  # (C,)
        n, width = batch["shape"]
        # each candidate's place in the padded rows (``pos``: owner * width + slot), one copy
        out = torch.full((n * width,), float("-inf"), dtype=flat.dtype)
        return out.index_copy(0, batch["pos"], flat).view(n, width)


def _content_keys(arrays: list[np.ndarray]) -> np.ndarray:
    """Keys naming each array's content (equal arrays, equal keys), for data without them."""
    table: dict[bytes, int] = {}
    return np.fromiter((table.setdefault(a.tobytes(), len(table)) for a in arrays), dtype=np.int64,
                       count=len(arrays))


def _first_occurrence(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The position of each distinct key's first occurrence, in order of first occurrence, and
    each key's row among them."""
    if len(keys) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # distinct keys by first occurrence
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return first[order], rank[inverse.reshape(-1)]


def _distinct(arrays: list[np.ndarray], keys: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """The distinct arrays in order of first occurrence, and the row of each input in them."""
    firsts, rows = _first_occurrence(keys)
    return [arrays[i] for i in firsts.tolist()], rows


def _pack(ctx: torch.Tensor, ctx_off: torch.Tensor, counts: np.ndarray, act: tuple[np.ndarray, np.ndarray],
          act_of: np.ndarray, pair: tuple[np.ndarray, np.ndarray], pair_of: np.ndarray) -> dict[str, Any]:
    """The EmbeddingBag inputs: ``act`` and ``pair`` are the distinct rows, flat, with each row's
    offset; ``act_of`` / ``pair_of`` each candidate's row."""
    total = int(counts.sum())
    n = len(counts)
    owner = np.repeat(np.arange(n, dtype=np.int64), counts)
    starts = np.zeros(n, dtype=np.int64)
    if n > 1:
        np.cumsum(counts[:-1], out=starts[1:])
    slot = np.arange(total, dtype=np.int64) - np.repeat(starts, counts)
    width = max(int(counts.max()) if n else 0, 1)
    return {
        "ctx": ctx, "ctx_off": ctx_off, "act": torch.from_numpy(act[0]), "act_off": torch.from_numpy(act[1]),
        "pair": torch.from_numpy(pair[0]), "pair_off": torch.from_numpy(pair[1]),
        "act_of": torch.from_numpy(act_of), "pair_of": torch.from_numpy(pair_of),
        "owner": torch.from_numpy(owner), "slot": torch.from_numpy(slot), "pos": torch.from_numpy(owner * width + slot),
        "shape": (n, width),
    }


def _flat(parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Arrays joined, and where each starts."""
    lengths = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
    off = np.zeros(len(parts), dtype=np.int64)
    if len(parts) > 1:
        np.cumsum(lengths[:-1], out=off[1:])
    return (np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)), off


def _keyed(data: dict[str, Any]) -> dict[str, Any]:
    """A decision recorded by ``act`` (its turn and row) as context ids and candidate keys."""
    ctx, act_key, pair_key = data["turn"].context(data["row"])
    return {"ctx": ctx, "act_key": act_key, "pair_key": pair_key}


def _collate(items: Sequence[dict[str, Any]], act_rows: Any = None, pair_rows: Any = None) -> dict[str, Any]:
    """Pack per-step feature arrays into EmbeddingBag inputs.

    Candidates repeat across steps ("go to countertop 1"), and so do their pair features, so
    each distinct action and each distinct pair-feature tuple is embedded once per batch and
    gathered per candidate: that halves the rows the forward and backward passes touch. Distinct
    rows are found by content (the featurizer's ``act_key`` / ``pair_key``, else the bytes) and
    kept in order of first occurrence.

    An item holds its context ids (``ctx``) and either its candidates' arrays (``act``, ``pair``;
    with or without keys) or only their keys, which name rows of ``act_rows`` / ``pair_rows``
    (the featurizer's flat tables; what ``ScorerPolicy.act`` records).
    """
    c, c_off = (torch.from_numpy(x) for x in _flat([item["ctx"] for item in items]))
    if items and all("act" not in item for item in items):
        if act_rows is None or pair_rows is None:
            raise ValueError("_collate: items with keys only need the featurizer's tables")
        counts = np.fromiter((len(item["act_key"]) for item in items), dtype=np.int64, count=len(items))
        return _collate_keys(c, c_off, counts, np.concatenate([item["act_key"] for item in items]),
                             np.concatenate([item["pair_key"] for item in items]), act_rows, pair_rows)
    counts = np.fromiter((len(item["act"]) for item in items), dtype=np.int64, count=len(items))
    acts: list[np.ndarray] = []
    pairs: list[np.ndarray] = []
    for item in items:
        acts.extend(item["act"])
        pairs.extend(item["pair"])
    if all("act_key" in item and "pair_key" in item for item in items):
        act_keys = np.concatenate([item["act_key"] for item in items]) if items else np.zeros(0, np.int64)
        pair_keys = np.concatenate([item["pair_key"] for item in items]) if items else np.zeros(0, np.int64)
    else:
        act_keys, pair_keys = _content_keys(acts), _content_keys(pairs)
    act_parts, act_of = _distinct(acts, act_keys)
    pair_parts, pair_of = _distinct(pairs, pair_keys)
    return _pack(c, c_off, counts, _flat(act_parts), act_of, _flat(pair_parts), pair_of)


def _collate_keys(ctx: torch.Tensor, ctx_off: torch.Tensor, counts: np.ndarray, act_keys: np.ndarray,
                  pair_keys: np.ndarray, act_rows: Any, pair_rows: Any) -> dict[str, Any]:
    """``_collate`` from the candidates' keys: a key's row in the featurizer's flat tables
    (``act_rows`` / ``pair_rows``) holds the ids of that content, so only the distinct keys are
    looked up, in order of first occurrence, with numpy."""
    act_first, act_of = act_rows.first_rows(act_keys)
    pair_first, pair_of = pair_rows.first_rows(pair_keys)
    _, (a,), a_off = act_rows.gather(act_keys[act_first])
    _, (p,), p_off = pair_rows.gather(pair_keys[pair_first])
    return _pack(ctx, ctx_off, counts, (a, a_off), act_of, (p, p_off), pair_of)


class _TurnRows:
    """Decisions recorded by ``ScorerPolicy.act`` (each names its turn and its row in it),
    packed for batches of them: the distinct turns' arrays are joined once, in order of first
    occurrence, with each decision's runs in them, so that a batch is gathered with numpy
    (``batch``) instead of joining its decisions' arrays one by one."""

    def __init__(self, data: Sequence[dict[str, Any]]):
        first: dict[int, Turn] = {}
        for d in data:
            first.setdefault(id(d["turn"]), d["turn"])
        number = {key: k for k, key in enumerate(first)}
        turns = list(first.values())
        n = len(data)
        turn_of = np.fromiter((number[id(d["turn"])] for d in data), dtype=np.int64, count=n)
        row = np.fromiter((d["row"] for d in data), dtype=np.int64, count=n)
        self.choice = torch.from_numpy(np.fromiter((d["choice"] for d in data), dtype=np.int64, count=n))
        rows_before = np.cumsum([0] + [len(t.counts) for t in turns[:-1]])
        ctx_before = np.cumsum([0] + [len(t.ctx_ids) for t in turns[:-1]])
        cand_before = np.cumsum([0] + [len(t.act_keys) for t in turns[:-1]])
        self.ctx = np.concatenate([t.ctx_ids for t in turns])
        self.act = np.concatenate([t.act_keys for t in turns])
        self.pair = np.concatenate([t.pair_keys for t in turns])
        g = rows_before[turn_of] + row  # each decision's row among all the turns' rows
        self.ctx_start = np.concatenate([t.ctx_bounds[:-1] + b for t, b in zip(turns, ctx_before)])[g]
        self.ctx_len = np.concatenate([np.diff(t.ctx_bounds) for t in turns])[g]
        self.counts = np.concatenate([t.counts for t in turns])[g]
        self.cand_start = np.concatenate([np.cumsum(t.counts) - t.counts + b for t, b in zip(turns, cand_before)])[g]
        self.act_rows, self.pair_rows = turns[0].act_rows, turns[0].pair_rows

    def batch(self, positions: Sequence[int]) -> dict[str, Any]:
        """``_collate`` of the decisions at ``positions`` (in that order), with their choices."""
        p = np.asarray(positions, dtype=np.int64)
        at, c_off = run_positions(self.ctx_start[p], self.ctx_len[p])
        c = self.ctx[at]
        counts = self.counts[p]
        cand, _ = run_positions(self.cand_start[p], counts)
        batch = _collate_keys(torch.from_numpy(c), torch.from_numpy(c_off), counts, self.act[cand], self.pair[cand],
                              self.act_rows, self.pair_rows)
        batch["choice"] = self.choice[torch.from_numpy(p)]
        return batch


def _collate_turn(turn: Turn) -> dict[str, Any]:
    """``_collate`` of a turn's contexts, from the turn's flat arrays (``Featurizer.turn``)."""
    return _collate_keys(torch.from_numpy(turn.ctx_ids), torch.from_numpy(turn.ctx_bounds[:-1]), turn.counts,
                         turn.act_keys, turn.pair_keys, turn.act_rows, turn.pair_rows)


def _row_sums(p: np.ndarray, counts: list[int] | np.ndarray) -> np.ndarray:
    """``p[i, :counts[i]].sum()`` for every row, one ``sum`` per distinct count: the rows of one
    count, gathered contiguous, are summed along their last axis row by row, each as its own
    one-row ``sum`` (the same pairwise order, which depends on the length summed)."""
    n_arr = np.asarray(counts, dtype=np.int64)
    total = np.empty(len(counts), dtype=np.float64)
    for n in np.unique(n_arr).tolist():
        rows = np.flatnonzero(n_arr == n)
        total[rows] = np.ascontiguousarray(p[rows, :n]).sum(axis=1)
    return total


def _draw(sample_logp: np.ndarray, counts: list[int], rng: np.random.Generator) -> list[int]:
    """One candidate per row of ``sample_logp`` (padded with ``-inf`` after each row's
    ``counts[i]`` candidates) by an inverse-CDF draw: one uniform per decision, in row order,
    keeps the rng stream simple.

    Row ``i`` draws ``k = searchsorted(cumsum(p), u * p.sum(), side="right")`` (at most the
    last candidate) with ``p = exp(sample_logp[i, :n])``; the exponentials, running sums and
    uniforms are made for the whole turn at once (elementwise and along each row, so each value
    is the one-row computation's), each row's total by its own ``sum`` (numpy's pairwise order
    depends on the length summed).
    """
    p = np.exp(sample_logp)  # padding: exp(-inf) = 0
    cum = np.cumsum(p, axis=1)
    u = rng.random(len(counts))  # the same stream as one rng.random() per row
    n_arr = np.asarray(counts, dtype=np.int64)
    x = u * _row_sums(p, n_arr)
    if not (np.isfinite(cum).all() and np.isfinite(x).all()):
        # a row that is not a distribution: searchsorted's own answer, row by row
        ks = [int(np.searchsorted(cum[i, :n], x[i], side="right")) for i, n in enumerate(counts)]
    else:
        # cumsum of non-negative numbers never decreases: searchsorted(side="right") counts
        # the running sums <= x among the row's candidates
        valid = np.arange(cum.shape[1])[None, :] < n_arr[:, None]
        ks = ((cum <= x[:, None]) & valid).sum(axis=1).tolist()
    return [min(k, n - 1) for k, n in zip(ks, counts)]


class ScorerPolicy(Policy):
    """Scores candidate actions from hashed text features; see the module docstring.

    ``history_length`` is how many recent (observation, action) pairs the features see, as the
    ``lm`` policy's ``history_length`` is how many its prompt shows.
    """

    kind = "scorer"
    exact_rollout_logp = True

    def __init__(self, bits: int = 14, dim: int = 16, init_std: float = 0.01, seed: int = 0,
                 optimizer: str = "sgd", history_length: int = 2, weight_decay: float = 0.01):
        self.optimizer = optimizer
        self.weight_decay = weight_decay
        self.history_length = history_length
        self.features = Featurizer(bits, history_length=history_length)
        self.module = ScorerModule(bits, dim, init_std, seed)

    def make_optimizer(self, lr: float) -> torch.optim.Optimizer:
        if self.optimizer == "sgd":
            return torch.optim.SGD(self.parameters(), lr=lr)
        if self.optimizer == "adamw":  # decoupled weight decay, as verl-agent's actor (0.01)
            return torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=self.weight_decay, foreach=True)
        return torch.optim.Adam(self.parameters(), lr=lr, foreach=True)

    def candidates(self, ctx: Context) -> list[str]:
        return candidate_actions(ctx, "scorer")

    def featurize(self, ctx: Context) -> tuple[list[str], dict[str, Any]]:
        """The candidates of ``ctx`` and their feature arrays (``_collate``'s input)."""
        return self.featurize_batch([ctx])[0]

    def featurize_batch(self, contexts: Sequence[Context]) -> list[tuple[list[str], dict[str, Any]]]:
        """``featurize`` for a turn's contexts at once (``Featurizer.batch``). The arrays are
        shared with the featurizer's tables and never written to."""
        return [(cands, {"ctx": ctx_ids, "act": act, "pair": pair, "act_key": act_key, "pair_key": pair_key})
                for cands, ctx_ids, act, act_key, pair, pair_key in self.features.batch(list(contexts))]

    @torch.no_grad()
    def act(self, contexts: Sequence[Context], rng: np.random.Generator, temperature: float = 1.0) -> list[Decision]:
        if not contexts:
            return []
        cand_lists, turn = self.features.turn(list(contexts))
        scores = self.module.scores(_collate_turn(turn)).double()
        logp_t = torch.log_softmax(scores, dim=-1)
        # the entropy of the policy's own candidate distribution (temperature 1), whatever the
        # sampling temperature: how sharp the policy is (validation reports its mean)
        entropy = (-(logp_t.exp() * torch.where(torch.isfinite(logp_t), logp_t, 0.0)).sum(-1)).tolist()
        logp = logp_t.numpy()
        counts = turn.counts.tolist()
        if temperature > 0:
            choices = _draw(torch.log_softmax(scores / temperature, dim=-1).numpy(), counts, rng)
        else:
            choices = [int(np.argmax(logp[i, :n])) for i, n in enumerate(counts)]
        # a decision's data: its turn and its row in it (``prepare`` reads the context ids and
        # the candidates' keys there), the choice and the entropy
        chosen = logp[np.arange(len(choices)), choices].tolist()
        return [Decision(action=cands[k], response=cands[k], malformed=False, logp=lp,
                         data={"turn": turn, "row": i, "choice": k, "entropy": ent})
                for i, (cands, k, lp, ent) in enumerate(zip(cand_lists, choices, chosen, entropy))]

    def prepare(self, data: Sequence[dict[str, Any]]) -> dict[str, Any]:
        if data and all("turn" in d for d in data):
            return _TurnRows(data).batch(range(len(data)))
        items = [_keyed(d) if "turn" in d else d for d in data]
        batch = _collate(items, self.features._act_rows, self.features._pair_rows)
        batch["choice"] = torch.tensor([d["choice"] for d in data], dtype=torch.long)
        return batch

    def preparer(self, data: Sequence[dict[str, Any]]):
        """``prepare`` of batches of ``data``: decisions recorded by ``act`` are packed once
        (``_TurnRows``) and each batch gathered from there."""
        if data and all("turn" in d for d in data):
            return _TurnRows(data).batch
        return super().preparer(data)

    def evaluate(self, batch: dict[str, Any], module: nn.Module | None = None) -> TokenStats:
        module = module if module is not None else self.module
        scores = module.scores(batch)
        logp_all = torch.log_softmax(scores, dim=-1)
        choice = batch["choice"]
        logp = logp_all.gather(1, choice[:, None])
        p = logp_all.exp()
        entropy = -(p * torch.where(torch.isfinite(logp_all), logp_all, 0.0)).sum(-1, keepdim=True)
        return TokenStats(logp=logp, entropy=entropy, mask=torch.ones_like(logp))
