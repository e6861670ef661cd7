"""Time per RL step of ``proas train``, split into rollout / credit / update.

CPU, the default config (household, scorer, GRPO + ProAS, 16 tasks x 8)::

    python benchmarks/train_step.py --steps 5

One GPU, the lm policy with a Qwen2.5-1.5B architecture (random weights: timing only)::

    python benchmarks/train_step.py --policy lm --device cuda --model-config qwen2.5-1.5b \
        --steps 2 --max-steps 5 --max-new-tokens 256

A smoke run (what CI runs: 1 timed step of 2 tasks x 2, the graph from 50 oracle walks)::

    python benchmarks/train_step.py --quick

Add ``--decode static`` (or the override ``policy.lm.decode=static``) for the static-cache
decoder with CUDA graphs (``benchmarks/lm_decode.py`` times decoding alone).

Printed figures: seconds per RL step of each phase and its share; env steps per second of the
rollout against a reference measured in the same run (the same number of env steps driven by a
uniformly random admissible action, i.e. the env's own cost), so the ratio is the policy's
overhead; for ``lm``, generated tokens per second in the rollout and trained tokens (prompt +
response) per second in the update. Extra ``key=value`` arguments are config overrides.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3, help="RL steps to time (after one warm-up step)")
    ap.add_argument("--policy", choices=["scorer", "lm"], default="scorer")
    ap.add_argument("--device", default="auto", help="lm policy device: auto, cpu, cuda")
    ap.add_argument("--model-config", default="qwen2.5-1.5b", help="lm architecture with random weights")
    ap.add_argument("--model-path", default=None, help="a local HF model directory instead")
    ap.add_argument("--tasks", type=int, default=16, help="tasks per step")
    ap.add_argument("--group", type=int, default=8, help="trajectories per task")
    ap.add_argument("--max-steps", type=int, default=None, help="episode step limit (default: the env's)")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank (0: full fine-tuning)")
    ap.add_argument("--decode", choices=["hf", "static"], default="hf", help="lm generate-mode decoder")
    ap.add_argument("--quick", action="store_true", help="1 timed step of 2 tasks x 2, the graph from 50 oracle "
                    "walks: a smoke run for CI")
    ap.add_argument("overrides", nargs="*", help="config overrides key=value")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.tasks, args.group = 1, 2, 2
        args.overrides = ["algo.graph.oracle_tasks=50", *args.overrides]

    import torch

    from proas.train.config import build_config
    from proas.train.loop import Trainer

    over = [f"env.tasks_per_step={args.tasks}", f"env.group_size={args.group}", "env.fixed_val_set.enabled=false",
            "algo.graph.oracle_tasks=500"]
    if args.max_steps:
        over.append(f"env.max_steps={args.max_steps}")
    if args.policy == "lm":
        over += ["policy=lm", f"policy.lm.device={args.device}", f"policy.lm.max_new_tokens={args.max_new_tokens}",
                 f"policy.lm.lora_rank={args.lora}", f"policy.lm.decode={args.decode}", "algo.minibatch_size=64"]
        over.append(f"policy.lm.model_path={args.model_path}" if args.model_path
                    else f"policy.lm.model_config={args.model_config}")
    cfg = build_config(over + list(args.overrides))

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(cfg, Path(tmp))
        setup = time.perf_counter() - t0
        rows = []
        for k in range(args.steps + 1):
            gen_tok = [0]
            real_rollout = trainer._rollout

            def collect(step, _real=real_rollout):
                trajs, info = _real(step)
                gen_tok[0] = sum(len(s.extra["policy"].get("response", ())) for t in trajs for s in t.steps)
                info["_prompt_tok"] = sum(len(s.extra["policy"].get("prompt", ())) for t in trajs for s in t.steps)
                info["_env_steps"] = sum(len(t) for t in trajs)
                return trajs, info

            trainer._rollout = collect
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            rec = trainer.train_step()
            rec["_gen_tok"] = gen_tok[0]
            trainer._rollout = real_rollout
            if k > 0:  # the first step warms caches and kernels
                rows.append(rec)
        env_steps = sum(r["_env_steps"] for r in rows)
        ref = _env_only(trainer, env_steps)

    roll = np.mean([r["time/rollout"] for r in rows])
    cred = np.mean([r["time/credit"] for r in rows])
    upd = np.mean([r["time/update"] for r in rows])
    total = roll + cred + upd
    dev = cfg.policy.lm.device if args.policy == "lm" else "cpu"
    decode = f" decode={cfg.policy.lm.decode}" if args.policy == "lm" else ""
    print(f"proas train step: env={cfg.env.name} policy={args.policy}{decode} device={dev} "
          f"tasks={args.tasks}x{args.group} steps timed={len(rows)} (setup {setup:.1f}s)")
    print(f"{'phase':<10}{'s/step':>10}{'share':>9}")
    for name, v in [("rollout", roll), ("credit", cred), ("update", upd), ("total", total)]:
        print(f"{name:<10}{v:>10.3f}{100 * v / total:>8.1f}%")
    mean_env = env_steps / len(rows)
    print(f"env steps per RL step: {mean_env:.0f}; rollout {mean_env / roll:.0f} env steps/s vs env alone "
          f"{ref:.0f} env steps/s (ratio {ref / (mean_env / roll):.1f}x: the policy's overhead)")
    if args.policy == "lm":
        gen = np.mean([r["_gen_tok"] for r in rows])
        prompt = np.mean([r["_prompt_tok"] for r in rows])
        print(f"rollout: {gen:.0f} generated tokens/step, {gen / roll:.0f} tokens/s")
        print(f"update:  {gen + prompt:.0f} prompt+response tokens/step, {(gen + prompt) / upd:.0f} tokens/s")
    return 0


def _env_only(trainer, n_steps: int) -> float:
    """Env steps per second with uniformly random admissible actions (no policy)."""
    env = trainer.envs[0]
    ids = trainer.train_ids
    rnd = random.Random(0)
    done_steps = 0
    t0 = time.perf_counter()
    while done_steps < max(n_steps, 200):
        obs, info = env.reset(rnd.choice(ids))
        for _ in range(trainer.max_steps):
            adm = info.get("admissible") or ["look"]
            obs, r, terminated, truncated, info = env.step(rnd.choice(adm))
            done = terminated or truncated
            done_steps += 1
            if done:
                break
    return done_steps / (time.perf_counter() - t0)


if __name__ == "__main__":
    sys.exit(main())
