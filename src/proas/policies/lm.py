"""The ``lm`` policy: a Hugging Face causal LM prompted in verl-agent's style.

Each step the model gets one user message (rendered with the tokenizer's chat template): the
task, the last ``history_length`` observation/action pairs, the current observation, the
admissible actions where the env has them, and the instruction to think inside
``<think>...</think>`` and answer inside ``<action>...</action>``. The answer is projected to an
action as verl-agent does: the text between the first ``<action>`` and ``</action>``; a response
without both tag pairs is *malformed*, and the trainer records the step as an error (the env
still receives the text, as in verl-agent, and usually rejects it).

Models come from a local directory (``model_path``; nothing is downloaded) or, for tests and
timing, from a named architecture with random weights (``model_config``: ``tiny``,
``qwen2.5-1.5b``, ``qwen2.5-7b``) and a small byte-level BPE tokenizer built on the spot.
Log-probs are per response token at temperature 1. LoRA via peft is optional. Training is mixed
precision by default, as verl's and TRL's: fp32 weights, forward passes in bf16 under
``torch.autocast`` on a GPU (``resolve_precision``), AdamW with weight decay and a warmup and
schedule (``make_optimizer``, ``make_scheduler``). Checkpoints are Hugging Face directories
(``save_pretrained``, ``load_pretrained``); docs/lm.md gives the decisions.
Generation runs through Hugging Face ``generate`` (``decode="hf"``) or a static-cache decoder
with CUDA graphs (``decode="static"``, ``proas.policies.lm_decode``) that gives the same outputs.

``mode="score"`` (GLAM, Carta et al. 2023) does not generate: it chooses among the env's
candidate actions (admissible plus invalid candidates, as the ``scorer`` policy does). Each
candidate's response is the one SFT teaches, ``<think>LM_THOUGHT</think><action>A</action>``
plus the end-of-turn token; its score is the summed log-probability of the response tokens after
the prompt (``score_norm="mean"``: their mean), and the policy is ``softmax(score / temperature)``
over the candidates. The leading
tokens shared by every candidate's response have the same log-probability for all of them and
cancel in the softmax, so they join the prompt: the prompt is encoded once per decision and the
candidates' distinct tokens are scored after it (``score_impl``: on its KV cache, expanded over
the candidates, or packed after it in one sequence with a mask that keeps the candidates apart).
For the losses a step is a one-"token" response, the chosen candidate, as
for the ``scorer``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import json
import re
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from proas.errors import ProasError
from proas.lm_options import DECODERS, LR_SCHEDULES, MODES, SCORE_IMPLS, SCORE_NORMS, attn_problem
from proas.policies.base import HF_FILES, POLICY_FILES, Context, Decision, Policy, TokenStats, candidate_actions

__all__ = ["DECODERS", "LMPolicy", "LM_THOUGHT", "MODES", "SCORE_IMPLS", "build_prompt", "project_action",
           "local_tokenizer", "MODEL_CONFIGS", "is_hf_model_dir", "load_tokenizer", "resolve_precision",
           "score_response", "train_tokenizer"]

#: the thought SFT teaches before the oracle action, and the one every scored candidate carries
LM_THOUGHT = "I will take the next step towards the goal."


def score_response(action: str) -> str:
    """The response text whose likelihood scores ``action`` in score mode (SFT's target text)."""
    return f"<think>{LM_THOUGHT}</think><action>{action}</action>"

#: random-weight architectures (Qwen2 family; sizes of Qwen2.5-1.5B / 7B for timing)
MODEL_CONFIGS: dict[str, dict[str, Any]] = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=1024, max_position_embeddings=4096),
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
                         rope_theta=1000000.0, tie_word_embeddings=True),
    "qwen2.5-7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                       num_key_value_heads=4, vocab_size=152064, max_position_embeddings=32768,
                       rope_theta=1000000.0, tie_word_embeddings=False),
}

_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_ENV_INTRO = {
    "household": "You are an expert agent acting in a household (the ALFRED embodied environment).",
    "shop": "You are an expert agent shopping on a web store (the WebShop environment).",
}

_ACTION_RE = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)
_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


