"""The values the ``lm`` policy's enumerated options take, in one torch-free place.

``proas.lm.policy`` checks them when a policy is built and ``proas.train.config`` when a
config is validated; the config module must not import the policy (it pulls in torch and
transformers), so both read them from here, and the package's face imports nothing.
"""

from __future__ import annotations

from proas.errors import ProasError

__all__ = ["AUTOCAST", "DECODERS", "LR_SCHEDULES", "MASK_ATTN_IMPLS", "MODES", "SCORE_IMPLS", "SCORE_NORMS",
           "SDPA_KERNELS", "SDPA_SWITCHES", "attn_problem", "hold_sdpa_kernel"]

#: ``generate``: write a response and parse the action from it; ``score``: choose among the
#: candidate actions by their likelihood (see ``proas.lm``)
MODES = ("generate", "score")

#: generate mode's decoding: ``hf`` (``model.generate``) or ``static`` (preallocated KV cache and,
#: on CUDA, a CUDA graph per batch bucket: ``proas.lm.decode``)
DECODERS = ("hf", "static")

#: score mode's forward passes (``LMPolicy.candidate_logps``): ``expand`` (encode the prompt,
#: copy its KV cache once per candidate, score the candidates on the copies), ``packed`` (one
#: sequence per decision, the prompt then every candidate, with a mask that keeps them apart) or
#: ``auto`` (``packed`` for the loss's passes everywhere and for acting on a CPU, ``expand`` for
#: acting on a GPU: the faster of the two for each, as measured; ``LMPolicy.score_impl_for``), or
#: ``shared`` (encode the prompt, then score all its candidates in one row on that one cache)
SCORE_IMPLS = ("expand", "packed", "auto", "shared")

#: score mode: a candidate's score from its tokens' log-probs, ``sum`` (the sequence's
#: log-likelihood) or ``mean`` (per token, over the candidate's own tokens: GLAM's normalised
#: variant, which does not favour short candidates)
SCORE_NORMS = ("sum", "mean")

#: the compute dtype of the forward passes (``torch.autocast``) over fp32 weights: ``auto`` (bf16
#: on a GPU, none on a CPU), ``bf16`` or ``none``
AUTOCAST = ("auto", "bf16", "none")

#: the learning-rate schedule after the warmup (``transformers.get_scheduler``'s names)
LR_SCHEDULES = ("constant", "linear", "cosine")

#: the attention implementations that take an additive 4D float mask (packed score passes, the
#: static decoder); a flash-attention kernel would ignore it
MASK_ATTN_IMPLS = ("eager", "sdpa")


def attn_problem(attn_implementation: str | None, mode: str, score_impl: str,
                 gradient_checkpointing: bool = False) -> str | None:
    """Why the lm's passes cannot run with this attention implementation and score setting, or
    None. Score mode's packed passes (``score_impl`` ``packed``, and ``auto`` for the loss) give
    the model a 4D float mask, which only ``MASK_ATTN_IMPLS`` apply; a flash-attention kernel
    would silently attend across candidates. Gradient checkpointing drops the KV cache in
    training passes, which ``expand``'s loss passes score on."""
    if mode == "score" and gradient_checkpointing and score_impl in ("expand", "shared"):
        return (f"policy.lm.gradient_checkpointing drops the KV cache that score_impl={score_impl}'s loss passes "
                "score on; use score_impl=packed or auto")
    if attn_implementation is None or attn_implementation in MASK_ATTN_IMPLS:
        return None
    if mode == "score" and score_impl in ("packed", "auto", "shared"):
        return (f"policy.lm.attn_implementation={attn_implementation!r} cannot take the 4D float masks of packed "
                f"score passes (score_impl={score_impl}); use {' or '.join(MASK_ATTN_IMPLS)}, or score_impl=expand")
    return None


#: the switches each choice turns on. The chosen kernel serves every masked call (score passes,
#: padded batches). A call without a mask on a model with grouped KV heads (transformers then
#: passes ``enable_gqa``) is one that neither the memory-efficient nor cuDNN's kernel takes:
#: held to either alone, it stops with "RuntimeError: Invalid backend" (a household SFT batch and
#: RL step did, on an H100 with PyTorch 2.11). So ``efficient`` keeps flash (which PyTorch only
#: picks for a call without a mask) and math as fallbacks, and ``cudnn`` keeps math; cuDNN's
#: kernel is on only under ``cudnn``.
SDPA_SWITCHES = {"efficient": ("efficient", "flash", "math"), "math": ("math",), "cudnn": ("cudnn", "math")}
#: the kernels ``policy.lm.sdpa_kernel`` may hold sdpa to (``torch.backends.cuda``'s switches)
SDPA_KERNELS = tuple(SDPA_SWITCHES)


def hold_sdpa_kernel(kernel: str | None, device: str) -> None:
    """Hold PyTorch's sdpa to ``kernel`` (one of ``SDPA_KERNELS``) for this process, on a CUDA
    ``device``, with the fallbacks ``SDPA_SWITCHES`` names for calls that kernel cannot take;
    None or a CPU leaves PyTorch's choice. The switches are process-wide: a training process
    holds one policy, and the kernel must not change between its acting and its loss."""
    if kernel is not None and kernel not in SDPA_KERNELS:
        raise ProasError(f"sdpa kernel {kernel!r} is not one of {', '.join(SDPA_KERNELS)}")
    if kernel is None or not str(device).startswith("cuda"):
        return
    import torch

    b, on = torch.backends.cuda, SDPA_SWITCHES[kernel]
    b.enable_flash_sdp("flash" in on)  # takes no mask: PyTorch never picks it for a masked call
    b.enable_mem_efficient_sdp("efficient" in on)
    b.enable_math_sdp("math" in on)
    b.enable_cudnn_sdp("cudnn" in on)
