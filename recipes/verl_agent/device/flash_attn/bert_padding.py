"""``flash_attn.bert_padding``'s four helpers in plain torch: remove the padding of a
``(batch, seqlen, ...)`` tensor and put it back, as verl-agent's ``use_remove_padding`` path
calls them. Written from the functions' documented behaviour; see recipes/verl_agent/device/.

- ``unpad_input(hidden, mask)`` -> ``(hidden[mask] as (nnz, ...), indices, cu_seqlens,
  max_seqlen, seqlens)``: ``indices`` of the kept positions in the flattened ``batch * seqlen``
  axis, ``cu_seqlens`` the ``(batch + 1,)`` int32 prefix sums of the rows' lengths;
- ``pad_input(hidden, indices, batch, seqlen)``: the inverse, zeros where the padding was;
- ``index_first_axis(x, indices)``: ``x[indices]`` along the first axis;
- ``rearrange``: einops' (imported when called; the GPU image has einops).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["index_first_axis", "pad_input", "rearrange", "unpad_input"]


def index_first_axis(x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """``x[indices]`` along the first axis (differentiable in ``x``)."""
    return torch.index_select(x, 0, indices)


def unpad_input(hidden_states: torch.Tensor, attention_mask: torch.Tensor, unused_mask: torch.Tensor | None = None):
    """The unpadded rows of ``hidden_states`` ``(batch, seqlen, ...)`` where ``attention_mask``
    ``(batch, seqlen)`` is set, in row-major order, and how to put them back."""
    mask = attention_mask if unused_mask is None else attention_mask + unused_mask
    seqlens = mask.sum(dim=-1, dtype=torch.int32)
    used = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    max_seqlen = int(seqlens.max().item()) if seqlens.numel() else 0
    cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return index_first_axis(flat, indices), indices, cu_seqlens, max_seqlen, used


def pad_input(hidden_states: torch.Tensor, indices: torch.Tensor, batch: int, seqlen: int) -> torch.Tensor:
    """``(nnz, ...)`` rows back to ``(batch, seqlen, ...)``, zeros at the padding."""
    out = hidden_states.new_zeros((batch * seqlen, *hidden_states.shape[1:]))
    out = out.index_copy(0, indices, hidden_states)
    return out.reshape(batch, seqlen, *hidden_states.shape[1:])


def rearrange(tensor, pattern: str, **axes_lengths):
    from einops import rearrange as _rearrange

    return _rearrange(tensor, pattern, **axes_lengths)
