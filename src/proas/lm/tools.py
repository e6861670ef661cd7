"""From-scratch models for the ``lm`` policy: a tokenizer trained on an env's own text, and a
randomly initialised model directory that carries it (``proas lm tokenizer`` / ``proas lm new-model``;
the env's text itself is gathered by ``proas.cli.lm.env_corpus``, on the top floor, which may walk
the oracle).

A general-purpose tokenizer (Qwen's 151k tokens, with its huge embedding tables) or the tiny
local fallback spends many tokens on an env's prompts; a byte-level BPE trained on the env's
training text (the prompts the policy sees while the oracle walks the training tasks: task,
observations, history, admissible actions, instructions, and the responses of every candidate
action) encodes the same prompts in
far fewer tokens. Only training tasks are used, never validation ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

import torch

from proas.errors import ProasError
from proas.fileio import atomic_dir, check_output_dir

__all__ = ["SCRATCH_SIZES", "build_env_tokenizer", "new_model_dir"]

#: architectures for from-scratch models (Qwen2 family); the vocabulary is the tokenizer's
SCRATCH_SIZES: dict[str, dict[str, Any]] = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2),
    "small": dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2),
    "base": dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=8,
                 num_key_value_heads=2),
    "large": dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=16, num_attention_heads=16,
                  num_key_value_heads=4),
}


def build_env_tokenizer(texts: Iterable[str], vocab_size: int, out: str | Path, span: str = "line",
                        meta: dict[str, Any] | None = None):
    """Train a byte-level BPE of ``vocab_size`` tokens on ``texts`` (an env's own text: ``proas
    lm tokenizer`` gives it ``proas.cli.lm.env_corpus``), save it to ``out`` with
    ``proas_tokenizer.json`` recording how it was made (``meta`` plus the sizes) and return it.

    ``span="line"`` by default: an env's text is templated, and merges across words turn its
    stock phrases into single tokens (household validation prompts: about 9x fewer tokens than
    the local fallback tokenizer, against 1.7x for ``word``, whose vocabulary stops growing once
    every training word is one token; docs/training.md).
    """
    from proas.lm.model import train_tokenizer

    if vocab_size < 300:
        raise ProasError("--vocab must be >= 300 (the 256 bytes, the special tokens and some merges)")
    check_output_dir(out)  # before the texts are drawn: a bad --out fails before the oracle walk
    texts = list(texts)
    tok = train_tokenizer(texts, vocab_size, span)
    with atomic_dir(out) as tmp:  # the whole directory or nothing
        tok.save_pretrained(tmp)
        (tmp / "proas_tokenizer.json").write_text(json.dumps(
            {**(meta or {}), "vocab_size": vocab_size, "trained_vocab": len(tok), "span": span,
             "texts": len(texts)}, indent=1) + "\n")
    return tok


def new_model_dir(tokenizer_dir: str | Path, out: str | Path, size: str = "small", *, seed: int = 0,
                  max_positions: int = 8192, **arch_overrides: int):
    """Write a randomly initialised Qwen2-architecture causal LM of ``size`` (``SCRATCH_SIZES``,
    fields overridable) with the tokenizer of ``tokenizer_dir`` to ``out``, ready for
    ``policy.lm.model_path=out``; return the model."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from proas.lm.model import load_tokenizer

    if size not in SCRATCH_SIZES:
        raise ProasError(f"--size {size!r} is not one of {', '.join(SCRATCH_SIZES)}")
    check_output_dir(out)
    tokenizer = load_tokenizer(str(tokenizer_dir), "--tokenizer")
    arch = dict(SCRATCH_SIZES[size], **{k: v for k, v in arch_overrides.items() if v is not None})
    if arch["hidden_size"] % arch["num_attention_heads"] or arch["num_attention_heads"] % arch["num_key_value_heads"]:
        raise ProasError("hidden size must divide by the heads, and the heads by the key-value heads")
    torch.manual_seed(seed)
    # small models tie the output layer to the embeddings: with a vocabulary of a few thousand
    # tokens the two would otherwise be a large share of the weights
    config = Qwen2Config(**arch, vocab_size=len(tokenizer), max_position_embeddings=max_positions,
                         tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    model = Qwen2ForCausalLM(config)
    with atomic_dir(out) as tmp:  # the whole directory or nothing
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return model
