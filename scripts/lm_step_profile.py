"""Where one lm RL step's time goes, per attention kernel (issue #43, item 5).

Drives ``proas.train.loop.Trainer`` for a few RL steps of the ``lm`` policy in score mode with
each attention choice in turn (sdpa with PyTorch's own kernel choice, sdpa held to one kernel:
``math``, ``efficient``, ``cudnn``; and ``eager``), on the same model, tasks and seed, and prints
per choice the seconds of rollout and update per step; with ``--trace`` it also prints
``torch.profiler``'s table of the step's operators by self device time (GPU) or self CPU time.
The first step of each choice warms up and is not timed.

    python scripts/lm_step_profile.py --model DIR --env household --steps 2 --trace
    python scripts/lm_step_profile.py --model DIR --env shop --choices default eager --max-steps 10
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

CHOICES = ("default", "math", "efficient", "cudnn", "eager")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a local Hugging Face model directory")
    ap.add_argument("--env", default="household")
    ap.add_argument("--steps", type=int, default=2, help="timed RL steps per choice, after one warm-up step")
    ap.add_argument("--choices", nargs="+", default=list(CHOICES), choices=CHOICES)
    ap.add_argument("--max-steps", type=int, default=None, help="episode step limit (default: the env's)")
    ap.add_argument("--trace", action="store_true", help="torch.profiler table of the last timed step")
    ap.add_argument("--rows", type=int, default=25, help="rows of the profiler table")
    ap.add_argument("overrides", nargs="*", help="config overrides key=value")
    args = ap.parse_args(argv)

    import torch

    from proas.train.config import build_config
    from proas.train.loop import Trainer

    cuda = torch.cuda.is_available()
    for choice in args.choices:
        over = [f"env={args.env}", "policy=lm", "policy.lm.mode=score", f"policy.lm.model_path={args.model}",
                "train.progress=false", "env.fixed_val_set.enabled=false", "train.val_every=0",
                "train.rollout_log_every=0", "train.save_every=100000"]
        if args.max_steps:
            over.append(f"env.max_steps={args.max_steps}")
        if choice == "eager":
            over.append("policy.lm.attn_implementation=eager")
        # the kernel through the policy's own switch (policy.lm.sdpa_kernel), which the policy
        # applies when it is built; "default" and "eager" leave PyTorch's choice (null)
        over.append(f"policy.lm.sdpa_kernel={choice if choice in ('math', 'efficient', 'cudnn') else 'null'}")
        cfg = build_config(over + list(args.overrides))
        # the switches are process-wide: start each choice from PyTorch's own (every kernel on)
        for switch in ("flash", "mem_efficient", "math", "cudnn"):
            getattr(torch.backends.cuda, f"enable_{switch}_sdp")(True)
        with tempfile.TemporaryDirectory() as tmp:
            try:
                trainer = Trainer(cfg, Path(tmp))
                recs = []
                prof = None
                for k in range(args.steps + 1):
                    last = k == args.steps
                    if last and args.trace:
                        acts = [torch.profiler.ProfilerActivity.CPU]
                        if cuda:
                            acts.append(torch.profiler.ProfilerActivity.CUDA)
                        prof = torch.profiler.profile(activities=acts)
                        prof.__enter__()
                    t0 = time.perf_counter()
                    rec = trainer.train_step()
                    if cuda:
                        torch.cuda.synchronize()
                    rec["_wall"] = time.perf_counter() - t0
                    if prof is not None:
                        prof.__exit__(None, None, None)
                    if k:
                        recs.append(rec)
            except Exception as exc:  # noqa: BLE001 - a kernel that cannot run these shapes is a result
                print(f"{args.env} {choice}: failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
                continue
        n = len(recs)
        mean = {k: sum(r[k] for r in recs) / n for k in ("time/rollout", "time/update", "_wall", "train/steps")}
        print(f"{args.env} {choice}: step {mean['_wall']:.2f}s (rollout {mean['time/rollout']:.2f}, update "
              f"{mean['time/update']:.2f}) over {n} steps; {mean['train/steps']:.1f} env steps per episode; "
              f"train SR {sum(r['train/sr'] for r in recs) / n:.3f}", flush=True)
        if prof is not None:
            key = "self_cuda_time_total" if cuda else "self_cpu_time_total"
            print(prof.key_averages().table(sort_by=key, row_limit=args.rows, max_name_column_width=60))
            if cuda:
                print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12,
                                                max_name_column_width=60))
    return 0


if __name__ == "__main__":
    sys.exit(main())
