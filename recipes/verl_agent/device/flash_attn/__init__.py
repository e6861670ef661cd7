"""A stand-in for the ``flash_attn`` package, for verl-agent on a GPU without flash-attn (it has
no wheel): only ``flash_attn.bert_padding``, which verl-agent imports whenever CUDA is present.
Put this folder's parent on ``PYTHONPATH`` (recipes/verl_agent/device/run.sh does); off
otherwise. The attention itself then has to be another implementation (sdpa.patch)."""
