"""Decode throughput of the lm policy: ``decode=static`` against two baselines, plain Hugging
Face ``generate`` (dynamic cache, eager) and ``generate`` with ``cache_implementation="static"``
and ``torch.compile`` (the library's own fast path).

One GPU, the Qwen2.5-1.5B architecture with random weights, batch 128, 512-token prompts, 64 new
tokens (the defaults)::

    python benchmarks/lm_decode.py

CPU smoke run (the tiny architecture, batch 4, 32-token prompts, 8 new tokens, one timed call;
the compiled baseline compiles for the CPU, which takes a while once)::

    python benchmarks/lm_decode.py --quick

The paths run in the same process on the same model, batch and prompts (random token ids, all
``--prompt`` long), through the policy's own ``generate_ids`` (so the ``generate`` paths include
recording each drawn token's log-prob, as rollouts do), on the weights rollouts decode with
(``LMPolicy.rollout_module``: bf16 on a GPU), greedy unless ``--temperature``. A random-weight
model rarely writes an end token, so every path is told not to stop before ``--new`` tokens
(``min_new_tokens``: stop ids cannot be drawn earlier) and every row writes exactly ``--new``
tokens. Each path is warmed up once (for ``static`` that call captures the CUDA graph of the
batch's bucket; the capture time is printed, not counted; the compiled baseline twice: it
compiles on the first call and records its CUDA graphs on the next), then timed over
``--repeats`` calls.

Printed: the setup; per path the seconds per call (prefill included), new tokens per second and
the peak GPU memory allocated while timed (model included); ``static`` with its step run eagerly
(no graph), which separates the graph's share; the speed-up of ``static`` over each baseline;
and, greedy, the share of rows whose tokens agree with ``static``'s (bf16 rounding can flip
near-ties of a random model). Then each path's call with one new token (the prompts' prefill and
one draw) and what is left of a whole call without it: the decode steps' own rate and the
speed-up of ``static``'s over each baseline's, and the bound the prefill puts on the whole
call's speed-up (a baseline's call over ``static``'s prefill call).
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
    ap.add_argument("--no-compiled", action="store_true",
                    help="skip the generate + static cache + torch.compile baseline")
    ap.add_argument("--compile-mode", default=None,
                    help="torch.compile mode of that baseline (default: reduce-overhead, transformers' default, "
                         "on a GPU; default on a CPU)")
    ap.add_argument("--quick", action="store_true",
                    help="a CPU smoke run: tiny model, batch 4, 32-token prompts, 8 new tokens, 1 repeat")
    args = ap.parse_args(argv)
    if args.quick:
        args.model_config, args.model_path, args.device = "tiny", None, "cpu"
        args.batch, args.prompt, args.new, args.repeats = 4, 32, 8, 1

    import torch
    from transformers import CompileConfig

    from _timing import timed as timed_call
    from proas.lm.decode import StaticDecoder, bucket_rows
    from proas.lm.policy import LMPolicy
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

    def timed(fn, warmups: int = 1) -> tuple[float, torch.Tensor, float]:
        """Seconds per call, the tokens of the last call, peak GiB (nan off CUDA)."""
        s, (tok, _), peak = timed_call(fn, args.repeats, dev, seed=0, warmups=warmups)
        return s, tok, float("nan") if peak is None else peak

    # the library's fast path: a static cache, whose decode steps ``generate`` compiles
    compile_cfg = CompileConfig(mode=args.compile_mode or ("reduce-overhead" if dev.type == "cuda" else "default"))
    if dev.type != "cuda":
        compile_cfg._compile_all_devices = True  # transformers' switch to compile off a GPU ("for testing")

    def run(decode=None, decoder=None, compiled=False):
        if decoder is not None:
            return decoder.generate(prompts, args.new, args.temperature, policy.stop_ids, min_new_tokens=args.new)
        if compiled:
            return policy.generate_ids(prompts, args.temperature, decode="hf", min_new_tokens=policy.max_new_tokens,
                                       cache_implementation="static", compile_config=compile_cfg)
        return policy.generate_ids(prompts, args.temperature, decode=decode, min_new_tokens=policy.max_new_tokens)

    model = policy.rollout_module()
    n_param = sum(p.numel() for p in model.parameters())
    print(f"lm decode: model={args.model_path or args.model_config} ({n_param / 1e6:.1f}M parameters) "
          f"device={dev} dtype={next(model.parameters()).dtype} batch={args.batch} "
          f"(bucket {bucket_rows(args.batch)}) prompt={args.prompt} new={args.new} "
          f"temperature={args.temperature} repeats={args.repeats}")
    print(f"every row writes exactly {args.new} new tokens: stop ids are blocked until then (min_new_tokens), "
          "as a random-weight model rarely writes one")
    # the baselines, then static: (label, call, warm-up calls)
    paths = [("hf generate", lambda: run("hf"), 1)]
    if not args.no_compiled:
        paths.append(("hf static cache+compile", lambda: run(compiled=True), 2))
    rows, toks, whole = [], {}, {}
    for name, fn, warm in paths:
        s, tok, peak = timed(fn, warm)
        rows.append((name, s, peak))
        toks[name], whole[name] = tok, s
    st_s, st_tok, st_peak = timed(lambda: run("static"))
    rows.append((f"static{' + CUDA graphs' if static.graphs else ' (eager step)'}", st_s, st_peak))
    if static.graphs and not args.no_eager:
        eager = StaticDecoder(model, static.max_len, policy.tokenizer.pad_token_id, graphs=False)
        eager_s, _, eager_peak = timed(lambda: run(decoder=eager))
        rows.append(("static, eager step", eager_s, eager_peak))
    for tok in [*toks.values(), st_tok]:
        if tok.shape != (args.batch, args.new):
            raise SystemExit(f"a path wrote {tuple(tok.shape)} tokens, not {(args.batch, args.new)}")
    new_tok = args.batch * args.new
    print(f"{'path':<26}{'s/call':>10}{'new tok/s':>12}{'peak GiB':>10}")
    for name, s, mem in rows:
        print(f"{name:<26}{s:>10.3f}{new_tok / s:>12.0f}{mem:>10.1f}")
    if static.graphs:
        print(f"graph capture (first call of the bucket, not timed): {static.capture_s:.2f}s")
    for name, s in whole.items():
        print(f"speed-up static / {name}: {s / st_s:.2f}x")
    # the prefill's share: the same calls with one new token
    policy.max_new_tokens = 1
    one = {name: timed(fn, warm)[0] for name, fn, warm in paths}
    st1_s, _, _ = timed(lambda: run("static"))
    policy.max_new_tokens = args.new
    print("one new token (prefill): " + ", ".join(f"{name} {s:.3f}" for name, s in one.items())
          + f", static {st1_s:.3f} s/call")
    if args.new > 1:
        steps_tok = args.batch * (args.new - 1)
        st_dec = st_s - st1_s
        for name, s in whole.items():
            dec = s - one[name]
            if dec > 0 and st_dec > 0:
                print(f"decode steps alone ({args.new - 1} a row): {name} {steps_tok / dec:.0f} new tok/s, "
                      f"static {steps_tok / st_dec:.0f}, speed-up {dec / st_dec:.2f}x")
            print(f"bound on the whole call's speed-up over {name} with static's prefill as it is (decode steps "
                  f"free): {s / st1_s:.2f}x")
    if args.temperature == 0:
        for name, tok in toks.items():
            same = sum(a == b for a, b in zip(tok.tolist(), st_tok.tolist()))
            print(f"greedy rows identical between {name} and static: {same}/{args.batch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
