"""Policy-gradient losses as pure functions of tensors (verl's ``core_algos`` conventions).

Every tensor argument has shape ``(bs, length)``: one row per step (a response), one column per
response token; ``mask`` is 1 on real tokens. The ``scorer`` policy has ``length == 1``.
"""

from __future__ import annotations

import torch

__all__ = ["agg_loss", "low_var_kl", "policy_loss", "value_loss"]


def agg_loss(loss_mat: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Aggregate a ``(bs, length)`` loss matrix to a scalar.

    ``token-mean``: mean over every real token of the batch (long responses weigh more);
    ``seq-mean-token-mean``: mean over tokens within a response, then over responses;
    ``seq-mean-token-sum``: sum over tokens within a response, then mean over responses.
    """
    mask = mask.to(loss_mat.dtype)
    if mode == "token-mean":
        return (loss_mat * mask).sum() / mask.sum().clamp_min(1.0)
    per_seq = (loss_mat * mask).sum(-1)
    if mode == "seq-mean-token-mean":
        per_seq = per_seq / mask.sum(-1).clamp_min(1.0)
    elif mode != "seq-mean-token-sum":
        raise ValueError(f"unknown loss_agg mode {mode!r}")
    has = (mask.sum(-1) > 0).to(loss_mat.dtype)
    return (per_seq * has).sum() / has.sum().clamp_min(1.0)


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float = 3.0,
    agg: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate with asymmetric clip (DAPO) and dual clip.

    ``ratio = exp(logp - old_logp)``; ``clip1 = max(-A ratio, -A clip(ratio, 1-clip_low,
    1+clip_high))`` (PPO, arXiv:1707.06347; clip-higher, DAPO arXiv:2503.14476); for ``A < 0``
    the loss is further capped at ``-A dual_clip`` (dual clip, arXiv:1912.09729), so a very
    unlikely action with a negative advantage cannot blow up the update.

    Shapes: every tensor ``(bs, length)``; ``advantages`` broadcast per step is fine.
    Returns the aggregated loss and metrics (clip fraction, approximate KL to the old policy).
    """
    log_ratio = (logp - old_logp).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    pg1 = -advantages * ratio
    pg2 = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    clipped = torch.maximum(pg1, pg2)
    pg3 = -advantages * dual_clip
    loss_mat = torch.where(advantages < 0, torch.minimum(pg3, clipped), clipped)
    loss = agg_loss(loss_mat, mask, agg)
    with torch.no_grad():
        m = mask.to(logp.dtype)
        denom = m.sum().clamp_min(1.0)
        metrics = {
            "clipfrac": float(((pg2 > pg1).to(m.dtype) * m).sum() / denom),
            "approx_kl": float(((-log_ratio) * m).sum() / denom),
        }
    return loss, metrics


def low_var_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token low-variance KL estimate of ``KL(pi || ref)`` (Schulman's k3).

    ``exp(ref - logp) - (ref - logp) - 1``, always >= 0, clamped to [0, 10] as verl does.
    """
    d = (ref_logp - logp).clamp(-20.0, 20.0)
    return (torch.exp(d) - d - 1.0).clamp(0.0, 10.0)


def value_loss(values: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """Half mean squared error of the critic, shape ``(n,)`` each."""
    return 0.5 * ((values - returns) ** 2).mean()