def build_prompt(ctx: Context, history_length: int = 2) -> str:
    """The user message for one step (verl-agent's template structure, our wording)."""
    intro = _ENV_INTRO.get(ctx.env_name, "You are an expert agent acting in a text environment.")
    parts = [intro, f"Your task is to: {ctx.task}"]
    recent = ctx.history[-history_length:] if history_length > 0 else []
    if recent:
        first = len(ctx.history) - len(recent) + 1
        lines = [f"[Observation {first + k}: '{o}', Action {first + k}: '{a}']" for k, (o, a) in enumerate(recent)]
        parts.append(
            f"You have taken {ctx.step} step(s) so far. Your last {len(recent)} observation(s) and the action(s) "
            "you took:\n" + "\n".join(lines)
        )
    parts.append(f"You are now at step {ctx.step + 1}. Current observation: {ctx.observation}")
    if ctx.admissible is not None:
        parts.append("Admissible actions now: [" + ", ".join(f"'{a}'" for a in ctx.admissible if a != "help") + "].")
    parts.append(
        "Think about the situation step by step inside <think> </think> tags, then give exactly one "
        "action inside <action> </action> tags."
    )
    return "\n\n".join(parts)


def project_action(response: str, env_name: str = "") -> tuple[str, bool]:
    """Map a response to ``(action, malformed)``.

    The action is the stripped text inside the first ``<action>...</action>``; the response is
    malformed when that pair or a ``<think>...</think>`` pair is missing. A malformed response
    becomes the last 30 characters of the text (verl-agent's fallback), which the env rejects.
    Household commands are lower-case, so its actions are lower-cased.
    """
    m = _ACTION_RE.search(response)
    if m:
        action = m.group(1).strip()
        malformed = _THINK_RE.search(response) is None or not action
    else:
        action = response.strip()[-30:]
        malformed = True
    if env_name == "household":
        action = action.lower()
    return action, malformed


