"""Decode throughput of the lm policy: plain Hugging Face ``generate`` against ``decode=static``.

One GPU, the Qwen2.5-1.5B architecture with random weights in bf16, batch 128, 512-token
prompts, 64 new tokens (the defaults)::

    python benchmarks/lm_decode.py

CPU smoke run::

    python benchmarks/lm_decode.py --model-config tiny --batch 8 --prompt 64 --new 16 --device cpu

Both paths run in the same process on the same model, batch and prompts (random token ids, all
``--prompt`` long), through the policy's own ``generate_ids`` (so ``hf`` includes gathering the
log-probs from ``generate``'s logits, as rollouts do), greedy unless ``--temperature``. A
random-weight model rarely writes an end token, so both paths are told not to stop before
``--new`` tokens (``min_new_tokens``: stop ids cannot be drawn earlier) and every row writes
exactly ``--new`` tokens. Each path is warmed up once (for ``static`` that call captures the
CUDA graph of the batch's bucket; the capture time is printed, not counted), then timed over
``--repeats`` calls.

Printed: the setup; per path the seconds per call (prefill included), new tokens per second and
the peak GPU memory allocated while timed (model included);
``static`` with its step run eagerly (no graph), which separates the graph's share; the speed-up
of ``static`` over ``hf``; and, greedy, the share of rows whose tokens agree between the paths
(bf16 rounding can flip near-ties of a random model). Then each path's call with one new token
(the prompts' prefill and one draw, the same work on both paths up to the kernels) and what is
left of a whole call without it: the decode steps' own rate and speed-up, and the bound the
prefill puts on the whole call's speed-up (``hf``'s call over ``static``'s prefill call).
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-config", default="qwen2.5-1.5b", help="architecture with random weights")
    ap.add_argument("--model-path", default=None, help="a local Hugging Face model directory instead")
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda")
    ap.add_argument("--dtype", default="auto", help="auto (bf16 on a GPU, fp32 on CPU), bf16, fp32")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens per row")
    ap.add_argument("--new", type=int, default=64, help="new tokens per row")
    ap.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    ap.add_argument("--repeats", type=int, default=3, help="timed calls per path")
    ap.add_argument("--no-eager", action="store_true", help="skip the static path without graphs")
    args = ap.parse_args(argv)

    import torch

    from _timing import timed as timed_call
    from proas.policies.lm import LMPolicy
    from proas.policies.lm_decode import StaticDecoder, bucket_rows
    from proas.train.config import build_config

    over = ["policy=lm", f"policy.lm.device={args.device}", f"policy.lm.dtype={args.dtype}",
            f"policy.lm.max_prompt_tokens={args.prompt}", f"policy.lm.max_new_tokens={args.new}",
            "policy.lm.decode=static"]
    over.append(f"policy.lm.model_path={args.model_path}" if args.model_path
                else f"policy.lm.model_config={args.model_config}")
    policy = LMPolicy.from_config(build_config(over).policy.lm, seed=0)
    dev = policy.device
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, len(policy.tokenizer), (args.batch, args.prompt), generator=gen).tolist()
    static = policy.static_decoder()
    if static is None:
        print("static decoding is not supported for this model (see the warning)")
        return 1

    def timed(fn) -> tuple[float, torch.Tensor, float]:
        """Seconds per call, the tokens of the last call, peak GiB (nan off CUDA)."""
        s, (tok, _), peak = timed_call(fn, args.repeats, dev, seed=0)
        return s, tok, float("nan") if peak is None else peak

    def run(decode=None, decoder=None):
        if decoder is not None:
            return decoder.generate(prompts, args.new, args.temperature, policy.stop_ids, min_new_tokens=args.new)
        return policy.generate_ids(prompts, args.temperature, decode=decode, min_new_tokens=policy.max_new_tokens)

    n_param = sum(p.numel() for p in policy.module.parameters())
    print(f"lm decode: model={args.model_path or args.model_config} ({n_param / 1e6:.1f}M parameters) "
          f"device={dev} dtype={next(policy.module.parameters()).dtype} batch={args.batch} "
          f"(bucket {bucket_rows(args.batch)}) prompt={args.prompt} new={args.new} "
          f"temperature={args.temperature} repeats={args.repeats}")
    print(f"every row writes exactly {args.new} new tokens: stop ids are blocked until then (min_new_tokens), "
          "as a random-weight model rarely writes one")
    rows = []
    hf_s, hf_tok, hf_peak = timed(lambda: run("hf"))
    rows.append(("hf generate", hf_s, hf_peak))
    st_s, st_tok, st_peak = timed(lambda: run("static"))
    rows.append((f"static{' + CUDA graphs' if static.graphs else ' (eager step)'}", st_s, st_peak))
    if static.graphs and not args.no_eager:
        eager = StaticDecoder(policy.module, static.max_len, policy.tokenizer.pad_token_id, graphs=False)
        eager_s, _, eager_peak = timed(lambda: run(decoder=eager))
        rows.append(("static, eager step", eager_s, eager_peak))
    for tok in (hf_tok, st_tok):
        if tok.shape != (args.batch, args.new):
            raise SystemExit(f"a path wrote {tuple(tok.shape)} tokens, not {(args.batch, args.new)}")
    new_tok = args.batch * args.new
    print(f"{'path':<24}{'s/call':>10}{'new tok/s':>12}{'peak GiB':>10}")
    for name, s, mem in rows:
        print(f"{name:<24}{s:>10.3f}{new_tok / s:>12.0f}{mem:>10.1f}")
    if static.graphs:
        print(f"graph capture (first call of the bucket, not timed): {static.capture_s:.2f}s")
    print(f"speed-up static / hf: {hf_s / st_s:.2f}x")
    # the prefill's share: the same calls with one new token
    policy.max_new_tokens = 1
    hf1_s, _, _ = timed(lambda: run("hf"))
    st1_s, _, _ = timed(lambda: run("static"))
    policy.max_new_tokens = args.new
    print(f"one new token (prefill): hf {hf1_s:.3f} s/call, static {st1_s:.3f}")
    if args.new > 1:
        steps_tok = args.batch * (args.new - 1)
        hf_dec, st_dec = hf_s - hf1_s, st_s - st1_s
        if hf_dec > 0 and st_dec > 0:
            print(f"decode steps alone ({args.new - 1} a row): hf {steps_tok / hf_dec:.0f} new tok/s, "
                  f"static {steps_tok / st_dec:.0f}, speed-up {hf_dec / st_dec:.2f}x")
        print(f"bound on the whole call's speed-up with static's prefill as it is (decode steps free): "
              f"{hf_s / st1_s:.2f}x")
    if args.temperature == 0:
        same = sum(a == b for a, b in zip(hf_tok.tolist(), st_tok.tolist()))
        print(f"greedy rows identical between hf and static: {same}/{args.batch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
