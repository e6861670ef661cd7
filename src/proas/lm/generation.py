"""Generate mode of the ``lm`` policy: sampling answers, with each token's log-probability,
through Hugging Face ``generate`` or the static-cache decoder (``proas.lm.decode``), on
the rollout copy of the weights."""

from __future__ import annotations

import copy
import warnings
from typing import Any, Sequence

import torch
from torch import nn

from proas.lm.prompt import project_action
from proas.policies.base import Context, Decision


class _DrawnLogp:
    """A ``generate`` logits processor, first in the list, that records the temperature-1
    log-probability of each drawn token: at each step it reads the token the previous step drew
    (the last of ``input_ids``) from that step's log-softmax, then keeps this step's; ``finish``
    reads the last draw from the sequences."""

    def __init__(self):
        self.prev: torch.Tensor | None = None
        self.out: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.prev is not None:
            self.out.append(self.prev.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self.prev = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, gen: torch.Tensor) -> torch.Tensor:
        """``(B, T)`` log-probs of the ``(B, T)`` generated tokens ``gen``."""
        if self.prev is not None and len(self.out) < gen.shape[1]:
            self.out.append(self.prev.gather(-1, gen[:, len(self.out), None]).squeeze(-1))
        self.prev = None
        if not self.out:
            return torch.zeros((gen.shape[0], 0), dtype=torch.float32, device=gen.device)
        return torch.stack(self.out, dim=1)


