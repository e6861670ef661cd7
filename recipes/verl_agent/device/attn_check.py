#!/usr/bin/env python3
"""Which attention implementation trains the run's model on this machine (docs/verl.md section 10).

verl-agent's actor with ``use_remove_padding=False`` (flash-attn cannot travel) feeds left-padded
batches: the padding positions' query rows see no key at all. This runs one forward and backward
pass of the run's model on such a batch, in bf16 as verl's FSDP mixed precision computes, for
each implementation, and prints whether the loss and the gradient norm are finite.

    python3 attn_check.py MODEL_DIR [--device cuda] [--require eager]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys


def grad_norm(model_dir: str, impl: str, device: str, length: int | None = None,
              kernel: str | None = None) -> tuple[float, float]:
    """Loss and gradient norm of one bf16 forward and backward pass on a left-padded batch: two
    short texts, or (``length``) two rows of random tokens, one ``length`` long and one a third
    of it behind left padding. ``kernel`` holds sdpa to one kernel (efficient, math, cudnn)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # the local directory only, and none of its own code (auto_map), as proas and verl load it
    local = {"local_files_only": True, "trust_remote_code": False}
    tok = AutoTokenizer.from_pretrained(model_dir, **local)
    tok.padding_side = "left"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation=impl, dtype=torch.bfloat16,
                                                 **local).to(device)
    if length:
        ids = torch.randint(0, min(len(tok), model.config.vocab_size), (2, length), device=device)
        mask = torch.ones_like(ids)
        mask[1, : length - length // 3] = 0
        enc = {"input_ids": ids, "attention_mask": mask}
    else:
        enc = tok(["go to bed 1", "Your task is to: heat some egg and put it in countertop. You see a fridge 1."],
                  return_tensors="pt", padding=True).to(device)
    mask = enc["attention_mask"]
    backends = {"efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH,
                "cudnn": SDPBackend.CUDNN_ATTENTION}
    with sdpa_kernel([backends[kernel]]) if kernel else contextlib.nullcontext():
        return _pass(model, enc["input_ids"], mask)


def _pass(model, input_ids, mask) -> tuple[float, float]:
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=mask, position_ids=pos, use_cache=False).logits
    logp = logits.float().log_softmax(-1).gather(-1, input_ids[..., None]).squeeze(-1)
    loss = -(logp * mask).sum() / mask.sum()  # padding positions masked out, as verl's loss does
    loss.backward()
    norm = math.sqrt(sum(float((p.grad.float() ** 2).sum()) for p in model.parameters() if p.grad is not None))
    return float(loss.detach()), norm


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--device", default="cpu")
    p.add_argument("--impl", action="append", help="implementations to try (default sdpa and eager)")
    p.add_argument("--require", help="exit 1 unless this implementation's loss and gradient are finite "
                   "(for sdpa, also on every --lengths batch under every --kernel)")
    p.add_argument("--lengths", type=int, nargs="+", help="also random-token batches of these lengths "
                   "(one row full, one two-thirds left padding), sdpa under each --kernel")
    p.add_argument("--kernel", action="append", choices=["default", "efficient", "math", "cudnn"],
                   help="sdpa kernels for --lengths (default: default, cudnn, efficient)")
    args = p.parse_args()
    status = 0
    for impl in args.impl or ["sdpa", "eager"]:
        loss, norm = grad_norm(args.model, impl, args.device)
        ok = math.isfinite(loss) and math.isfinite(norm)
        print(f"attn_check: {impl} on {args.device}: loss {loss:.4f}, grad norm {norm:.4f}"
              f" ({'finite' if ok else 'NOT finite'})")
        if impl == args.require and not ok:
            status = 1
    for length in args.lengths or []:
        for kernel in args.kernel or ["default", "cudnn", "efficient"]:
            try:
                loss, norm = grad_norm(args.model, "sdpa", args.device, length, None if kernel == "default" else kernel)
            except RuntimeError as exc:  # a kernel this machine lacks
                print(f"attn_check: sdpa/{kernel} length {length}: no run ({str(exc).splitlines()[0][:120]})")
                status = 1 if args.require == "sdpa" else status
                continue
            ok = math.isfinite(loss) and math.isfinite(norm)
            print(f"attn_check: sdpa/{kernel} length {length} on {args.device}: loss {loss:.4f}, "
                  f"grad norm {norm:.4f} ({'finite' if ok else 'NOT finite'})")
            if args.require == "sdpa" and not ok:
                status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
