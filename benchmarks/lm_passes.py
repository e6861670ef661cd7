"""How score mode groups a step's decisions into forward passes: in width order with equal
decisions scored once, against the rule before (consecutive decisions, every one scored).

A pass pads every row to its widest, and its attention costs rows x width^2; a household turn
mixes prompts of 100 to 2,000 tokens. After commit 611c9fc ``LMPolicy._score_groups`` takes the
decisions in order of width, and ``candidate_logps`` and acting score equal decisions once
(``_distinct``). This benchmark measures both on one RL step of each env:

1. **Work.** One step's rollout of ``--tasks`` x ``--group`` episodes on the env's training
   tasks, with the lm policy's own prompts and candidates (the env's study tokenizer,
   ``proas lm tokenizer``), acting uniformly at random (the model is not run, so this part is
   fast on any machine). The shapes follow the policy: an untrained model under
   ``score_norm=sum`` favours short candidates, and a trained one revisits its states, which
   leaves more equal decisions to score once than uniform play does. For acting (each turn's decisions
   of all live episodes, ``--act-impl``) and for the update (minibatches of
   ``algo.minibatch_size`` in a random order as the trainer's, ``packed`` passes) it prints, old
   rule and new: the passes, the token positions they compute (rows x width: what the linear
   layers process) and the attention area (rows x query width x key width, summed over the
   passes), and their ratios.
2. **Time.** On ``--device``, with a from-scratch model of ``--size`` and random weights, the
   loss's passes over the first ``--time-decisions`` decisions of the step's first minibatch
   (forward and backward of the chosen candidates' log-softmax), grouped by the old rule and by
   the new, each warmed up once and timed over ``--repeats``; the ratio, and the largest
   difference between the two groupings' log-probs (float rounding only).

Household and shop, CPU (part 2 on the ``tiny`` architecture: minutes)::

    python benchmarks/lm_passes.py

One GPU (bf16, the study's ``small`` model)::

    python benchmarks/lm_passes.py --device cuda --size small --time-decisions 256

A smoke run (what CI runs: household, 2 tasks x 2 episodes of 10 steps, 16 decisions timed)::

    python benchmarks/lm_passes.py --quick
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPAN = {"household": "word", "shop": "line"}  # the lm study's tokenizers (scripts/run_lm_competent.sh)


def consecutive_groups(shapes, limit: int, impl: str, budget: int) -> list[list[int]]:
    """The grouping rule before width order (commit 611c9fc): consecutive decisions, at most
    ``limit`` per pass and at most ``budget`` tokens (rows x width)."""
    from proas.lm.scoring import pack_passes, pass_dims

    return pack_passes(pass_dims(shapes, impl), range(len(shapes)), limit, budget)


def pass_work(shapes, impl: str) -> tuple[int, int]:
    """``(token positions, attention area)`` of one pass over decisions of these shapes, padded
    as the policy pads them: ``packed`` one row per decision, the prompt then all candidates;
    ``expand`` the prompts left-padded, then a row per candidate on a copy of its prompt's
    cache; ``shared`` the prompts, then one row per decision of all its candidates' tokens."""
    n = len(shapes)
    if impl == "packed":
        w = max(p + sum(c) for p, c in shapes)
        return n * w, n * w * w
    pw = max(p for p, _ in shapes)
    if impl == "expand":
        rows = sum(len(c) for _, c in shapes)
        cw = max(max(c) for _, c in shapes)
        return n * pw + rows * cw, n * pw * pw + rows * cw * (pw + cw)
    q = max(sum(c) - len(c) for _, c in shapes)
    return n * pw + n * q, n * pw * pw + n * q * (pw + q)


def work(groups, shapes, impl: str) -> list[int]:
    tok = area = 0
    for g in groups:
        t, a = pass_work([shapes[i] for i in g], impl)
        tok, area = tok + t, area + a
    return [len(groups), tok, area]


def shapes_of(data) -> list[tuple[int, list[int]]]:
    """``(prompt length, candidate lengths)`` of recorded decisions."""
    return [(len(d["prompt"]), [len(c) for c in d["cands"]]) for d in data]


def step_tflop(arch: dict, acting: list, update: list) -> float:
    """A lower bound of one RL step's arithmetic on the architecture ``arch`` (TFLOP): 2 FLOP
    per weight of the layers' matrices per token position, 4 x hidden per layer per attended
    (query, key) pair, the output layer left out; acting's passes forward once, the update's
    forward and backward (three forwards' worth) plus the KL reference's forward."""
    h, inter, layers = arch["hidden_size"], arch["intermediate_size"], arch["num_hidden_layers"]
    kv = h // arch["num_attention_heads"] * arch["num_key_value_heads"]
    per_token = 2 * layers * (2 * h * h + 2 * h * kv + 3 * h * inter)
    per_pair = 4 * h * layers
    fwd = lambda w: w[1] * per_token + w[2] * per_pair  # noqa: E731
    return (fwd(acting) + 4 * fwd(update)) / 1e12


