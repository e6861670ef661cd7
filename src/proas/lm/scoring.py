"""Score mode of the ``lm`` policy (GLAM): the candidate actions' log-likelihoods as their
scores, and the candidate softmax that acting samples and the losses read."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import torch
from torch import nn

from proas.lm.model import _cache_kwarg, _last_logits
from proas.lm.prompt import score_response
from proas.policies.base import Context, Decision, TokenStats, candidate_actions


def _ragged(seqs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(values, row, offset, lengths)`` of a list of token lists, flattened: ``values[k]`` is
    token ``offset[k]`` of list ``row[k]``. Lets a pass's padded tensors be filled with one
    numpy scatter each instead of a tensor per list."""
    lengths = np.fromiter((len(q) for q in seqs), dtype=np.int64, count=len(seqs))
    total = int(lengths.sum())
    values = np.fromiter((t for q in seqs for t in q), dtype=np.int64, count=total)
    row = np.repeat(np.arange(len(seqs), dtype=np.int64), lengths)
    starts = np.cumsum(lengths) - lengths
    offset = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
    return values, row, offset, lengths


def _distinct(items: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]]) -> tuple[list[int], list[int]]:
    """``(firsts, inverse)`` of a list of decisions ``(prompt ids, candidate ids)``: the
    positions of the distinct decisions' first occurrences, and for every decision the index in
    ``firsts`` of its equal. A group's episodes share their first prompt and a policy that has
    learnt a task revisits its states, so a batch often holds the same decision more than once;
    its scores are computed once."""
    index: dict[tuple, int] = {}
    firsts: list[int] = []
    inverse: list[int] = []
    for i, (prompt, cands) in enumerate(items):
        key = (tuple(prompt), tuple(map(tuple, cands)))  # equal keys, equal scores
        j = index.get(key)
        if j is None:
            j = index[key] = len(firsts)
            firsts.append(i)
        inverse.append(j)
    return firsts, inverse


def pass_dims(shapes: Sequence[tuple[int, Sequence[int]]], impl: str) -> list[tuple[int, int]]:
    """``(rows, width)`` each decision (``(prompt length, candidate lengths)``) adds to a score
    pass. ``expand``: a row per candidate, holding the prompt plus the longest candidate (the
    cached tokens). ``packed`` and ``shared``: a row per decision, the prompt plus all its
    candidates."""
    if impl in ("packed", "shared"):
        return [(1, plen + sum(cands)) for plen, cands in shapes]
    return [(len(cands), plen + max(cands, default=0)) for plen, cands in shapes]


def pack_passes(dims: Sequence[tuple[int, int]], order: Iterable[int], limit: int, budget: int) -> list[list[int]]:
    """The decisions of ``dims`` (``pass_dims``), taken in ``order``, cut into passes of at most
    ``limit`` decisions and at most ``budget`` tokens, rows x the pass's widest width. The
    budget bounds the token states (KV cache, activations) and so memory. The pass's mask adds
    rows x width x width scalars, one tensor for all layers: less than the token states, whose
    size is rows x width x hidden x layers, while width stays under hidden x layers. A decision
    over the budget alone still gets a pass of its own."""
    groups: list[list[int]] = []
    cur: list[int] = []
    rows = width = 0
    for i in order:
        dr, dw = dims[i]
        r, w = rows + dr, max(width, dw)
        if cur and (len(cur) >= limit or r * w > budget):
            groups.append(cur)
            cur, r, w = [], dr, dw
        cur.append(i)
        rows, width = r, w
    if cur:
        groups.append(cur)
    return groups


