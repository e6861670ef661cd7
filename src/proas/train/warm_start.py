"""The configured policy, built fresh or warm-started from an earlier run, and a run's policy
loaded back (``proas eval``, ``proas serve``, the probes, ``proas lm export``).

``policy.lm.init_from`` / ``policy.scorer.init_from`` name a run directory, a checkpoint
directory or a ``state.pt`` (resolved as ``proas eval`` resolves them: the best checkpoint, else
the latest), or for the ``lm`` a Hugging Face model directory (one with ``config.json``, which
``LMPolicy.from_config`` loads itself). The source run's own config rebuilds its policy, whose
weights then become the new run's initial weights, and so the reference policy of its KL term
(the trainer copies the policy it starts with). An ``lm`` trained with LoRA is merged into its
base weights first, so the new run may train all weights or put fresh adapters on top.
``proas lm export`` writes the same model as a Hugging Face directory (``proas.cli.lm.export_hf``).

Reading a run takes the trainer's config and checkpoint formats, so this lives with the
trainer; the policies below it receive a loader (``LMPolicy.from_config(load_run=...)``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proas.errors import ProasError
from proas.policies.base import HF_FILES, POLICY_FILES, Policy
from proas.train import checkpoint as ckpt
from proas.train.config import Config, config_from_yaml, config_to_yaml, scorer_env

__all__ = ["INIT_SOURCE", "build_policy", "init_source_record", "lm_from_run", "load_policy",
           "scorer_init_state"]


#: the state entry of a checkpoint of an lm warm-started from a proas run that records the
#: source's structure (``init_source_record``)
INIT_SOURCE = "init_source"


def build_policy(cfg: Config, seed: int, restore: dict[str, Any] | None = None) -> Policy:
    """The configured policy, initialised from ``seed`` (and the model path for ``lm``), or
    from the run that ``init_from`` names.

    ``restore``: the state of the checkpoint whose weights are loaded into the policy next
    (``--resume``, ``eval``). The ``init_from`` source is then not read: a scorer's structure is
    its own config's, and an lm's is rebuilt from the source's config that the checkpoint
    records (``INIT_SOURCE``); a checkpoint from before that record reads the source as before.
    """
    if cfg.policy.kind == "scorer":
        from proas.policies.scorer import ScorerPolicy

        s = cfg.policy.scorer
        policy = ScorerPolicy(bits=s.hash_bits, dim=s.dim, init_std=s.init_std, seed=seed,
                              optimizer=s.resolved_optimizer(scorer_env(cfg)), history_length=s.history_length,
                              weight_decay=s.weight_decay)
        if s.init_from and restore is None:  # a warm start (an SFT run): its weights, and so the KL reference's
            policy.load_state_dict(scorer_init_state(s.init_from, s))
        return policy
    from proas.lm.policy import LMPolicy

    load_run = lm_from_run
    record = restore.get(INIT_SOURCE) if restore is not None else None
    if cfg.policy.lm.init_from and isinstance(record, dict):
        def load_run(path):  # noqa: ARG001 - the source's structure, from the record instead of the source
            return _lm_structure(record)
    return LMPolicy.from_config(cfg.policy.lm, seed=seed, temperature=cfg.policy.temperature, load_run=load_run)


def init_source_record(cfg: Config) -> dict[str, Any] | None:
    """What rebuilds the structure of the lm that ``policy.lm.init_from`` names, when that is a
    proas run or checkpoint: its config (architecture, tokenizer, LoRA) and, recursively, its own
    source's record. None for the scorer (its structure is its own config's) and for an lm
    without a proas run to start from (a model directory is read on every load, as
    ``model_path``)."""
    if cfg.policy.kind != "lm" or not cfg.policy.lm.init_from:
        return None
    from proas.lm.model import is_hf_model_dir

    path = cfg.policy.lm.init_from
    if is_hf_model_dir(path):
        return None
    try:
        directory = ckpt.find_checkpoint(path)
        plain = ckpt.load_plain_state(directory)
        src = config_from_yaml(str(plain.get("config", "")), where=f"{directory / ckpt.STATE_FILE} (config)")
    except ProasError as exc:
        raise ProasError(f"policy.lm.init_from={str(path)!r}: {exc}") from None
    inner = plain.get(INIT_SOURCE)
    if not isinstance(inner, dict):
        inner = init_source_record(src)
    return {"config": config_to_yaml(src), INIT_SOURCE: inner}


def _lm_structure(record: dict[str, Any]):
    """``(model, tokenizer)`` built as the source of ``record`` was built, without its weights
    (those come from the checkpoint): its config's architecture and tokenizer, its LoRA merged.
    The same calls as reading the source, so the RNGs advance as they did."""
    import torch

    try:
        src = config_from_yaml(str(record.get("config", "")), where=f"the recorded {INIT_SOURCE} (config)")
    except ProasError as exc:
        raise ProasError(f"checkpoint: {exc}") from None
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(src.train.threads)
        inner = record.get(INIT_SOURCE)
        policy = build_policy(src, src.seed, restore={INIT_SOURCE: inner} if isinstance(inner, dict) else None)
    finally:
        torch.set_num_threads(threads)
    model = policy.module
    if policy.lora:
        model = model.merge_and_unload()
    return model, policy.tokenizer


def load_policy(target: str | Path):
    """``(policy, cfg, checkpoint_dir, state)`` of a run directory (best, else latest checkpoint),
    a checkpoint directory or a ``state.pt``: the same resolution as ``proas eval``."""
    import torch

    directory = ckpt.find_checkpoint(target)
    state = ckpt.load_state(directory)
    where = directory / ckpt.STATE_FILE
    if not isinstance(state.get("step", 0), int) or isinstance(state.get("step"), bool):
        raise ProasError(f"{where}: not a checkpoint of a policy: 'step' is not an integer")
    # the weights: a Hugging Face directory beside the state (an lm), or ``policy`` in state.pt
    policy_state = state.get("policy")
    if state.get(POLICY_FILES) != HF_FILES and not (
            isinstance(policy_state, dict)
            and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in policy_state.items())):
        raise ProasError(f"{where}: not a checkpoint of a policy: 'policy' is not a mapping of names to tensors")
    if not isinstance(state.get("config"), str):
        raise ProasError(f"{where}: not a checkpoint of a policy: it records no config")
    cfg = config_from_yaml(state["config"], where=f"{where} (config)")
    torch.set_num_threads(cfg.train.threads)
    # the checkpoint's weights replace the initial ones: a warm start's source is not read again
    policy = build_policy(cfg, cfg.seed, restore=state)
    try:
        policy.load_checkpoint(directory, state)
    except (KeyError, RuntimeError, TypeError, ValueError) as exc:
        raise ProasError(f"{where}: policy weights do not fit the config ({type(exc).__name__})") from None
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