def setup(env: str, size: str, root: Path) -> Path:
    """A study tokenizer and a from-scratch model of ``size`` for ``env`` under ``root``."""
    tok, model = root / f"tok_{env}", root / f"model_{env}"
    for cmd in (["tokenizer", "--env", env, "--vocab", "4096", "--max-tasks", "200", "--span", SPAN[env],
                 "--out", str(tok)],
                ["new-model", "--tokenizer", str(tok), "--size", size, "--out", str(model)]):
        subprocess.run([sys.executable, "-m", "proas", "lm", *cmd], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", nargs="+", default=["household", "shop"], choices=sorted(SPAN))
    ap.add_argument("--tasks", type=int, default=16, help="env.tasks_per_step")
    ap.add_argument("--group", type=int, default=8, help="env.group_size")
    ap.add_argument("--max-steps", type=int, default=None, help="env.max_steps (default: the env's)")
    ap.add_argument("--micro", type=int, default=64, help="policy.lm.micro_batch_size (the lm study's 64)")
    ap.add_argument("--act-impl", nargs="+", default=["expand", "shared"], choices=["expand", "packed", "shared"],
                    help="acting's passes (expand: auto's choice on a GPU; packed: on a CPU)")
    ap.add_argument("--size", default="tiny", help="the timed model's architecture (tiny, small, ...)")
    ap.add_argument("--flops-size", default="small", help="the architecture of the arithmetic estimate (the "
                    "lm study's: small)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--time-decisions", type=int, default=128, help="decisions of the timed loss passes (0: none)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="household, 2 x 2 episodes of 10 steps, 16 timed "
                    "decisions: a smoke run for CI")
    ap.add_argument("overrides", nargs="*", help="config overrides key=value (e.g. policy.lm.score_tokens_per_pass=N, "
                    "which both rules obey)")
    args = ap.parse_args(argv)
    if args.quick:
        args.envs, args.tasks, args.group, args.max_steps = ["household"], 2, 2, 10
        args.time_decisions, args.size, args.device, args.micro = 16, "tiny", "cpu", 4

    import numpy as np
    import torch

    from _timing import timed
    from proas.lm.scoring import _distinct
    from proas.lm.tools import SCRATCH_SIZES
    from proas.train.config import build_config
    from proas.train.loop import Trainer

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"lm score passes: {args.tasks} tasks x {args.group} episodes a step, micro_batch_size {args.micro}, "
          f"acting {' or '.join(args.act_impl)}, the update packed; timed: {args.size} model on {args.device}")
    with tempfile.TemporaryDirectory() as tmp:
        for env in args.envs:
            model = setup(env, args.size, Path(tmp))
            over = [f"env={env}", "policy=lm", "policy.lm.mode=score", f"policy.lm.model_path={model}",
                    f"policy.lm.device={args.device}", "train.progress=false", "env.fixed_val_set.enabled=false",
                    "train.val_every=0", "train.rollout_log_every=0", f"env.tasks_per_step={args.tasks}",
                    f"env.group_size={args.group}", f"policy.lm.micro_batch_size={args.micro}",
                    f"seed={args.seed}", "policy.lm.score_impl=packed"]
            if args.max_steps:
                over.append(f"env.max_steps={args.max_steps}")
            over += args.overrides
            cfg = build_config(over)
            trainer = Trainer(cfg, Path(tmp) / f"run_{env}")
            policy = trainer.policy
            budget = policy.score_tokens_per_pass

            def uniform(items, module=None, impl=None):  # equal scores: a uniform draw per decision
                return [torch.zeros(len(cs), dtype=torch.float64) for _, cs in items]

            policy._distinct_logps = uniform  # the model is not run in part 1
            t0 = time.perf_counter()
            trajs, _ = trainer._rollout(0)
            roll_s = time.perf_counter() - t0
            del policy._distinct_logps
            turns: dict[int, list[dict]] = {}
            for t in trajs:
                for k, s in enumerate(t.steps):
                    turns.setdefault(k, []).append(s.extra["policy"])
            data = [s.extra["policy"] for t in trajs for s in t.steps]
            # each turn's distinct decisions (acting scores each once), as positions in the turn
            firsts = {k: _distinct([(d["prompt"], d["cands"]) for d in ds])[0] for k, ds in turns.items()}
            plen = np.array([len(d["prompt"]) for d in data])
            ncand = np.array([len(d["cands"]) for d in data])
            print(f"\n{env}: {len(data)} decisions in {len(turns)} turns (rollout {roll_s:.1f} s without the model); "
                  f"prompt tokens mean {plen.mean():.0f}, p90 {np.percentile(plen, 90):.0f}, max {plen.max()}; "
                  f"candidates mean {ncand.mean():.1f}; distinct decisions "
                  f"{sum(map(len, firsts.values()))} "
                  f"(per turn); at most {budget} tokens a pass")

            rows = []
            for impl in args.act_impl:
                old, new = np.zeros(3), np.zeros(3)
                for k, ds in turns.items():  # acting: each turn's decisions, in slot order
                    shapes = shapes_of(ds)
                    old += work(consecutive_groups(shapes, args.micro, impl, budget), shapes, impl)
                    dshapes = [shapes[i] for i in firsts[k]]
                    new += work(policy._score_groups(dshapes, args.micro, impl), dshapes, impl)
                rows.append((f"acting ({impl})", old, new))
            old, new = np.zeros(3), np.zeros(3)
            order = np.random.default_rng(args.seed).permutation(len(data))
            mb = cfg.algo.minibatch_size
            first_batch: list[dict] = []
            for start in range(0, len(data), mb):  # the update: the trainer's minibatches
                batch = [data[i] for i in order[start: start + mb]]
                first_batch = first_batch or batch
                shapes = shapes_of(batch)
                old += work(consecutive_groups(shapes, args.micro, "packed", budget), shapes, "packed")
                for g in policy.micro_batches(batch, args.micro):
                    once, _ = _distinct([(batch[i]["prompt"], batch[i]["cands"]) for i in g])
                    new += work([[g[i] for i in once]], shapes, "packed")
            rows.append(("update (packed)", old, new))
            arch = SCRATCH_SIZES[args.flops_size]
            print(f"  {'passes of':18s} {'passes old → new':>20s} {'token positions (M) old → new':>34s} "
                  f"{'attention area (G) old → new':>34s}")
            for name, o, n in rows:
                print(f"  {name:18s} {o[0]:8.0f} → {n[0]:6.0f} {o[1] / 1e6:12.2f} → {n[1] / 1e6:6.2f} "
                      f"({o[1] / n[1]:.2f}x) {o[2] / 1e9:12.2f} → {n[2] / 1e9:6.2f} ({o[2] / n[2]:.2f}x)")

            _, act_old, act_new = rows[0]
            t_old, t_new = step_tflop(arch, act_old, old), step_tflop(arch, act_new, new)
            print(f"  arithmetic of the step on the {args.flops_size} architecture (lower bound; acting "
                  f"{args.act_impl[0]}): {t_old:.0f} → {t_new:.0f} TFLOP; 150 such steps of 8 runs "
                  f"in 6 minutes would take {t_new * 1200 / 360:.0f} TFLOP/s")
            if args.time_decisions <= 0:
                continue
            batch = first_batch[: args.time_decisions]
            items = [(d["prompt"], d["cands"]) for d in batch]
            choice = [int(d["choice"]) for d in batch]
            shapes = shapes_of(batch)
            groupings = {"old": consecutive_groups(shapes, args.micro, "packed", budget),
                         "new": policy.micro_batches(batch, args.micro)}
            score = {"old": policy._distinct_logps, "new": policy.candidate_logps}
            policy.module.train()

            def loss_passes(which):
                out = [None] * len(items)
                for g in groupings[which]:
                    sums = score[which]([items[i] for i in g], impl="packed")
                    logp = torch.stack([torch.log_softmax(s, 0)[choice[i]] for s, i in zip(sums, g, strict=True)])
                    logp.sum().backward()
                    for s, i in zip(sums, g, strict=True):
                        out[i] = s.detach().float().cpu()
                return out

            secs = {}
            got = {}
            for which in ("old", "new"):
                secs[which], got[which], _ = timed(lambda w=which: loss_passes(w), args.repeats, device)
            diff = max(float((a - b).abs().max()) for a, b in zip(got["old"], got["new"], strict=True))
            print(f"  loss passes over {len(items)} decisions, forward + backward: old {secs['old']:.2f} s "
                  f"({len(groupings['old'])} passes), new {secs['new']:.2f} s ({len(groupings['new'])} passes), "
                  f"{secs['old'] / secs['new']:.2f}x; largest log-prob difference {diff:.1e}")
    return 0


if __name__ == "__main__":
    from proas.errors import ProasError

    try:
        sys.exit(main())
    except (ProasError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
