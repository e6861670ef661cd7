"""Models and tokenizers of the ``lm`` policy: random-weight architectures
(``MODEL_CONFIGS``), tokenizers (trained here, or loaded from a directory), the precision
(``resolve_precision``), and the transformers keywords that differ between its releases."""

from __future__ import annotations

import functools
import inspect
import os
import stat
from pathlib import Path
from typing import Any

import torch
from torch import nn

from proas.errors import ProasError
from proas.lm.prompt import _CHAT_TEMPLATE, build_prompt
from proas.policies.base import Context

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

#: the files that hold a tokenizer's vocabulary, one of which a tokenizer directory must have
#: (fast tokenizers' tokenizer.json; sentencepiece models; the vocabularies of slow BPE and
#: WordPiece tokenizers)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "vocab.json", "vocab.txt")
#: model weights that are pickles: reading one could run code, so proas does not load them
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack")


def check_model_dir(path: str | Path, key: str) -> Path:
    """Refuse (``ProasError``, one line, naming ``key``) a model or tokenizer directory that
    cannot be read as data: not a directory, or an entry that is not a regular file or a folder
    (a FIFO, a device: opening one would block, reading one never end), or a JSON or tokenizer
    file over ``MAX_METADATA_BYTES``. Symbolic links are followed (a Hugging Face cache snapshot
    is links into its blob store); what they lead to is checked."""
    from proas.fileio import MAX_METADATA_BYTES, file_kind

    directory = Path(path)
    if not directory.is_dir():
        what = "no such directory" if not directory.exists() else "not a directory"
        raise ProasError(f"{key}={str(path)!r}: cannot load a local model or tokenizer ({what})")
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError as exc:
        raise ProasError(f"{key}={str(path)!r}: cannot be read ({exc.strerror})") from None
    for entry in entries:
        try:
            st = os.stat(entry.path)
        except OSError as exc:
            raise ProasError(f"{key}={str(path)!r}: {entry.name} cannot be read ({exc.strerror})") from None
        if stat.S_ISDIR(st.st_mode):
            continue
        if not stat.S_ISREG(st.st_mode):
            raise ProasError(f"{key}={str(path)!r}: {entry.name} is {file_kind(st.st_mode)}; a model directory "
                             "holds regular files")
        if entry.name.endswith((".json", ".jinja", ".txt", ".model")) and st.st_size > MAX_METADATA_BYTES:
            raise ProasError(f"{key}={str(path)!r}: {entry.name} is {st.st_size} bytes, more than the "
                             f"{MAX_METADATA_BYTES} a tokenizer or config file may be")
    return directory


def load_tokenizer(path: str | Path, key: str = "tokenizer"):
    """The tokenizer saved in ``path`` (no download); a directory without one (no
    ``TOKENIZER_FILES``), one that cannot be read, or a tokenizer that maps text to no tokens
    is a one-line ``ProasError`` naming ``key`` (the option it came from).

    A tokenizer built by proas (``local_tokenizer``, ``proas lm tokenizer``) is saved as a plain
    fast tokenizer; ``AutoTokenizer`` would reload it as the tokenizer class of the model saved
    beside it (Qwen2's), whose own pre-tokenizer splits text differently, so the token ids would
    no longer be the ones the model was trained on. Such a directory is loaded as it was saved.
    """
    import json

    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    directory = check_model_dir(path, key)
    if not any((directory / name).is_file() for name in TOKENIZER_FILES):
        raise ProasError(f"{key}={str(path)!r}: no tokenizer files ({', '.join(TOKENIZER_FILES)}); a model "
                         "directory needs its tokenizer (or set policy.lm.tokenizer_path)")
    cfg_file = directory / "tokenizer_config.json"
    # trust_remote_code=False: the code a directory ships (auto_map) is never run, nor asked
    # about at a prompt that one 'y' on stdin answers
    try:
        cls = json.loads(cfg_file.read_bytes()).get("tokenizer_class") if cfg_file.is_file() else None
        if cls in ("TokenizersBackend", "PreTrainedTokenizerFast"):
            tok = PreTrainedTokenizerFast.from_pretrained(str(directory), local_files_only=True,
                                                          trust_remote_code=False)
        else:
            tok = AutoTokenizer.from_pretrained(str(directory), local_files_only=True, trust_remote_code=False)
    except ProasError:
        raise
    except Exception as exc:  # noqa: BLE001 - tokenizers and transformers raise many types for a broken file
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise ProasError(f"{key}={str(path)!r}: cannot load its tokenizer ({type(exc).__name__}: {first})") from None
    if not tok("go to desk 1", add_special_tokens=False)["input_ids"]:
        raise ProasError(f"{key}={str(path)!r}: its tokenizer maps text to no tokens ({len(tok)} in its "
                         "vocabulary); the tokenizer files are incomplete")
    if tok.chat_template is not None:
        # render a prompt as the policy does (``PromptMixin._chat_ids``): a broken template
        # would otherwise pass here and end the run at its first prompt with a traceback
        try:
            tok.apply_chat_template([{"role": "user", "content": "go to desk 1"}], tokenize=False,
                                    add_generation_prompt=True)
        except Exception as exc:  # noqa: BLE001 - jinja2 and transformers raise many types for a bad template
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            raise ProasError(f"{key}={str(path)!r}: its chat template cannot render a prompt "
                             f"({type(exc).__name__}: {first})") from None
    return tok

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

def check_weights_dir(path: str | Path, key: str) -> None:
    """Refuse a model directory whose weights are not safetensors: pickled weights
    (``PICKLE_WEIGHTS``) could run code when read, and proas reads none."""
    directory = check_model_dir(path, key)
    if any(directory.glob("*.safetensors")) or (directory / "model.safetensors.index.json").is_file():
        return
    pickles = [name for name in PICKLE_WEIGHTS if (directory / name).exists()]
    if pickles:
        raise ProasError(f"{key}={str(path)!r}: its weights are {pickles[0]}, a pickle, which proas does not load "
                         "(reading one can run code); save the model with safetensors "
                         "(save_pretrained(..., safe_serialization=True))")
    raise ProasError(f"{key}={str(path)!r}: no model weights (model.safetensors)")


def resolve_device(spec: str) -> torch.device:
    """The device of ``policy.lm.device``: ``auto`` (a GPU where there is one, else the CPU),
    ``cpu``, ``cuda`` or ``cuda:N``; one that is not a device, or a GPU this machine lacks, is a
    one-line ``ProasError``."""
    key = f"config: policy.lm.device={spec!r}"
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(spec)
    except (RuntimeError, TypeError, ValueError):
        raise ProasError(f"{key} is not a device (auto, cpu, cuda or cuda:N)") from None
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise ProasError(f"{key}: proas runs the lm on auto, cpu, cuda or cuda:N, not {device.type}")
    if not torch.cuda.is_available():
        raise ProasError(f"{key}: this machine has no CUDA GPU that torch can use (use cpu or auto)")
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise ProasError(f"{key}: this machine has {torch.cuda.device_count()} CUDA GPU(s), numbered from 0")
    return device


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