class ScoringMixin:
    """``LMPolicy``'s score mode: a decision's prompt and candidates, their scores
    (``candidate_logps``, by the ``expand`` or ``packed`` passes), acting and the loss's
    log-probs."""

    def score_item(self, ctx: Context) -> tuple[list[str], list[int], list[list[int]]]:
        """``(candidates, prompt ids, per-candidate response ids)`` of one decision (see
        ``score_item_trimmed``)."""
        return self.score_item_trimmed(ctx)[:3]

    def score_item_trimmed(self, ctx: Context) -> tuple[list[str], list[int], list[list[int]], bool]:
        """``(candidates, prompt ids, per-candidate response ids, prompt trimmed)`` of one decision.

        Each candidate's response (``score_response`` plus the end-of-turn token) is tokenized
        whole, as SFT and generation see it (a BPE may merge across ``<action>`` and the action);
        the token prefix all candidates share moves into the prompt, leaving each candidate at
        least one token of its own.
        """
        cands = candidate_actions(ctx, "lm (mode=score)")
        resp = [self._response_ids(a) for a in cands]
        shared = min(len(r) for r in resp) - 1
        for k in range(shared):
            if any(r[k] != resp[0][k] for r in resp[1:]):
                shared = k
                break
        prompt, trimmed = self.fit_prompt(ctx, reserve=shared)
        return cands, prompt + resp[0][:shared], [r[shared:] for r in resp], trimmed

    def score_impl_for(self, loss: bool) -> str:
        """The passes ``score_impl`` means for the loss (``evaluate``: the loss, the reference's
        and SFT's passes) or for acting: ``auto`` is ``packed`` except for acting on a GPU, where
        ``expand`` was faster (docs/training.md)."""
        if self.score_impl != "auto":
            return self.score_impl
        return "expand" if not loss and self.device.type == "cuda" else "packed"

    def _score_groups(self, shapes: Sequence[tuple[int, list[int]]], limit: int, impl: str,
                      classes: Sequence[int] | None = None) -> list[list[int]]:
        """Groups of decisions (``(prompt length, candidate lengths)`` each), one per forward
        pass, with at most ``limit`` decisions and at most ``score_tokens_per_pass`` tokens
        (``pass_dims``, ``pack_passes``): positions into ``shapes``, every one in exactly one
        group.

        The decisions are taken in order of their width (a stable sort: equal widths keep their
        order, and with ``classes``, ``_distinct``'s inverse, equal decisions come together), so
        a pass holds decisions of similar width: every row of a pass is padded to its widest,
        and the attention's cost grows with the square of that width. A pass's results do not
        depend on the other rows in it (up to float rounding), so the grouping changes no score
        and no loss: the loss of a minibatch is the row-weighted sum of its passes' losses."""
        dims = pass_dims(shapes, impl)
        if classes is None:
            order = sorted(range(len(dims)), key=lambda i: dims[i][1])
        else:
            order = sorted(range(len(dims)), key=lambda i: (dims[i][1], classes[i]))
        return pack_passes(dims, order, limit, self.score_tokens_per_pass)

    def _response_ids(self, action: str) -> list[int]:
        """The token ids of ``action``'s scored response plus the end-of-turn token, memoised:
        an env repeats its candidate actions across steps, and tokenizing each one anew every
        decision was most of score mode's CPU time."""
        ids = self._resp_cache.get(action)
        if ids is None:
            if len(self._resp_cache) >= 100_000:
                self._resp_cache.clear()
            ids = self.tokenizer(score_response(action), add_special_tokens=False)["input_ids"] + [self.stop_ids[0]]
            self._resp_cache[action] = ids
        return ids

    def candidate_logps(self, items: Sequence[tuple[list[int], list[list[int]]]],
                        module: nn.Module | None = None, impl: str | None = None,
                        distinct: tuple[list[int], list[int]] | None = None) -> list[torch.Tensor]:
        """The scores of each decision's candidate token sequences after its prompt, one
        ``(n_candidates,)`` tensor per decision, differentiable through ``module``: the sum of
        the tokens' log-probs, or with ``score_norm="mean"`` their mean over the candidate's own
        tokens (those after the prefix all candidates share, which ``score_item`` moved into
        the prompt; the end-of-turn token included). By ``score_impl``'s passes
        (``_candidate_logps_expand`` or ``_candidate_logps_packed``, equal up to float
        rounding), under ``compute()``. Equal decisions are scored once (``_distinct``) and
        share that score's tensor: gradients through it add up as if each had its own.
        ``distinct``: ``_distinct(items)`` when the caller has it already."""
        firsts, inverse = distinct if distinct is not None else _distinct(items)
        if len(firsts) == len(items):
            return self._distinct_logps(items, module, impl)
        once = self._distinct_logps([items[i] for i in firsts], module, impl)
        return [once[j] for j in inverse]

    def _distinct_logps(self, items: Sequence[tuple[list[int], list[list[int]]]],
                        module: nn.Module | None = None, impl: str | None = None) -> list[torch.Tensor]:
        """``candidate_logps`` of decisions that are all distinct: one pass over them all."""
        module = module if module is not None else self.module
        with self.compute():
            impl = impl or self.score_impl_for(loss=False)
            if impl == "packed":
                sums = self._candidate_logps_packed(items, module)
            elif impl == "shared":
                sums = self._candidate_logps_shared(items, module)
            else:
                sums = self._candidate_logps_expand(items, module)
        if self.score_norm == "mean":
            return [s / torch.tensor([len(c) for c in cs], dtype=s.dtype, device=s.device)
                    for s, (_, cs) in zip(sums, items, strict=True)]
        return sums

    def _prefill_prompts(self, items: Sequence[tuple[list[int], list[list[int]]]],
                         module: nn.Module) -> tuple[Any, torch.Tensor, np.ndarray]:
        """One forward pass over the decisions' prompts, left-padded to one width with explicit
        positions (the padding does not shift them), filling the KV cache and keeping the
        last position's logits: ``(output, attention mask, prompt lengths)``, the first pass of
        ``expand`` and ``shared``."""
        n = len(items)
        vals, row, off, lens = _ragged([p for p, _ in items])
        width = int(lens.max())
        col = off + np.repeat(width - lens, lens)  # left padding
        ids_np = np.full((n, width), self.tokenizer.pad_token_id, dtype=np.int64)
        mask_np = np.zeros((n, width), dtype=np.int64)
        ids_np[row, col] = vals
        mask_np[row, col] = 1
        ids, mask = torch.from_numpy(ids_np).to(self.device), torch.from_numpy(mask_np).to(self.device)
        out = module(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                     use_cache=True, **_last_logits(1))
        return out, mask, lens

    def _candidate_logps_expand(self, items: Sequence[tuple[list[int], list[list[int]]]],
                                module: nn.Module) -> list[torch.Tensor]:
        """``candidate_logps`` on a KV cache copied per candidate.

        One forward pass over the left-padded prompts fills the KV cache; the cache is expanded
        over the candidates (``reorder_cache`` with each candidate's decision index) and one more
        pass over the right-padded candidates gives their token logits. Position ids are explicit
        so that left padding does not shift the positions.
        """
        dev = self.device
        pad = self.tokenizer.pad_token_id
        n = len(items)
        out, mask, _ = self._prefill_prompts(items, module)
        counts = np.fromiter((len(cs) for _, cs in items), dtype=np.int64, count=n)
        owner = torch.from_numpy(np.repeat(np.arange(n, dtype=np.int64), counts)).to(dev)
        vals, row, off, lens = _ragged([c for _, cs in items for c in cs])
        length = int(lens.max())
        cids_np = np.full((len(lens), length), pad, dtype=np.int64)
        cmask_np = np.zeros((len(lens), length), dtype=np.int64)
        cids_np[row, off] = vals  # right padding
        cmask_np[row, off] = 1
        cids, cmask = torch.from_numpy(cids_np).to(dev), torch.from_numpy(cmask_np).to(dev)
        # the prompt's last logits predict every candidate's first token
        first = torch.log_softmax(out.logits[:, -1].float(), dim=-1)[owner].gather(1, cids[:, :1])
        tok = [first]
        if length > 1:
            cache = getattr(out, _cache_kwarg())
            cache.reorder_cache(owner)
            pos = mask.sum(-1)[owner][:, None] + torch.arange(length - 1, device=dev)[None, :]
            logits = module(input_ids=cids[:, :-1], attention_mask=torch.cat([mask[owner], cmask[:, :-1]], dim=1),
                            position_ids=pos, use_cache=False, **{_cache_kwarg(): cache}).logits
            # gathered one position at a time: no (candidates, length, vocab) float copy
            tok.extend(torch.log_softmax(logits[:, t].float(), dim=-1).gather(1, cids[:, t + 1, None])
                       for t in range(length - 1))
        sums = (torch.cat(tok, dim=1) * cmask).sum(-1)
        return list(torch.split(sums, [len(cs) for _, cs in items]))

    def _candidate_logps_shared(self, items: Sequence[tuple[list[int], list[list[int]]]],
                                module: nn.Module) -> list[torch.Tensor]:
        """``candidate_logps`` on one prompt cache per decision, which all its candidates share.

        One forward pass over the left-padded prompts fills the KV cache, as ``expand``'s does.
        A second pass gives each decision one row holding its candidates' tokens one after
        another (each candidate but its last token: the first is predicted by the prompt's last
        logits, each later one by the token before it), right-padded, on that decision's own
        cache. Under a 4D mask a candidate token sees its prompt (not the padding) and the
        earlier tokens of its own candidate; positions restart after the prompt for every
        candidate, so each one is scored as if it alone followed the prompt. Unlike ``expand``
        nothing is copied per candidate, and unlike ``packed`` no pass attends from the
        candidates' width back over itself for the prompt. A padding token sees the prompt (no
        row is fully masked) and is never read.
        """
        dev = self.device
        pad = self.tokenizer.pad_token_id
        n = len(items)
        out, mask, lens = self._prefill_prompts(items, module)
        pw = mask.shape[1]
        ncand = np.fromiter((len(cs) for _, cs in items), dtype=np.int64, count=n)
        cv, crow, coff, clen = _ragged([c for _, cs in items for c in cs])
        cdec = np.repeat(np.arange(n, dtype=np.int64), ncand)
        first_tok = torch.from_numpy(cv[coff == 0]).to(dev)  # each candidate's first token, in order
        first = torch.log_softmax(out.logits[:, -1].float(), dim=-1)[torch.from_numpy(cdec).to(dev)]
        sums = first.gather(1, first_tok[:, None]).squeeze(1)
        # the second pass's inputs: every candidate token but each candidate's last
        inp = coff < clen[crow] - 1
        if not inp.any():
            return list(torch.split(sums, ncand.tolist()))
        icand = crow[inp]  # the candidate (over all decisions) of each input token
        idec = cdec[icand]
        ioff = coff[inp]  # its place in its candidate
        # each input token's column in its decision's row: the inputs of the decision's earlier
        # candidates come first
        per_cand = np.maximum(clen - 1, 0)
        cstart = np.cumsum(per_cand) - per_cand
        dstart = cstart[np.cumsum(ncand) - ncand]  # each decision's first candidate's inputs
        icol = cstart[icand] - dstart[idec] + ioff
        q = int(icol.max()) + 1
        qids_np = np.full((n, q), pad, dtype=np.int64)
        qpos_np = np.zeros((n, q), dtype=np.int64)
        qseg_np = np.full((n, q), -1, dtype=np.int64)  # the candidate of each column, -1 for padding
        qids_np[idec, icol] = cv[inp]
        qpos_np[idec, icol] = lens[idec] + ioff
        qseg_np[idec, icol] = icand
        qseg = torch.from_numpy(qseg_np).to(dev)
        # (rows, query, key): the prompt's real tokens, then the same candidate's tokens up to the query
        own = (qseg[:, None, :] == qseg[:, :, None]) & (qseg[:, :, None] >= 0)
        own &= torch.ones((q, q), dtype=torch.bool, device=dev).tril()
        seen = torch.cat([mask.bool()[:, None, :].expand(n, q, pw), own], dim=2)
        dtype = self.module.get_input_embeddings().weight.dtype
        amask = torch.zeros((n, 1, q, pw + q), dtype=dtype, device=dev)
        amask.masked_fill_(~seen[:, None], torch.finfo(dtype).min)
        cache = getattr(out, _cache_kwarg())
        logits = module(input_ids=torch.from_numpy(qids_np).to(dev), attention_mask=amask,
                        position_ids=torch.from_numpy(qpos_np).to(dev), use_cache=False,
                        **{_cache_kwarg(): cache}).logits
        # the input at offset o of a candidate predicts its token o + 1
        tgt = torch.from_numpy(cv[np.flatnonzero(inp) + 1]).to(dev)
        picked = logits[torch.from_numpy(idec).to(dev), torch.from_numpy(icol).to(dev)]
        tok = torch.log_softmax(picked.float(), dim=-1).gather(1, tgt[:, None]).squeeze(1)
        sums = sums.index_add(0, torch.from_numpy(icand).to(dev), tok)
        return list(torch.split(sums, ncand.tolist()))

    def _candidate_logps_packed(self, items: Sequence[tuple[list[int], list[list[int]]]],
                                module: nn.Module) -> list[torch.Tensor]:
        """``candidate_logps`` in one forward pass over one sequence per decision.

        Row ``i`` holds prompt ``i`` and then all its candidates' tokens, right-padded. Under the
        4D mask a prompt token sees the earlier prompt tokens, and a candidate token the whole
        prompt and the earlier tokens of its own candidate only; position ids restart at the
        prompt length for every candidate, so each one is scored as if it alone followed the
        prompt. A padding token sees the prompt and the padding up to itself (no row is fully
        masked, which would give NaN in some attention kernels) and is never read. A candidate's
        first token is predicted at the prompt's last position, each later one at the position
        of the token before it.
        """
        dev = self.device
        pad = self.tokenizer.pad_token_id
        n = len(items)
        plen = np.fromiter((len(p) for p, _ in items), dtype=np.int64, count=n)
        ncand = np.fromiter((len(cs) for _, cs in items), dtype=np.int64, count=n)
        # the prompts, at columns 0..len-1 of their rows
        pv, prow, poff, _ = _ragged([p for p, _ in items])
        # the candidates, one after another after their prompt: candidate j (over all decisions)
        # belongs to decision cdec[j], is its candidate number ck[j] and starts at column cstart[j]
        cv, crow, coff, clen = _ragged([c for _, cs in items for c in cs])
        flat = len(clen)
        cdec = np.repeat(np.arange(n, dtype=np.int64), ncand)
        ck = np.arange(flat, dtype=np.int64) - (np.cumsum(ncand) - ncand)[cdec]
        dtot = np.bincount(cdec, weights=clen, minlength=n).astype(np.int64)  # candidate tokens per decision
        before = np.cumsum(clen) - clen - (np.cumsum(dtot) - dtot)[cdec]  # of the decision's earlier candidates
        cstart = plen[cdec] + before
        width = int((plen + dtot).max())
        ids_np = np.full((n, width), pad, dtype=np.int64)
        seg_np = np.full((n, width), -1, dtype=np.int64)  # 0: prompt, k + 1: candidate k, -1: padding
        pos_np = np.zeros((n, width), dtype=np.int64)
        ids_np[prow, poff] = pv
        seg_np[prow, poff] = 0
        pos_np[prow, poff] = poff
        tdec = cdec[crow]  # each candidate token's decision (row of the pass)
        tcol = cstart[crow] + coff
        ids_np[tdec, tcol] = cv
        seg_np[tdec, tcol] = ck[crow] + 1
        pos_np[tdec, tcol] = plen[tdec] + coff
        # (row, column) of the logits predicting each candidate token: the prompt's last column
        # for a candidate's first token, the column before it for the others
        rows = tdec
        cols = np.where(coff == 0, plen[tdec] - 1, tcol - 1)
        owner = crow  # the candidate (over all decisions) each token belongs to
        ids, seg, pos = (torch.from_numpy(x).to(dev) for x in (ids_np, seg_np, pos_np))
        seen = (seg[:, None, :] == 0) | (seg[:, None, :] == seg[:, :, None])  # (rows, query, key)
        seen &= torch.ones((width, width), dtype=torch.bool, device=dev).tril()
        # additive, 0 where seen and the dtype's minimum elsewhere, (batch, 1, query, key): the
        # form eager attention adds to its scores and sdpa takes as a float mask; transformers
        # passes a 4D mask through as it is
        dtype = self.module.get_input_embeddings().weight.dtype
        mask = torch.zeros((n, 1, width, width), dtype=dtype, device=dev)
        mask.masked_fill_(~seen[:, None], torch.finfo(dtype).min)
        # no logits for the prompt before its last token: the (tokens x vocabulary) logits
        # of the whole sequence would dwarf the rest
        keep = width - min(len(p) for p, _ in items) + 1
        logits = module(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False,
                        **_last_logits(keep)).logits
        cols_t = torch.from_numpy(cols - (width - logits.shape[1])).to(dev)
        picked = logits[torch.from_numpy(rows).to(dev), cols_t]  # (candidate tokens, vocab)
        tgt = torch.from_numpy(cv).to(dev)  # the candidate tokens, in the same order
        tok = torch.log_softmax(picked.float(), dim=-1).gather(1, tgt[:, None]).squeeze(1)
        sums = torch.zeros(flat, dtype=tok.dtype, device=dev).index_add(0, torch.from_numpy(owner).to(dev), tok)
        return list(torch.split(sums, ncand.tolist()))

    @torch.no_grad()
    def _act_score(self, contexts: Sequence[Context], rng: np.random.Generator, temperature: float) -> list[Decision]:
        self.module.eval()
        made = [self.score_item_trimmed(c) for c in contexts]
        # equal decisions (a group's first prompts, revisited states) are scored once, and the
        # distinct ones in passes of similar width (``_score_groups``)
        firsts, inverse = _distinct([(p, r) for _, p, r, _ in made])
        distinct = [made[i] for i in firsts]
        once: list[torch.Tensor | None] = [None] * len(distinct)
        impl = self.score_impl_for(loss=False)
        for group in self._score_groups([(len(p), [len(c) for c in r]) for _, p, r, _ in distinct],
                                        self.micro_batch_size, impl):
            logps = self._distinct_logps([(distinct[i][1], distinct[i][2]) for i in group], impl=impl)
            for i, s in zip(group, logps, strict=True):
                once[i] = s.double().cpu()
        scores = [once[j] for j in inverse]
        out = []
        for (cands, prompt, resp, trimmed), s in zip(made, scores, strict=True):
            if temperature > 0:
                p = torch.softmax(s / temperature, dim=0).numpy()
                # inverse-CDF draw with the rollout's generator, as the scorer policy does
                k = min(int(np.searchsorted(np.cumsum(p), rng.random() * p.sum(), side="right")), len(cands) - 1)
            else:
                k = int(torch.argmax(s))
            logp = float(torch.log_softmax(s / self.temperature, dim=0)[k])
            out.append(Decision(action=cands[k], response=score_response(cands[k]), malformed=False, logp=logp,
                                data={"prompt": prompt, "cands": resp, "choice": k, "prompt_trimmed": trimmed}))
        return out

    def _evaluate_score(self, batch: dict[str, Any], module: nn.Module) -> TokenStats:
        sums = self.candidate_logps(batch["items"], module, impl=self.score_impl_for(loss=True),
                                    distinct=batch.get("distinct"))
        width = max(len(s) for s in sums)
        scores = torch.full((len(sums), width), float("-inf"), device=sums[0].device)
        for i, s in enumerate(sums):
            scores[i, : len(s)] = s
        logp_all = torch.log_softmax(scores / self.temperature, dim=-1)
        logp = logp_all.gather(1, batch["choice"].to(scores.device)[:, None])
        finite = torch.where(torch.isfinite(logp_all), logp_all, 0.0)
        entropy = -(logp_all.exp() * finite).sum(-1, keepdim=True)
        return TokenStats(logp=logp, entropy=entropy, mask=torch.ones_like(logp))
