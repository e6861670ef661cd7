"""A stand-in for the ``flash_attn`` package, for verl-agent on a GPU without flash-attn (it has
no wheel): only ``flash_attn.bert_padding``, which verl-agent imports whenever CUDA is present.
Put this folder's parent on ``PYTHONPATH`` (recipes/verl_agent/device/run.sh does); off
otherwise. The attention itself then has to be another implementation (sdpa.patch).

Since every process that trains the actor imports it, it is also where the recipe holds sdpa to
one kernel: ``$PROAS_SDPA_KERNEL`` (``efficient``, ``math`` or ``cudnn``; run.sh sets
``efficient``) is applied to the process's ``torch.backends.cuda`` switches on import, with the
fallbacks ``proas.lm.options.SDPA_SWITCHES`` names (flash and math beside efficient, for calls
without a mask on grouped KV heads, which efficient cannot take). PyTorch's
own choice on an H100 (cuDNN's kernel) gives NaN gradients for a left-padded batch whose length
is 64 more than a multiple of 128 (results/verl_agent/attn_check.txt)."""

import os as _os

if _os.environ.get("PROAS_SDPA_KERNEL"):
    from proas.lm.options import hold_sdpa_kernel as _hold

    _hold(_os.environ["PROAS_SDPA_KERNEL"], "cuda")
