"""Optimisation side of the ``lm`` policy: the precision of its forward passes, the
optimiser and its schedule, the reference policy, and the token log-probs the losses read."""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Sequence

import torch
from torch import nn

from proas.lm.model import _AdapterOff, _last_logits
from proas.lm.scoring import _distinct
from proas.policies.base import TokenStats

#: weights without weight decay, by name (the Hugging Face Trainer's ``get_decay_parameter_names``)
_NO_DECAY = [r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]


class OptimisationMixin:
    """``LMPolicy``'s training side: ``compute``, ``make_optimizer``, ``make_scheduler``,
    ``reference_module``, ``prepare`` and ``evaluate``."""

    def reference_module(self) -> nn.Module:
        if self.lora:
            return _AdapterOff(self.module)
        ref = copy.deepcopy(self.module)
        ref.requires_grad_(False)
        ref.eval()
        return ref

    def compute(self) -> contextlib.AbstractContextManager:
        """The context of this policy's forward passes: ``torch.autocast`` to ``autocast_dtype``
        (bf16 matmuls over fp32 weights), or nothing when it is None."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def make_optimizer(self, lr: float) -> torch.optim.Optimizer:
        """AdamW (betas 0.9, 0.999, verl's and the Hugging Face Trainer's) over the trainable
        weights, with ``weight_decay`` on all but biases and normalisation weights (the
        Trainer's ``get_decay_parameter_names`` rule). Fused on a GPU."""
        from transformers.trainer_pt_utils import get_parameter_names

        decay = set(get_parameter_names(self.module, [nn.LayerNorm], _NO_DECAY))
        named = [(n, q) for n, q in self.module.named_parameters() if q.requires_grad]
        groups = [{"params": [q for n, q in named if n in decay], "weight_decay": self.weight_decay},
                  {"params": [q for n, q in named if n not in decay], "weight_decay": 0.0}]
        fast = {"fused": True} if self.device.type == "cuda" else {"foreach": True}
        return torch.optim.AdamW([g for g in groups if g["params"]], lr=lr, betas=(0.9, 0.999), eps=1e-8, **fast)

    def make_scheduler(self, optimizer: torch.optim.Optimizer, total_steps: int):
        """The learning-rate schedule over ``total_steps`` (``transformers.get_scheduler``): a
        linear warmup from 0 over ``warmup_ratio`` of them, then ``lr_schedule`` (``constant``
        keeps the peak rate; ``linear`` and ``cosine`` end at 0)."""
        from transformers import get_scheduler

        total = max(1, int(total_steps))
        warmup = int(round(self.warmup_ratio * total))
        name = "constant_with_warmup" if self.lr_schedule == "constant" and warmup else self.lr_schedule
        return get_scheduler(name, optimizer, num_warmup_steps=warmup, num_training_steps=total)

    def prepare(self, data: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Prompt+response ids (prompts left-padded, responses right-padded), their positions and
        the response tokens (score mode: the prompts, candidates and choices, and which of them
        are equal, ``_distinct``: once here for the loss's and the reference's passes alike)."""
        if self.mode == "score":
            items = [(list(d["prompt"]), [list(c) for c in d["cands"]]) for d in data]
            return {"items": items, "distinct": _distinct(items),
                    "choice": torch.tensor([d["choice"] for d in data], dtype=torch.long)}
        # prompts left-padded to end at one column, responses right-padded after it: every
        # row's response logits are then the same last columns, and only those are computed
        plen = max(len(d["prompt"]) for d in data)
        resp_w = max(1, max(len(d["response"]) for d in data))
        pad = self.tokenizer.pad_token_id
        n = len(data)
        ids = torch.full((n, plen + resp_w), pad, dtype=torch.long)
        attn = torch.zeros((n, plen + resp_w), dtype=torch.long)
        tgt = torch.zeros((n, resp_w), dtype=torch.long)
        rmask = torch.zeros((n, resp_w), dtype=torch.float32)
        for i, d in enumerate(data):
            p, r = list(d["prompt"]), list(d["response"])
            ids[i, plen - len(p): plen + len(r)] = torch.tensor(p + r)
            attn[i, plen - len(p): plen + len(r)] = 1
            if r:
                tgt[i, : len(r)] = torch.tensor(r)
                rmask[i, : len(r)] = 1.0
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        return {"ids": ids, "attn": attn, "pos": pos, "tgt": tgt, "mask": rmask}

    def evaluate(self, batch: dict[str, Any], module: nn.Module | None = None) -> TokenStats:
        module = module if module is not None else self.module
        if module is self.module:
            module.train()
        if self.mode == "score":
            return self._evaluate_score(batch, module)
        dev = self.device
        tgt = batch["tgt"].to(dev)
        resp_w = tgt.shape[1]
        with self.compute():
            # the last column is only a target; position t predicts token t + 1, so the last
            # ``resp_w`` logits are the response's, and only they are computed: the prompt's
            # (B, T, V) logits at 2048-token prompts would dwarf the rest
            logits = module(input_ids=batch["ids"][:, :-1].to(dev), attention_mask=batch["attn"][:, :-1].to(dev),
                            position_ids=batch["pos"][:, :-1].to(dev), use_cache=False,
                            **_last_logits(resp_w)).logits
        logits = logits[:, -resp_w:]
        logp_all = torch.log_softmax(logits.float(), dim=-1)  # (B, R, V), the one float copy
        logp = logp_all.gather(-1, tgt[:, :, None]).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        mask = batch["mask"].to(dev)
        return TokenStats(logp=logp, entropy=entropy, mask=mask)
