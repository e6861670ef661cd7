#!/usr/bin/env python3
"""Two verl FSDP actor checkpoints of the one-GPU run (docs/verl.md section 10), tensor by tensor:
how many are bit-identical, and the largest absolute difference.

    python3 compare_ckpt.py RUN_A/global_step_N/actor RUN_B/global_step_N/actor

Reads each folder's ``model_world_size_*_rank_*.pt`` (verl's sharded state dict, one per rank)
with ``weights_only=False``, as verl itself loads them (its sharded tensors are pickled objects):
point it only at checkpoints your own runs wrote.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from proas_resume_check import local_part


def shards(folder: Path) -> list[Path]:
    found = sorted(folder.glob("model_world_size_*_rank_*.pt"))
    if not found:
        sys.exit(f"compare_ckpt: no model_world_size_*_rank_*.pt in {folder}")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.exit("usage: compare_ckpt.py ACTOR_DIR_A ACTOR_DIR_B")
    a_dir, b_dir = Path(argv[0]), Path(argv[1])
    a_files, b_files = shards(a_dir), shards(b_dir)
    if [p.name for p in a_files] != [p.name for p in b_files]:
        sys.exit(f"compare_ckpt: different shard files in {a_dir} and {b_dir}")
    n = equal = 0
    worst, worst_key = 0.0, ""
    for pa, pb in zip(a_files, b_files):
        sa, sb = torch.load(pa, weights_only=False), torch.load(pb, weights_only=False)
        if sa.keys() != sb.keys():
            sys.exit(f"compare_ckpt: {pa.name} holds different tensors in the two checkpoints")
        for key in sa:
            ta, tb = local_part(sa[key]).float(), local_part(sb[key]).float()
            n += 1
            if torch.equal(ta, tb):
                equal += 1
                continue
            diff = (ta - tb).abs().max().item()
            if diff > worst:
                worst, worst_key = diff, key
    print(f"{a_dir} vs {b_dir}: {n} tensors, {equal} bit-identical, max |diff| {worst:.3g}"
          + (f" ({worst_key})" if worst_key else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
