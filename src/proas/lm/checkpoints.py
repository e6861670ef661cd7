"""Checkpoints of the ``lm`` policy: Hugging Face directories (config and safetensors
weights, or the LoRA adapters, and the tokenizer)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from proas.errors import ProasError
from proas.fileio import read_regular
from proas.policies.base import HF_FILES, POLICY_FILES


class CheckpointMixin:
    """``LMPolicy``'s checkpoint methods."""

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
        saved and need not be; any other weight missing or left over, or a weights file that is
        not a regular file or not safetensors (a truncated one), is a ``ProasError``."""
        directory = Path(directory)
        if self.lora:
            from peft import set_peft_model_state_dict

            path = directory / "adapter_model.safetensors"
            if not path.is_file():
                raise ProasError(f"{directory}: no LoRA adapters (adapter_model.safetensors) to load")
            res = set_peft_model_state_dict(self.module, _load_safetensors(path))
            if res.unexpected_keys:
                raise ProasError(f"{path}: adapters that this model does not have ({res.unexpected_keys[0]}, ...)")
            return
        index = directory / "model.safetensors.index.json"
        if index.is_file():
            try:
                files = sorted(set(json.loads(read_regular(index))["weight_map"].values()))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ProasError(f"{index}: corrupt ({type(exc).__name__})") from None
        else:
            files = ["model.safetensors"]
        state: dict[str, torch.Tensor] = {}
        for name in files:
            if not isinstance(name, str) or Path(name).name != name or not (directory / name).is_file():
                raise ProasError(f"{directory}: no model weights {name!r} to load")
            state.update(_load_safetensors(directory / name))
        names = {n for n, _ in self.module.named_parameters(remove_duplicate=False)}
        tied = names - {n for n, _ in self.module.named_parameters()}
        try:
            missing, unexpected = self.module.load_state_dict(state, strict=False)
        except RuntimeError as exc:  # a weight of another shape
            first = (str(exc).strip().splitlines() or [""])[-1].strip()[:200]
            raise ProasError(f"{directory}: the saved weights do not fit the model ({first})") from None
        if unexpected or set(missing) - tied:
            what = unexpected[0] if unexpected else sorted(set(missing) - tied)[0]
            raise ProasError(f"{directory}: the saved weights do not fit the model "
                             f"({'unexpected' if unexpected else 'missing'} {what})")


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, which must be a regular file (not a link, a FIFO or
    a device); a truncated or foreign file is a one-line ``ProasError``."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from proas.fileio import open_regular

    try:
        open_regular(path).close()  # refuses a link, a FIFO or a device without blocking
        return load_file(path, device="cpu")
    except FileNotFoundError:
        raise ProasError(f"{path}: missing") from None
    except (SafetensorError, OSError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ProasError(f"{path}: not a readable safetensors file ({type(exc).__name__}: {first})") from None
