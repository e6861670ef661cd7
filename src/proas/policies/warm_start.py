"""Warm starts: an RL run's policy initialised from an earlier run (typically ``proas sft``) or,
for the ``lm`` policy, from any local Hugging Face model directory.

``policy.lm.init_from`` / ``policy.scorer.init_from`` name a run directory, a checkpoint
directory or a ``state.pt`` (resolved as ``proas eval`` resolves them: the best checkpoint, else
the latest), or for the ``lm`` a Hugging Face model directory (one with ``config.json``). The
source run's own config rebuilds its policy, whose weights then become the new run's initial
weights, and so the reference policy of its KL term (the trainer copies the policy it starts
with). An ``lm`` trained with LoRA is merged into its base weights first, so the new run may
train all weights or put fresh adapters on top. ``export_hf`` writes the same model as a Hugging
Face directory (``proas lm export``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proas.errors import ProasError

__all__ = ["export_hf", "is_hf_model_dir", "lm_from_run", "scorer_init_state"]


def is_hf_model_dir(path: str | Path) -> bool:
    """Whether ``path`` is a Hugging Face model directory rather than a proas run or checkpoint."""
    return (Path(path) / "config.json").is_file()


def _source_policy(path: str | Path, kind: str, key: str):
    import torch

    from proas.baselines.common import load_policy

    threads = torch.get_num_threads()
    try:
        policy, cfg, directory, _ = load_policy(path)
    except ProasError as exc:
        raise ProasError(f"{key}={str(path)!r}: {exc}") from None
    finally:
        torch.set_num_threads(threads)  # loading applies the source run's train.threads; keep ours
    if policy.kind != kind:
        raise ProasError(f"{key}={str(path)!r}: {directory} holds a {policy.kind!r} policy, not {kind!r}")
    return policy, cfg, directory


def scorer_init_state(path: str | Path, scorer_cfg) -> dict[str, Any]:
    """The weights of the scorer saved in run/checkpoint ``path``, checked against the table
    sizes of ``scorer_cfg`` (``policy.scorer``) of the new run."""
    policy, cfg, directory = _source_policy(path, "scorer", "policy.scorer.init_from")
    src = cfg.policy.scorer
    if (src.hash_bits, src.dim) != (scorer_cfg.hash_bits, scorer_cfg.dim):
        raise ProasError(f"policy.scorer.init_from={str(path)!r}: {directory} has hash_bits={src.hash_bits}, "
                         f"dim={src.dim}; this run has hash_bits={scorer_cfg.hash_bits}, dim={scorer_cfg.dim}")
    return policy.state_dict()


def lm_from_run(path: str | Path):
    """``(model, tokenizer)`` of the lm policy saved in run/checkpoint ``path``; LoRA adapters are
    merged into the base weights, so the model is a plain Hugging Face causal LM."""
    policy, _, _ = _source_policy(path, "lm", "policy.lm.init_from")
    model = policy.module
    if policy.lora:
        model = model.merge_and_unload()
    return model, policy.tokenizer


def export_hf(target: str | Path, out: str | Path) -> Path:
    """Write the lm policy of run/checkpoint ``target`` to ``out`` as a Hugging Face model
    directory (model weights and config, tokenizer with its chat template)."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ProasError(f"{out}: exists and is not empty; choose another directory")
    model, tokenizer = lm_from_run(target)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
