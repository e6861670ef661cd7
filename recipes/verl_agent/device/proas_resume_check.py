"""The one-GPU run's resume check (docs/verl.md section 10), called by ``resume_check.patch``
inside verl-agent's FSDP checkpoint manager right after it loads a checkpoint's model shard,
when ``PROAS_RESUME_CHECK`` is set: every tensor the model now holds equals the one read from
the checkpoint file, bit for bit. It prints one line that ``run.sh``'s log keeps; a difference is
an error.
"""

from __future__ import annotations

import torch


def is_tensor(value) -> bool:
    """A state-dict entry that holds weights: a tensor (DTensor included) or a ShardedTensor."""
    return isinstance(value, torch.Tensor) or hasattr(value, "local_tensor")


def local_part(t) -> torch.Tensor:
    """The rank's own part of a sharded state-dict entry (DTensor, ShardedTensor or plain)."""
    if hasattr(t, "to_local"):  # DTensor
        t = t.to_local()
    elif hasattr(t, "local_tensor"):  # ShardedTensor
        t = t.local_tensor()
    return t.detach().cpu()


def compare(now: dict, loaded: dict) -> list[str]:
    """The keys whose tensors differ (or are missing) between the model's state and the file's."""
    bad = []
    for key, value in loaded.items():
        if not is_tensor(value):
            continue
        if key not in now:
            bad.append(key)
            continue
        a, b = local_part(now[key]), local_part(value)
        if a.shape != b.shape or a.dtype != b.dtype or not torch.equal(a, b):
            bad.append(key)
    return bad


def check_loaded(now: dict, loaded: dict, rank: int) -> None:
    bad = compare(now, loaded)
    n = sum(1 for v in loaded.values() if is_tensor(v))
    print(f"[proas resume check] rank {rank}: {n} tensors loaded, {len(bad)} differ from the checkpoint file",
          flush=True)
    if bad:
        raise RuntimeError(f"proas resume check: {len(bad)} tensors differ after loading, e.g. {bad[:3]}")
