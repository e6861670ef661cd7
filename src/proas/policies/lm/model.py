"""Models and tokenizers of the ``lm`` policy: random-weight architectures
(``MODEL_CONFIGS``), tokenizers (trained here, or loaded from a directory), the precision
(``resolve_precision``), and the transformers keywords that differ between its releases."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Any

import torch
from torch import nn

from proas.errors import ProasError
from proas.policies.base import Context
from proas.policies.lm.prompt import _CHAT_TEMPLATE, build_prompt

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
