"""The configured policy, built fresh or warm-started from an earlier run, and a run's policy
loaded back (``proas eval``, ``proas serve``, the probes, ``proas lm export``).

``policy.lm.init_from`` / ``policy.scorer.init_from`` name a run directory, a checkpoint
directory or a ``state.pt`` (resolved as ``proas eval`` resolves them: the best checkpoint, else
the latest), or for the ``lm`` a Hugging Face model directory (one with ``config.json``, which
``LMPolicy.from_config`` loads itself). The source run's own config rebuilds its policy, whose
weights then become the new run's initial weights, and so the reference policy of its KL term
(the trainer copies the policy it starts with). An ``lm`` trained with LoRA is merged into its
base weights first, so the new run may train all weights or put fresh adapters on top.
``export_hf`` writes the same model as a Hugging Face directory (``proas lm export``).

Reading a run takes the trainer's config and checkpoint formats, so this lives with the
trainer; the policies below it receive a loader (``LMPolicy.from_config(load_run=...)``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proas.errors import ProasError
from proas.policies.base import Policy
from proas.train import checkpoint as ckpt
from proas.train.config import Config, config_from_yaml

__all__ = ["build_policy", "export_hf", "lm_from_run", "load_policy", "scorer_init_state"]


def build_policy(cfg: Config, seed: int) -> Policy:
    """The configured policy, initialised from ``seed`` (and the model path for ``lm``), or
    from the run that ``init_from`` names."""
    if cfg.policy.kind == "scorer":
        from proas.policies.scorer import ScorerPolicy

        s = cfg.policy.scorer
        policy = ScorerPolicy(bits=s.hash_bits, dim=s.dim, init_std=s.init_std, seed=seed,
                              optimizer=s.optimizer, history_length=s.history_length,
                              weight_decay=s.weight_decay)
        if s.init_from:  # a warm start (an SFT run): its weights, and so the KL reference's
            policy.load_state_dict(scorer_init_state(s.init_from, s))
        return policy
    from proas.policies.lm import LMPolicy

    return LMPolicy.from_config(cfg.policy.lm, seed=seed, temperature=cfg.policy.temperature, load_run=lm_from_run)


def load_policy(target: str | Path):
    """``(policy, cfg, checkpoint_dir, state)`` of a run directory (best, else latest checkpoint),
    a checkpoint directory or a ``state.pt``: the same resolution as ``proas eval``."""
    import torch

    directory = ckpt.find_checkpoint(target)
    state = ckpt.load_state(directory)
    cfg = config_from_yaml(str(state.get("config", "")), where=f"{directory / ckpt.STATE_FILE} (config)")
    torch.set_num_threads(cfg.train.threads)
    policy = build_policy(cfg, cfg.seed)
    try:
        policy.load_state_dict(state["policy"])
    except (KeyError, RuntimeError) as exc:
        raise ProasError(f"{directory / ckpt.STATE_FILE}: policy weights do not fit the config "
                         f"({type(exc).__name__})") from None
    return policy, cfg, directory, state


def _source_policy(path: str | Path, kind: str, key: str):
    import torch

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
