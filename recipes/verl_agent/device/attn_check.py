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
import math
import sys


def grad_norm(model_dir: str, impl: str, device: str) -> tuple[float, float]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation=impl, dtype=torch.bfloat16).to(device)
    enc = tok(["go to bed 1", "Your task is to: heat some egg and put it in countertop. You see a fridge 1."],
              return_tensors="pt", padding=True).to(device)
    mask = enc["attention_mask"]
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=enc["input_ids"], attention_mask=mask, position_ids=pos, use_cache=False).logits
    logp = logits.float().log_softmax(-1).gather(-1, enc["input_ids"][..., None]).squeeze(-1)
    loss = -(logp * mask).sum() / mask.sum()  # padding positions masked out, as verl's loss does
    loss.backward()
    norm = math.sqrt(sum(float((p.grad.float() ** 2).sum()) for p in model.parameters() if p.grad is not None))
    return float(loss.detach()), norm


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--device", default="cpu")
    p.add_argument("--impl", action="append", help="implementations to try (default sdpa and eager)")
    p.add_argument("--require", help="exit 1 unless this implementation's loss and gradient are finite")
    args = p.parse_args()
    status = 0
    for impl in args.impl or ["sdpa", "eager"]:
        loss, norm = grad_norm(args.model, impl, args.device)
        ok = math.isfinite(loss) and math.isfinite(norm)
        print(f"attn_check: {impl} on {args.device}: loss {loss:.4f}, grad norm {norm:.4f}"
              f" ({'finite' if ok else 'NOT finite'})")
        if impl == args.require and not ok:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