class GenerationMixin:
    """``LMPolicy``'s generate mode: ``act`` there, ``generate_ids``, the static decoder and the
    rollout weights."""

    def rollout_module(self) -> nn.Module:
        """The model that generate mode decodes with: the model itself, or under autocast a copy
        of it in the autocast dtype (verl's rollout weights: bf16, synced from the fp32 actor),
        so that decoding neither casts every weight at every token nor changes the static
        decoder's buffers. The copy is refreshed whenever a weight of the model has changed
        in place since (an optimiser step, a checkpoint load): their version counters say so."""
        if self.autocast_dtype is None:
            return self.module
        version = tuple(q._version for q in self.module.parameters())
        if self._rollout is None:
            self._rollout = copy.deepcopy(self.module)
            self._rollout.requires_grad_(False)
            self._rollout.eval()
            # the weights only: buffers such as RoPE's frequencies keep their precision
            for q in self._rollout.parameters():
                q.data = q.data.to(self.autocast_dtype)
        elif version != self._rollout_version:
            with torch.no_grad():
                for dst, src in zip(self._rollout.parameters(), self.module.parameters(), strict=True):
                    dst.copy_(src)
        self._rollout_version = version
        return self._rollout

    def _act_generate(self, contexts: Sequence[Context], temperature: float) -> list[Decision]:
        """``act`` in generate mode (under ``act``'s ``no_grad``): sample an answer per context and
        project it to an action."""
        fitted = [self.fit_prompt(c) for c in contexts]
        prompts = [p for p, _ in fitted]
        seqs, logp_all = self.generate_ids(prompts, temperature)
        pad = self.tokenizer.pad_token_id
        decisions = []
        for i, ctx in enumerate(contexts):
            resp: list[int] = []
            for tok in seqs[i].tolist():
                resp.append(tok)
                if tok in self.stop_ids:
                    break
            if resp and resp[-1] == pad and pad not in self.stop_ids:
                resp = resp[:-1]
            # a response without a stop token was cut by the max_new_tokens budget: it is scored
            # as written (usually malformed), counted by the trainer and warned about once
            truncated = not resp or resp[-1] not in self.stop_ids
            if truncated and not self._warned_truncation:
                self._warned_truncation = True
                warnings.warn(f"lm policy: a response reached policy.lm.max_new_tokens={self.max_new_tokens} "
                              "without an end token and was cut (the trainer reports the fraction as "
                              "rollout/truncated_responses)", RuntimeWarning, stacklevel=4)
            text = self.tokenizer.decode(resp, skip_special_tokens=True)
            action, malformed = project_action(text, ctx.env_name)
            decisions.append(Decision(action=action, response=text, malformed=malformed,
                                      logp=float(logp_all[i, : len(resp)].sum()),
                                      data={"prompt": prompts[i], "response": resp, "truncated": truncated,
                                            "prompt_trimmed": fitted[i][1]}))
        return decisions
    @torch.no_grad()
    def generate_ids(self, prompts: Sequence[Sequence[int]], temperature: float, decode: str | None = None,
                     min_new_tokens: int = 0, **generate_options: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(tokens, logp)``, ``(len(prompts), n)`` CPU tensors: each prompt's sampled
        continuation (up to ``max_new_tokens``; a row is read up to its first stop id, later
        entries are padding) and each token's log-probability at temperature 1.

        ``decode`` (default ``self.decode``): ``hf`` runs ``model.generate``; ``static`` the
        static-cache decoder (``decode.StaticDecoder``; models it cannot run use ``hf``).
        ``min_new_tokens`` forbids stop ids before that many tokens (``generate``'s meaning; for
        timing random-weight models, which rarely stop on their own). ``generate_options`` go to
        ``generate`` as they are (``cache_implementation="static"`` for a benchmark).

        Both decode on ``rollout_module()``. ``hf`` keeps no logits: a logits processor that
        runs first at every step (before the temperature and ``min_new_tokens``) takes each
        token's log-probability from the raw logits when the next step shows which token was
        drawn, so one ``(B, V)`` log-softmax lives at a time, never ``generate``'s ``(B, T, V)``
        ``output_logits``.
        """
        from transformers import LogitsProcessorList, MinNewTokensLengthLogitsProcessor, TemperatureLogitsWarper

        decode = self.decode if decode is None else decode
        model = self.rollout_module()
        model.eval()
        if decode == "static" and self.static_decoder() is not None:
            return self.static_decoder().generate(prompts, self.max_new_tokens, temperature, self.stop_ids,
                                                  min_new_tokens=min_new_tokens)
        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_token_id
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding, as generation needs
            ids[i, width - len(p):] = torch.tensor(list(p))
            mask[i, width - len(p):] = 1
        record = _DrawnLogp()
        procs = LogitsProcessorList([record])
        if min_new_tokens > 0:
            procs.append(MinNewTokensLengthLogitsProcessor(width, min_new_tokens, self.stop_ids, device=self.device))
        if temperature > 0 and temperature != 1.0:
            procs.append(TemperatureLogitsWarper(temperature))
        # every knob that changes the distribution set here, so none comes from the model's
        # generation_config (an instruct model's ships top_k, top_p, a temperature and a
        # repetition penalty); sampling itself only when drawing
        sampling = dict(temperature=1.0, top_p=1.0, top_k=0, typical_p=1.0) if temperature > 0 else {}
        out = model.generate(
            input_ids=ids.to(self.device), attention_mask=mask.to(self.device), max_new_tokens=self.max_new_tokens,
            do_sample=temperature > 0, **sampling, repetition_penalty=1.0, no_repeat_ngram_size=0,
            eos_token_id=self.stop_ids, pad_token_id=pad, return_dict_in_generate=True, logits_processor=procs,
            **generate_options,
        )
        gen = out.sequences[:, width:]
        return gen.cpu(), record.finish(gen).cpu()

    def static_decoder(self):
        """The ``StaticDecoder`` of the rollout model (built on first use), or None when the
        model cannot use it (warned once; ``hf`` decoding is used instead)."""
        max_len = self.max_prompt_tokens + self.max_new_tokens
        model = self.rollout_module()
        if self._static and (self._static.model is not model or self._static.max_len < max_len):
            self._static = None  # another model or larger budgets than it was built for
        if self._static is None:
            from proas.lm.decode import StaticDecoder, static_unsupported

            why = static_unsupported(model)
            if why:
                warnings.warn(f"lm policy: policy.lm.decode=static does not support this model ({why}); "
                              "decoding with hf generate instead", RuntimeWarning, stacklevel=3)
                self._static = False
            else:
                self._static = StaticDecoder(model, max_len, self.tokenizer.pad_token_id)
        return self._static or None
