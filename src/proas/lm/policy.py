"""``LMPolicy``: the ``lm`` policy, put together from its parts (prompt, generation,
scoring, optimisation, checkpoints), with its construction and the mode switch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from proas.errors import ProasError
from proas.lm.checkpoints import CheckpointMixin
from proas.lm.generation import GenerationMixin
from proas.lm.model import (
    MODEL_CONFIGS,
    _set_attn,
    check_weights_dir,
    is_hf_model_dir,
    load_tokenizer,
    local_tokenizer,
    resolve_device,
    resolve_precision,
)
from proas.lm.optim import OptimisationMixin
from proas.lm.options import DECODERS, LR_SCHEDULES, MODES, SCORE_IMPLS, SCORE_NORMS, attn_problem, hold_sdpa_kernel
from proas.lm.prompt import _CHAT_TEMPLATE, PromptMixin
from proas.lm.scoring import ScoringMixin, _distinct
from proas.policies.base import Context, Decision, Policy


class LMPolicy(PromptMixin, GenerationMixin, ScoringMixin, OptimisationMixin, CheckpointMixin, Policy):
    """A causal LM that writes ``<think>…</think><action>…</action>`` answers."""

    kind = "lm"

    @property
    def exact_rollout_logp(self) -> bool:  # type: ignore[override]
        """Score mode: a decision's log-prob is the candidate softmax that ``evaluate`` computes,
        from the same weights and the same passes (equal up to float rounding, as the tests
        check), so the trainer reuses it as PPO's old log-prob and saves a forward pass over
        every decision of the step. Generate mode recomputes it (verl's ``old_log_prob``)."""
        return self.mode == "score"

    def __init__(self, model: nn.Module, tokenizer, *, device: torch.device, max_new_tokens: int = 512,
                 max_prompt_tokens: int = 2048, history_length: int = 2, lora: bool = False,
                 mode: str = "generate", temperature: float = 1.0, micro_batch_size: int = 8,
                 score_tokens_per_pass: int = 262144, score_impl: str = "auto",
                 decode: str = "hf", score_norm: str = "sum", autocast_dtype: torch.dtype | None = None,
                 weight_decay: float = 0.01, lr_schedule: str = "constant", warmup_ratio: float = 0.0):
        if mode not in MODES:
            raise ProasError(f"policy.lm.mode={mode!r} is not one of {', '.join(MODES)}")
        if score_norm not in SCORE_NORMS:
            raise ProasError(f"policy.lm.score_norm={score_norm!r} is not one of {', '.join(SCORE_NORMS)}")
        if lr_schedule not in LR_SCHEDULES:
            raise ProasError(f"policy.lm.lr_schedule={lr_schedule!r} is not one of {', '.join(LR_SCHEDULES)}")
        #: score mode: a candidate's score is the ``sum`` or the ``mean`` of its tokens' log-probs
        self.score_norm = score_norm
        #: the dtype of the forward passes under ``torch.autocast`` (None: the weights' own)
        self.autocast_dtype = autocast_dtype
        #: the optimiser and its schedule (``make_optimizer``, ``make_scheduler``)
        self.weight_decay = weight_decay
        self.lr_schedule = lr_schedule
        self.warmup_ratio = warmup_ratio
        #: generate mode under autocast: the bf16 copy of the weights that decodes, and the
        #: weights' version counters when it was last refreshed (``rollout_module``)
        self._rollout: nn.Module | None = None
        self._rollout_version: tuple | None = None
        if decode not in DECODERS:
            raise ProasError(f"policy.lm.decode={decode!r} is not one of {', '.join(DECODERS)}")
        if score_impl not in SCORE_IMPLS:
            raise ProasError(f"policy.lm.score_impl={score_impl!r} is not one of {', '.join(SCORE_IMPLS)}")
        #: generate mode's decoder: ``hf`` (``model.generate``) or ``static`` (``decode``)
        self.decode = decode
        self._static: Any = None
        self.module = model
        self.mode = mode
        #: score mode: the temperature of the candidate softmax the losses use, the training
        #: rollouts' (``policy.temperature``), so the rollout log-prob is the PPO old log-prob
        self.temperature = temperature
        #: score mode: decisions per batched scoring pass while acting
        self.micro_batch_size = micro_batch_size
        #: score mode: tokens per forward pass (``_score_groups``)
        self.score_tokens_per_pass = score_tokens_per_pass
        #: score mode's forward passes: ``expand``, ``packed``, ``shared`` or ``auto`` (``SCORE_IMPLS``)
        self.score_impl = score_impl
        self._warned_truncation = False
        self._resp_cache: dict[str, list[int]] = {}
        self._prompt_memo: dict[str, list[int]] = {}
        self.tokenizer = tokenizer
        self.device = device
        self.max_new_tokens = max_new_tokens
        self.max_prompt_tokens = max_prompt_tokens
        self.history_length = history_length
        self.lora = lora
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.stop_ids = sorted({i for i in [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")]
                                if isinstance(i, int) and i >= 0})

    @classmethod
    def from_config(cls, lm, seed: int = 0, temperature: float = 1.0,
                    load_run: Callable[[str], tuple[Any, Any]] | None = None) -> "LMPolicy":
        """Build from ``proas.train.config.LMConfig``; ``temperature`` is ``policy.temperature``
        (the score mode's loss temperature). ``load_run`` gives the ``(model, tokenizer)`` of the
        proas run or checkpoint that ``init_from`` names (the trainer's ``build_policy`` passes
        ``proas.train.warm_start.lm_from_run``; reading a run is the trainer's business)."""
        from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

        device = resolve_device(lm.device)
        dtype, autocast_dtype = resolve_precision(lm.dtype, getattr(lm, "autocast", "auto"), device,
                                                  lora=lm.lora_rank > 0)
        attn = getattr(lm, "attn_implementation", None)
        problem = attn_problem(attn, lm.mode, lm.score_impl, getattr(lm, "gradient_checkpointing", False))
        if problem:
            raise ProasError(problem)
        attn_kw = {"attn_implementation": attn} if attn else {}
        hold_sdpa_kernel(getattr(lm, "sdpa_kernel", None), str(device))
        torch.manual_seed(seed)
        # ``init_from``: a Hugging Face directory loads like ``model_path``; a proas run or
        # checkpoint (an SFT run) rebuilds that run's policy and takes its (merged) weights
        model_path, key = lm.model_path, "model_path"
        if lm.init_from and is_hf_model_dir(lm.init_from):
            model_path, key = lm.init_from, "init_from"
        if lm.init_from and key != "init_from":
            if load_run is None:
                raise ProasError(f"policy.lm.init_from={lm.init_from!r} names a proas run or checkpoint: build "
                                 "the policy with proas.train.warm_start.build_policy, which loads it")
            model, tokenizer = load_run(lm.init_from)
            model = model.to(dtype)
            if attn:
                _set_attn(model, attn, "init_from")
        elif model_path:
            tokenizer = load_tokenizer(lm.tokenizer_path or model_path,
                                       "policy.lm.tokenizer_path" if lm.tokenizer_path else f"policy.lm.{key}")
            check_weights_dir(model_path, f"policy.lm.{key}")
            try:
                # safetensors only: a pickle's weights are never unpickled (check_weights_dir);
                # nor is the directory's own code (auto_map) run
                model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype, local_files_only=True,
                                                             use_safetensors=True, trust_remote_code=False,
                                                             **attn_kw)
            except Exception as exc:  # noqa: BLE001 - a damaged file ends in many types (SafetensorError, ...)
                first = (str(exc).strip().splitlines() or [""])[0][:300]
                raise ProasError(f"policy.lm.{key}={model_path!r}: cannot load a local model "
                                 f"({type(exc).__name__}: {first})") from None
        else:
            if lm.model_config not in MODEL_CONFIGS:
                raise ProasError(f"config: policy.lm.model_config={lm.model_config!r} is not one of "
                                 f"{', '.join(MODEL_CONFIGS)}")
            arch = MODEL_CONFIGS[lm.model_config]
            if lm.tokenizer_path:
                tokenizer = load_tokenizer(lm.tokenizer_path, "policy.lm.tokenizer_path")
            else:
                tokenizer = local_tokenizer(min(1024, arch["vocab_size"]))
            # a tokenizer larger than the architecture's vocabulary (``tokenizer_path``) widens it
            arch = dict(arch, vocab_size=max(arch["vocab_size"], len(tokenizer)))
            config = Qwen2Config(**arch, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
            model = Qwen2ForCausalLM(config).to(dtype)
            if attn:
                _set_attn(model, attn, "model_config")
        if tokenizer.chat_template is None:
            tokenizer.chat_template = _CHAT_TEMPLATE
        model.to(device)
        if getattr(lm, "gradient_checkpointing", False):
            # non-reentrant: gradients reach LoRA adapters without inputs that require them
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if lm.lora_rank > 0:
            from peft import LoraConfig, get_peft_model

            # peft keeps the adapters in fp32 over a bf16 base (``autocast_adapter_dtype``)
            model = get_peft_model(model, LoraConfig(r=lm.lora_rank, lora_alpha=lm.lora_alpha, lora_dropout=0.0,
                                                     target_modules="all-linear", task_type="CAUSAL_LM"))
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        return cls(model, tokenizer, device=device, max_new_tokens=lm.max_new_tokens,
                   max_prompt_tokens=lm.max_prompt_tokens, history_length=lm.history_length,
                   lora=lm.lora_rank > 0, mode=lm.mode, temperature=temperature,
                   micro_batch_size=lm.micro_batch_size, decode=lm.decode,
                   score_tokens_per_pass=lm.score_tokens_per_pass, score_impl=lm.score_impl,
                   score_norm=getattr(lm, "score_norm", "sum"), autocast_dtype=autocast_dtype,
                   weight_decay=getattr(lm, "weight_decay", 0.01),
                   lr_schedule=getattr(lm, "lr_schedule", "constant"),
                   warmup_ratio=getattr(lm, "warmup_ratio", 0.0))

    @torch.no_grad()
    def act(self, contexts: Sequence[Context], rng: np.random.Generator, temperature: float = 1.0) -> list[Decision]:
        if not contexts:
            return []
        if self.mode == "score":
            return self._act_score(contexts, rng, temperature)
        return self._act_generate(contexts, temperature)

    def micro_batches(self, data: Sequence[dict[str, Any]], limit: int) -> list[list[int]]:
        if self.mode != "score":
            return super().micro_batches(data, limit)
        # equal decisions side by side, so that a pass scores each once (``candidate_logps``)
        return self._score_groups([(len(d["prompt"]), [len(c) for c in d["cands"]]) for d in data], limit,
                                  self.score_impl_for(loss=True),
                                  classes=_distinct([(d["prompt"], d["cands"]) for d in data])[1])
