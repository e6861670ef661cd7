"""Score mode's forward passes: ``score_impl=expand`` (the prompt's KV cache copied per candidate)
against ``packed`` (one masked sequence per decision) and ``shared`` (one prompt cache per decision
that all its candidates attend to), acting and loss.

CPU, one thread, the ``small`` from-scratch architecture (``SCRATCH_SIZES``: hidden 256, 4
layers) with a 4096-token vocabulary and random weights in fp32, 8 decisions of a 200-token
prompt and 40 candidates of 6 tokens each (household-like shapes; the defaults)::

    python benchmarks/lm_score.py

A smoke run (what CI runs: the tiny architecture, 2 decisions of a 32-token prompt, 8
candidates, one timed call)::

    python benchmarks/lm_score.py --quick

One GPU (bf16)::

    python benchmarks/lm_score.py --device cuda

All three paths run in the same process on the same model and the same decisions (random token ids),
all in one pass (``--decisions`` is the pass's ``micro_batch_size``), through the policy's own
``candidate_logps`` (acting: no grad, eval mode) and ``evaluate`` on ``prepare``'s batch with
the least likely candidate chosen, then ``backward`` (loss: the candidate-softmax log-prob of the
choice). Each is warmed up once, then timed over ``--repeats`` calls.

Printed: the setup; per path and task the seconds per call and, on CUDA, the peak GPU memory
allocated while timed (model included); the speed-up of ``packed`` and of ``shared`` over
``expand`` per task; and the largest difference between their candidate log-probs and
``expand``'s (float rounding only).
"""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="small", help="a SCRATCH_SIZES architecture")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dtype", default="auto", help="auto (bf16 on a GPU, fp32 on CPU), bf16, fp32")
    ap.add_argument("--decisions", type=int, default=8, help="decisions per pass")
    ap.add_argument("--prompt", type=int, default=200, help="prompt tokens per decision")
    ap.add_argument("--candidates", type=int, default=40, help="candidates per decision")
    ap.add_argument("--cand-tokens", type=int, default=6, help="tokens per candidate")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per path and task")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--quick", action="store_true", help="tiny architecture, 2 decisions, 32-token prompts, "
                    "8 candidates, 1 repeat: a smoke run for CI")
    args = ap.parse_args(argv)
    if args.quick:
        args.size, args.device, args.decisions, args.prompt, args.candidates, args.repeats = "tiny", "cpu", 2, 32, 8, 1

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from _timing import timed
    from proas.lm.model import local_tokenizer
    from proas.lm.policy import LMPolicy
    from proas.lm.tools import SCRATCH_SIZES

    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    dtype = {"auto": torch.bfloat16 if dev.type == "cuda" else torch.float32,
             "bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    torch.manual_seed(0)
    tokenizer = local_tokenizer(1024)  # for the pad and end ids; the token ids are random
    config = Qwen2Config(**SCRATCH_SIZES[args.size], vocab_size=args.vocab, tie_word_embeddings=True,
                         max_position_embeddings=4096, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    model = Qwen2ForCausalLM(config).to(dtype).to(dev)
    policy = LMPolicy(model, tokenizer, device=dev, mode="score", micro_batch_size=args.decisions,
                      score_tokens_per_pass=10**9)
    gen = torch.Generator().manual_seed(0)

    def ids(n: int) -> list[int]:
        return torch.randint(5, args.vocab, (n,), generator=gen).tolist()

    items = [(ids(args.prompt), [ids(args.cand_tokens) for _ in range(args.candidates)])
             for _ in range(args.decisions)]
    print(f"{args.size} ({sum(q.numel() for q in model.parameters()) / 1e6:.1f}M parameters, {dtype}) on "
          f"{dev}, {torch.get_num_threads()} thread(s); {args.decisions} decisions x ({args.prompt}-token prompt, "
          f"{args.candidates} candidates x {args.cand_tokens} tokens)")

    def act():
        model.eval()
        with torch.no_grad():
            return policy.candidate_logps(items)

    policy.score_impl = "expand"
    choice = [int(torch.argmin(s)) for s in act()]
    batch = policy.prepare([{"prompt": p, "cands": c, "choice": k} for (p, c), k in zip(items, choice)])

    def loss():
        model.zero_grad(set_to_none=True)
        (-policy.evaluate(batch).logp.sum()).backward()

    results: dict[tuple[str, str], float] = {}
    logps = {}
    for impl in ("expand", "packed", "shared"):
        policy.score_impl = impl
        logps[impl] = torch.cat(act()).float().cpu()
        for task, fn in (("act", act), ("loss+backward", loss)):
            s, _, peak = timed(fn, args.repeats, dev)
            results[impl, task] = s
            mem = f", peak {peak:.2f} GiB" if peak is not None else ""
            print(f"  {impl:6s} {task:13s} {s:.4f} s/call{mem}")
    for impl in ("packed", "shared"):
        for task in ("act", "loss+backward"):
            print(f"  {impl} speed-up over expand, {task}: {results['expand', task] / results[impl, task]:.2f}x")
        gap = float((logps["expand"] - logps[impl]).abs().max())
        print(f"  largest |expand - {impl}| candidate log-prob: {gap:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