def train_tokenizer(texts, vocab_size: int, span: str = "word"):
    """A byte-level BPE tokenizer with the chat template, trained on ``texts`` (an iterable of
    strings), as a ``PreTrainedTokenizerFast``. Any text encodes and decodes back exactly: the
    byte alphabet is always in the vocabulary.

    ``span`` bounds the merges: ``word`` (GPT-2's pre-tokenizer: a token never crosses a word
    boundary) or ``line`` (tokens may span words within a line, so frequent phrases of a
    templated text become single tokens).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    if span == "word":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    elif span == "line":
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split("\n", "isolated"),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        raise ProasError(f"tokenizer span {span!r} is not word or line")
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", additional_special_tokens=["<|im_start|>"])
    fast.chat_template = _CHAT_TEMPLATE
    return fast


def local_tokenizer(vocab_size: int = 1024):
    """A byte-level BPE tokenizer with a chat template, trained here on a few lines of prompt text.

    Used with random-weight models (tests, timing) so nothing is downloaded; ``proas lm
    tokenizer`` trains one on an env's own text instead. The corpus must not change: runs of
    ``model_config`` models rebuild this tokenizer when loaded.
    """
    corpus = [
        build_prompt(
            Context(
                "household",
                "put some apple on table",
                "You see a table 1.",
                [("o", "go to table 1")],
                ["go to table 1", "take apple 1 from table 1"],
                [],
                1,
            )
        ),
        "<think> I should go to the table. </think><action>go to table 1</action>",
        "search[red shoes] click[buy now] open close take put move heat cool clean examine use",
    ]
    return train_tokenizer(corpus * 4, vocab_size)


@functools.lru_cache(maxsize=1)
def _cache_kwarg() -> str:
    """The forward keyword (and output field) of the KV cache: ``cache`` in recent transformers
    (which warns on the old name), ``past_key_values`` before; the rename spans every causal LM
    of a release."""
    from transformers import Qwen2ForCausalLM

    return "cache" if "cache" in inspect.signature(Qwen2ForCausalLM.forward).parameters else "past_key_values"


def load_tokenizer(path: str):
    """The tokenizer saved in ``path`` (no download).

    A tokenizer built by proas (``local_tokenizer``, ``proas lm tokenizer``) is saved as a plain
    fast tokenizer; ``AutoTokenizer`` would reload it as the tokenizer class of the model saved
    beside it (Qwen2's), whose own pre-tokenizer splits text differently, so the token ids would
    no longer be the ones the model was trained on. Such a directory is loaded as it was saved.
    """
    import json
    from pathlib import Path

    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    cfg_file = Path(path) / "tokenizer_config.json"
    cls = json.loads(cfg_file.read_text()).get("tokenizer_class") if cfg_file.is_file() else None
    if cls in ("TokenizersBackend", "PreTrainedTokenizerFast"):
        return PreTrainedTokenizerFast.from_pretrained(path, local_files_only=True)
    return AutoTokenizer.from_pretrained(path, local_files_only=True)


@functools.lru_cache(maxsize=1)
def _logits_kwarg() -> str | None:
    """The forward keyword that limits the logits to the last positions (``logits_to_keep``,
    ``num_logits_to_keep`` before transformers 4.50, none before that): a prompt's full
    (length x vocabulary) logits would be gigabytes with Qwen's 151k-token vocabulary."""
    from transformers import Qwen2ForCausalLM

    params = inspect.signature(Qwen2ForCausalLM.forward).parameters
    return next((name for name in ("logits_to_keep", "num_logits_to_keep") if name in params), None)


def _last_logits(k: int) -> dict[str, int]:
    """Forward keywords that compute the logits of the last ``k`` positions only (all of them
    where the keyword does not exist)."""
    name = _logits_kwarg()
    return {name: k} if name else {}


#: weights without weight decay, by name (the Hugging Face Trainer's ``get_decay_parameter_names``)
_NO_DECAY = [r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]


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


class _AdapterOff(nn.Module):
    """The reference policy of a LoRA model: the same model with its adapters switched off."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.inner = [model]  # a list, so the model is not registered (and not copied) twice

    def forward(self, **kwargs):
        model = self.inner[0]
        with model.disable_adapter():
            return model(**kwargs)


def is_hf_model_dir(path: str | Path) -> bool:
    """Whether ``path`` is a Hugging Face model directory rather than a proas run or checkpoint
    (an lm checkpoint is a model directory too, but is read as a checkpoint: verified, with its
    state)."""
    return (Path(path) / "config.json").is_file() and not (Path(path) / "state.pt").exists()


_DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
           "fp32": torch.float32, "float32": torch.float32}


def resolve_precision(dtype: str, autocast: str, device: torch.device,
                      lora: bool = False) -> tuple[torch.dtype, torch.dtype | None]:
    """``(weights' dtype, autocast dtype or None)`` of ``policy.lm.dtype`` and ``policy.lm.autocast``
    on ``device``.

    The default is mixed precision as verl and TRL train: fp32 weights, so that Adam's small
    updates accumulate instead of rounding away at bf16's 8-bit mantissa, and bf16 forward passes
    under ``torch.autocast`` on a GPU. On a CPU autocast is off (fp32 throughout), unless asked
    for. A LoRA model's base is frozen, so with autocast on a GPU it is kept in bf16 and only the
    adapters are fp32 (peft's default). An explicit ``dtype`` sets every weight.
    """
    if autocast == "auto":
        compute = torch.bfloat16 if device.type == "cuda" else None
    elif autocast == "bf16":
        compute = torch.bfloat16
    elif autocast == "none":
        compute = None
    else:
        raise ProasError(f"config: policy.lm.autocast={autocast!r} is not auto, bf16 or none")
    if dtype == "auto":
        weights = torch.bfloat16 if (lora and compute is not None and device.type == "cuda") else torch.float32
    else:
        weights = _DTYPES.get(dtype)
        if weights is None:
            raise ProasError(f"config: policy.lm.dtype={dtype!r} is not auto, bf16, fp16 or fp32")
    if compute is not None and weights != torch.float32 and not lora:
        compute = None  # the weights are already in a low precision: nothing to cast to
    return weights, compute


def _set_attn(model: nn.Module, attn: str, key: str) -> None:
    """Switch a built model to attention implementation ``attn`` (``attn_implementation`` of a
    model not loaded by ``from_pretrained``)."""
    try:
        model.set_attn_implementation(attn)
    except (ValueError, ImportError) as exc:
        raise ProasError(f"policy.lm.attn_implementation={attn!r}: not available for the {key} model "
                         f"({str(exc).splitlines()[0]})") from None


class LMPolicy(Policy):
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
        #: generate mode's decoder: ``hf`` (``model.generate``) or ``static`` (``lm_decode``)
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
        #: score mode's forward passes: ``expand``, ``packed`` or ``auto`` (``SCORE_IMPLS``)
        self.score_impl = score_impl
        self._warned_truncation = False
        self._resp_cache: dict[str, list[int]] = {}
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

    # ---- construction
    @classmethod
    def from_config(cls, lm, seed: int = 0, temperature: float = 1.0,
                    load_run: Callable[[str], tuple[Any, Any]] | None = None) -> "LMPolicy":
        """Build from ``proas.train.config.LMConfig``; ``temperature`` is ``policy.temperature``
        (the score mode's loss temperature). ``load_run`` gives the ``(model, tokenizer)`` of the
        proas run or checkpoint that ``init_from`` names (the trainer's ``build_policy`` passes
        ``proas.train.warm_start.lm_from_run``; reading a run is the trainer's business)."""
        from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

        device = torch.device("cuda" if (lm.device == "auto" and torch.cuda.is_available()) else
                              ("cpu" if lm.device == "auto" else lm.device))
        dtype, autocast_dtype = resolve_precision(lm.dtype, getattr(lm, "autocast", "auto"), device,
                                                  lora=lm.lora_rank > 0)
        attn = getattr(lm, "attn_implementation", None)
        problem = attn_problem(attn, lm.mode, lm.score_impl, getattr(lm, "gradient_checkpointing", False))
        if problem:
            raise ProasError(problem)
        attn_kw = {"attn_implementation": attn} if attn else {}
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
            try:
                tokenizer = load_tokenizer(lm.tokenizer_path or model_path)
                model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype, local_files_only=True,
                                                             **attn_kw)
            except (OSError, ValueError, ImportError) as exc:
                raise ProasError(f"policy.lm.{key}={model_path!r}: cannot load a local model "
                                 f"({str(exc).splitlines()[0]})") from None
        else:
            if lm.model_config not in MODEL_CONFIGS:
                raise ProasError(f"config: policy.lm.model_config={lm.model_config!r} is not one of "
                                 f"{', '.join(MODEL_CONFIGS)}")
            arch = MODEL_CONFIGS[lm.model_config]
            if lm.tokenizer_path:
                tokenizer = load_tokenizer(lm.tokenizer_path)
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

    def reference_module(self) -> nn.Module:
        if self.lora:
            return _AdapterOff(self.module)
        ref = copy.deepcopy(self.module)
        ref.requires_grad_(False)
        ref.eval()
        return ref

    # ---- precision and the optimiser
    def compute(self) -> contextlib.AbstractContextManager:
        """The context of this policy's forward passes: ``torch.autocast`` to ``autocast_dtype``
        (bf16 matmuls over fp32 weights), or nothing when it is None."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

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

    # ---- checkpoints: a Hugging Face directory
    def checkpoint_state(self) -> dict[str, Any]:
        """No weights in ``state.pt``: the state names the Hugging Face files that
        ``checkpoint_writer`` (``save_pretrained``) writes beside it."""
        return {POLICY_FILES: HF_FILES}

    def checkpoint_writer(self) -> Callable[[Path], None]:
        return self.save_pretrained

    def save_pretrained(self, directory: str | Path) -> None:
        """Write the model (``save_pretrained``: config and safetensors weights, or with LoRA the
        adapters and their config) and the tokenizer to ``directory``."""
        self.module.save_pretrained(directory, safe_serialization=True)
        self.tokenizer.save_pretrained(directory)

    def load_checkpoint(self, directory: Path, state: dict[str, Any]) -> None:
        """Weights from a checkpoint: the Hugging Face files ``save_pretrained`` wrote
        (``load_pretrained``) or, in a checkpoint from before them, ``state["policy"]``."""
        if state.get(POLICY_FILES) == HF_FILES:
            self.load_pretrained(directory)
        else:
            self.load_state_dict(state["policy"])

    def load_pretrained(self, directory: str | Path) -> None:
        """Load the weights that ``save_pretrained`` wrote into this policy's model, in place
        (the optimiser keeps its parameters), bit for bit. Read with safetensors: no code runs.
        Tied weights (the output layer of a model that ties it to the embeddings) are not
        saved and need not be; any other weight missing or left over is a ``ProasError``."""
        from safetensors.torch import load_file

        directory = Path(directory)
        if self.lora:
            from peft import set_peft_model_state_dict

            path = directory / "adapter_model.safetensors"
            if not path.is_file():
                raise ProasError(f"{directory}: no LoRA adapters (adapter_model.safetensors) to load")
            res = set_peft_model_state_dict(self.module, load_file(path, device="cpu"))
            if res.unexpected_keys:
                raise ProasError(f"{path}: adapters that this model does not have ({res.unexpected_keys[0]}, ...)")
            return
        index = directory / "model.safetensors.index.json"
        if index.is_file():
            files = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        else:
            files = ["model.safetensors"]
        state: dict[str, torch.Tensor] = {}
        for name in files:
            if Path(name).name != name or not (directory / name).is_file():
                raise ProasError(f"{directory}: no model weights {name!r} to load")
            state.update(load_file(directory / name, device="cpu"))
        names = {n for n, _ in self.module.named_parameters(remove_duplicate=False)}
        tied = names - {n for n, _ in self.module.named_parameters()}
        missing, unexpected = self.module.load_state_dict(state, strict=False)
        if unexpected or set(missing) - tied:
            what = unexpected[0] if unexpected else sorted(set(missing) - tied)[0]
            raise ProasError(f"{directory}: the saved weights do not fit the model "
                             f"({'unexpected' if unexpected else 'missing'} {what})")

    # ---- acting
    def _chat_ids(self, ctx: Context, history_length: int) -> list[int]:
        text = self.tokenizer.apply_chat_template([{"role": "user", "content": build_prompt(ctx, history_length)}],
                                                  tokenize=False, add_generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def encode_prompt(self, ctx: Context, reserve: int = 0) -> list[int]:
        """The prompt's token ids within ``max_prompt_tokens - reserve`` (see ``fit_prompt``)."""
        return self.fit_prompt(ctx, reserve)[0]

    def fit_prompt(self, ctx: Context, reserve: int = 0) -> tuple[list[int], bool]:
        """``(prompt ids, trimmed)``: the prompt within ``max_prompt_tokens - reserve`` tokens.

        An over-long prompt loses, in this order, the oldest shown history pairs, one at a time,
        then the middle of the current observation, replaced by ``[... N tokens cut ...]`` (its
        start says where the agent is, its end often holds what just happened). The task, the
        admissible actions and the answer-format instruction are never cut: a prompt whose other
        parts alone exceed the budget is a ``ProasError`` naming the key to raise.
        """
        budget = self.max_prompt_tokens - reserve
        shown = min(self.history_length, len(ctx.history))
        ids = self._chat_ids(ctx, shown)
        if len(ids) <= budget:
            return ids, False
        while shown > 0:
            shown -= 1
            ids = self._chat_ids(ctx, shown)
            if len(ids) <= budget:
                return ids, True
        obs = self.tokenizer(ctx.observation, add_special_tokens=False)["input_ids"]
        need = len(ids) - budget  # observation tokens that must go, before the marker's own
        for _ in range(8):  # re-encoding the joined text can merge tokens differently: retry
            cut = need + len(self.tokenizer(f" [... {need} tokens cut ...] ", add_special_tokens=False)["input_ids"])
            keep = len(obs) - cut
            if keep < 0:
                break
            head = (keep + 1) // 2
            text = (self.tokenizer.decode(obs[:head]) + f" [... {cut} tokens cut ...] "
                    + self.tokenizer.decode(obs[len(obs) - (keep - head):]))
            ids = self._chat_ids(replace(ctx, observation=text), 0)
            if len(ids) <= budget:
                return ids, True
            need += len(ids) - budget
        fixed = len(self._chat_ids(replace(ctx, observation=""), 0))
        raise ProasError(f"policy.lm.max_prompt_tokens={self.max_prompt_tokens}: the task, admissible actions "
                         f"and instructions alone take {fixed} tokens (+{reserve} of the scored response); "
                         "raise it")

    @torch.no_grad()
    def act(self, contexts: Sequence[Context], rng: np.random.Generator, temperature: float = 1.0) -> list[Decision]:
        if not contexts:
            return []
        if self.mode == "score":
            return self._act_score(contexts, rng, temperature)
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
                              "rollout/truncated_responses)", RuntimeWarning, stacklevel=3)
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
        static-cache decoder (``lm_decode.StaticDecoder``; models it cannot run use ``hf``).
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
            from proas.policies.lm_decode import StaticDecoder, static_unsupported

            why = static_unsupported(model)
            if why:
                warnings.warn(f"lm policy: policy.lm.decode=static does not support this model ({why}); "
                              "decoding with hf generate instead", RuntimeWarning, stacklevel=3)
                self._static = False
            else:
                self._static = StaticDecoder(model, max_len, self.tokenizer.pad_token_id)
        return self._static or None

    # ---- the loss side
    def prepare(self, data: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Prompt+response ids (prompts left-padded, responses right-padded), their positions and
        the response tokens (score mode: the prompts, candidates and choices)."""
        if self.mode == "score":
            return {"items": [(list(d["prompt"]), [list(c) for c in d["cands"]]) for d in data],
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

    # ---- score mode
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

    def micro_batches(self, data: Sequence[dict[str, Any]], limit: int) -> list[list[int]]:
        if self.mode != "score":
            return super().micro_batches(data, limit)
        return self._score_groups([(len(d["prompt"]), [len(c) for c in d["cands"]]) for d in data], limit,
                                  self.score_impl_for(loss=True))

    def _score_groups(self, shapes: Sequence[tuple[int, list[int]]], limit: int, impl: str) -> list[list[int]]:
        """Consecutive groups of decisions (``(prompt length, candidate lengths)`` each) with at
        most ``limit`` decisions and at most ``score_tokens_per_pass`` tokens, rows x width of
        the pass. ``expand``: a row per candidate, holding the group's widest prompt plus its
        longest candidate (the cached tokens). ``packed``: a row per decision, as wide as the
        group's longest prompt plus all its candidates; the budget bounds the token states (KV
        cache, activations) and so, like ``expand``'s, memory. The pass's mask adds rows x
        width x width scalars, one tensor for all layers: less than the token states, whose
        size is rows x width x hidden x layers, while width stays under hidden x layers. A
        decision over the budget alone still gets a pass of its own."""
        def shape(plen: int, cands: list[int]) -> tuple[int, int]:
            if impl == "packed":
                return 1, plen + sum(cands)
            return len(cands), plen + max(cands, default=0)

        groups: list[list[int]] = []
        cur: list[int] = []
        rows = width = 0
        for i, (plen, cands) in enumerate(shapes):
            dr, dw = shape(plen, cands)
            r, w = rows + dr, max(width, dw)
            if cur and (len(cur) >= limit or r * w > self.score_tokens_per_pass):
                groups.append(cur)
                cur, r, w = [], dr, dw
            cur.append(i)
            rows, width = r, w
        if cur:
            groups.append(cur)
        return groups

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
                        module: nn.Module | None = None, impl: str | None = None) -> list[torch.Tensor]:
        """The scores of each decision's candidate token sequences after its prompt, one
        ``(n_candidates,)`` tensor per decision, differentiable through ``module``: the sum of
        the tokens' log-probs, or with ``score_norm="mean"`` their mean over the candidate's own
        tokens (those after the prefix all candidates share, which ``score_item`` moved into
        the prompt; the end-of-turn token included). By ``score_impl``'s passes
        (``_candidate_logps_expand`` or ``_candidate_logps_packed``, equal up to float
        rounding), under ``compute()``."""
        module = module if module is not None else self.module
        with self.compute():
            if (impl or self.score_impl_for(loss=False)) == "packed":
                sums = self._candidate_logps_packed(items, module)
            else:
                sums = self._candidate_logps_expand(items, module)
        if self.score_norm == "mean":
            return [s / torch.tensor([len(c) for c in cs], dtype=s.dtype, device=s.device)
                    for s, (_, cs) in zip(sums, items, strict=True)]
        return sums

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
        width = max(len(p) for p, _ in items)
        ids = torch.full((n, width), pad, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, (p, _) in enumerate(items):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        out = module(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                     use_cache=True, **_last_logits(1))
        owner = torch.tensor([i for i, (_, cs) in enumerate(items) for _ in cs], dtype=torch.long, device=dev)
        flat = [c for _, cs in items for c in cs]
        length = max(len(c) for c in flat)
        cids = torch.full((len(flat), length), pad, dtype=torch.long)
        cmask = torch.zeros((len(flat), length), dtype=torch.long)
        for j, c in enumerate(flat):
            cids[j, : len(c)] = torch.tensor(c)
            cmask[j, : len(c)] = 1
        cids, cmask = cids.to(dev), cmask.to(dev)
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
        width = max(len(p) + sum(len(c) for c in cs) for p, cs in items)
        ids = torch.full((n, width), pad, dtype=torch.long)
        seg = torch.full((n, width), -1, dtype=torch.long)  # 0: prompt, k + 1: candidate k, -1: padding
        pos = torch.zeros((n, width), dtype=torch.long)
        rows: list[int] = []  # (row, column) of the logits predicting each candidate token
        cols: list[int] = []
        owner: list[int] = []  # the candidate (over all decisions) each token belongs to
        flat = 0
        for i, (p, cs) in enumerate(items):
            ids[i, : len(p)] = torch.tensor(p)
            seg[i, : len(p)] = 0
            pos[i, : len(p)] = torch.arange(len(p))
            at = len(p)
            for k, c in enumerate(cs):
                ids[i, at: at + len(c)] = torch.tensor(c)
                seg[i, at: at + len(c)] = k + 1
                pos[i, at: at + len(c)] = torch.arange(len(p), len(p) + len(c))
                rows += [i] * len(c)
                cols += [len(p) - 1, *range(at, at + len(c) - 1)]
                owner += [flat] * len(c)
                at += len(c)
                flat += 1
        ids, seg, pos = ids.to(dev), seg.to(dev), pos.to(dev)
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
        cols_t = torch.tensor(cols, dtype=torch.long, device=dev) - (width - logits.shape[1])
        picked = logits[torch.tensor(rows, dtype=torch.long, device=dev), cols_t]  # (candidate tokens, vocab)
        tgt = ids[seg > 0]  # the candidate tokens, in the same order
        tok = torch.log_softmax(picked.float(), dim=-1).gather(1, tgt[:, None]).squeeze(1)
        sums = torch.zeros(flat, dtype=tok.dtype, device=dev).index_add(
            0, torch.tensor(owner, dtype=torch.long, device=dev), tok)
        return list(torch.split(sums, [len(cs) for _, cs in items]))

    @torch.no_grad()
    def _act_score(self, contexts: Sequence[Context], rng: np.random.Generator, temperature: float) -> list[Decision]:
        self.module.eval()
        made = [self.score_item_trimmed(c) for c in contexts]
        scores: list[torch.Tensor] = []
        impl = self.score_impl_for(loss=False)
        for group in self._score_groups([(len(p), [len(c) for c in r]) for _, p, r, _ in made],
                                        self.micro_batch_size, impl):
            chunk = [made[i] for i in group]
            scores.extend(s.double().cpu() for s in self.candidate_logps([(p, r) for _, p, r, _ in chunk],
                                                                          impl=impl))
        out = []
        for (cands, prompt, resp, trimmed), s in zip(made, scores):
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
        sums = self.candidate_logps(batch["items"], module, impl=self.score_impl_for(loss=True))
        width = max(len(s) for s in sums)
        scores = torch.full((len(sums), width), float("-inf"), device=sums[0].device)
        for i, s in enumerate(sums):
            scores[i, : len(s)] = s
        logp_all = torch.log_softmax(scores / self.temperature, dim=-1)
        logp = logp_all.gather(1, batch["choice"].to(scores.device)[:, None])
        finite = torch.where(torch.isfinite(logp_all), logp_all, 0.0)
        entropy = -(logp_all.exp() * finite).sum(-1, keepdim=True)
        return TokenStats(logp=logp, entropy=entropy, mask=torch.ones_like(logp))
