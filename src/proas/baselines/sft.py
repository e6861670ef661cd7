"""The SFT baseline: maximise the log-likelihood of the oracle's actions on the training tasks.

Data: the env's oracle is replayed on the training tasks an RL run of the same config would see
(the tasks of ``env.fixed_train_set`` when set, else the env's ``train`` split; with
``max_tasks``, that many of them evenly spaced over the list, so every task type stays in). At
every step the policy's ``Context`` is rebuilt exactly as the rollout builds it (task text,
observation, history, admissible actions, invalid candidates), and the oracle's action is the
target.

Loss: the negative token-mean log-likelihood of the target through the policy's own
``prepare``/``evaluate`` path, the one the RL losses use: for the ``scorer`` a "token" is the
chosen candidate; for the ``lm`` the response ``<think>...</think><action>ACTION</action>`` plus
the end-of-turn token, written in the format ``proas.lm.prompt.project_action`` parses (an
``lm`` in score mode, like the ``scorer``, learns the choice of ACTION among its candidates).
An RL run starts from the result with ``policy.lm.init_from`` / ``policy.scorer.init_from``.
The ``lm`` trains with its RL optimiser (AdamW), gradients clipped at ``algo.max_grad_norm`` and
the warmup and schedule of ``policy.lm`` stepped once per batch (docs/lm.md). With
``sequence_loss`` (``--sequence-loss``) an lm also learns to predict every token of each
demonstration, prompt included (``sequence_nll``), the loss weighted and added to the choice loss:
what TRL's SFT trains when it is not completion-only, here beside the score-mode choice.

Validation on the fixed validation set, as RL runs do (same seed rule, same temperature), after
every ``val_every`` epochs and before training (epoch 0); the best checkpoint is kept in
``RUN_DIR/best`` so ``proas eval RUN_DIR`` evaluates it.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from proas.baselines.common import env_name, validation_ids, write_checkpoint_dir
from proas.envs import make_factory
from proas.envs.base import Env
from proas.envs.replay import oracle_walk
from proas.errors import ProasError
from proas.fileio import atomic_write_json
from proas.lm.prompt import LM_THOUGHT, score_response  # the thought SFT teaches, defined with the lm
from proas.policies.base import Context, Policy, task_text
from proas.train.config import Config, config_to_yaml, pin_tuned_defaults
from proas.train.loop import val_seed, validate, weights_finite, write_run_config
from proas.train.outputs import source_commit
from proas.train.rundir import absolute_paths
from proas.train.warm_start import build_policy, init_source_record

__all__ = [
    "LM_THOUGHT",
    "SFTOptions",
    "make_sft_optimizer",
    "oracle_examples",
    "sft_task_ids",
    "teacher_data",
    "train_sft",
]


@dataclass
class SFTOptions:
    """Knobs of ``proas sft`` (the rest comes from the RL config: env, policy, validation)."""

    epochs: int = 10
    #: learning rate; None = 0.01 (Adam) for the scorer, ``policy.lm.lr`` for the lm
    lr: float | None = None
    #: examples (steps) per gradient step
    batch_size: int = 64
    #: validate every this many epochs (and after the last)
    val_every: int = 1
    #: use at most this many training tasks, evenly spaced over the list (None = all of them)
    max_tasks: int | None = None
    #: lm only: weight of a next-token loss over the whole demonstration (prompt and the oracle's
    #: response, as TRL's SFT trains when it is not completion-only), added to the choice loss;
    #: 0 = the choice (or response) loss alone
    sequence_loss: float = 0.0


def sft_task_ids(cfg: Config, env: Env, max_tasks: int | None = None) -> list[str]:
    """The training tasks: those of the fixed schedule when configured, else the train split."""
    from proas import tasksets

    if cfg.env.fixed_train_set.path:
        sched = tasksets.load_schedule(tasksets.resolve_data_path(cfg.env.fixed_train_set.path))
        ids = list(dict.fromkeys(t for step in sched.steps for t in step))
    else:
        ids = list(env.task_ids("train"))
    if max_tasks is not None and max_tasks < len(ids):
        # evenly spaced over the list, so a subset keeps every task type of an ordered split
        ids = [ids[i] for i in np.linspace(0, len(ids) - 1, max(1, max_tasks)).round().astype(int)]
    if not ids:
        raise ProasError(f"env {getattr(env, 'name', '?')!r}: no training tasks for SFT")
    return ids


def oracle_examples(env: Env, task_ids: Sequence[str], *, env_label: str,
                    max_steps: int) -> tuple[list[tuple[Context, str]], int]:
    """Replay the oracle on each task; return ``(context, oracle action)`` pairs and the number
    of tasks whose oracle did not win within ``max_steps`` (their steps are left out)."""
    out: list[tuple[Context, str]] = []
    failed = 0
    for tid in task_ids:
        pairs = []
        history: list[tuple[str, str]] = []
        won = False
        task = ""
        for t, tr in enumerate(oracle_walk(env, tid, max_steps)):
            if t == 0:
                task = task_text(tr.obs, tr.info)
            pairs.append((Context(env_name=env_label, task=task, observation=tr.obs, history=list(history),
                                  admissible=tr.info.get("admissible"),
                                  invalid_candidates=list(tr.info.get("invalid_candidates") or []), step=t),
                          tr.action))
            history.append((tr.obs, tr.action))
            won = bool(tr.next_info.get("won"))
        if won:
            out.extend(pairs)
        else:
            failed += 1
    return out, failed


def teacher_data(policy: Policy, ctx: Context, action: str) -> dict[str, Any] | None:
    """The decision data ``policy.prepare`` takes for "``policy`` chose ``action`` in ``ctx``";
    None when the policy cannot express the action (a scorer whose candidates lack it)."""
    if policy.kind == "scorer":
        cands, data = policy.featurize(ctx)  # type: ignore[attr-defined]
        if action not in cands:
            return None
        return dict(data, choice=cands.index(action))
    if policy.kind == "lm" and policy.mode == "score":  # type: ignore[attr-defined]
        # the choice among the candidates, as for the scorer: SFT maximises the candidate softmax
        cands, prompt, resp = policy.score_item(ctx)  # type: ignore[attr-defined]
        if action not in cands:
            return None
        return {"prompt": prompt, "cands": resp, "choice": cands.index(action)}
    if policy.kind == "lm":
        tok = policy.tokenizer  # type: ignore[attr-defined]
        text = score_response(action)
        resp = tok(text, add_special_tokens=False)["input_ids"] + [policy.stop_ids[0]]  # type: ignore[attr-defined]
        return {"prompt": policy.encode_prompt(ctx), "response": resp}  # type: ignore[attr-defined]
    raise ProasError(f"sft: policy kind {policy.kind!r} is not supported (scorer or lm)")


#: the scorer's SFT learning rate when ``--lr`` is not given (Adam)
SCORER_SFT_LR = 0.01


def sequence_nll(policy: Policy, data: Sequence[dict[str, Any]]) -> torch.Tensor:
    """The mean next-token NLL of an lm over whole demonstrations: each step's prompt followed by
    the oracle's response (score mode: the chosen candidate's tokens), every token after the
    first a target (the loss TRL's SFT computes when it is not completion-only)."""
    seqs = [list(d["prompt"]) + list(d["cands"][d["choice"]] if "cands" in d else d["response"]) for d in data]
    width = max(len(x) for x in seqs)
    pad = policy.tokenizer.pad_token_id  # type: ignore[attr-defined]
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, x in enumerate(seqs):
        ids[i, : len(x)] = torch.tensor(x, dtype=torch.long)
        mask[i, : len(x)] = 1
    dev = policy.device  # type: ignore[attr-defined]
    ids, mask = ids.to(dev), mask.to(dev)
    with policy.compute():  # type: ignore[attr-defined]
        logits = policy.module(input_ids=ids, attention_mask=mask, use_cache=False).logits  # type: ignore[attr-defined]
    tgt = ids[:, 1:]
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                                            reduction="none").view_as(tgt)
    keep = mask[:, 1:].to(nll.dtype)
    return (nll * keep).sum() / keep.sum().clamp(min=1.0)


def make_sft_optimizer(policy: Policy, cfg: Config, lr: float | None) -> torch.optim.Optimizer:
    """Adam for the scorer (its RL optimiser, SGD at a large rate, is tuned to the scale of the RL
    loss, not to a mean NLL, and diverges here), the policy's own optimiser for the lm."""
    if policy.kind == "scorer":
        return torch.optim.Adam(policy.parameters(), lr=SCORER_SFT_LR if lr is None else lr)
    return policy.make_optimizer(cfg.policy.lm.lr if lr is None else lr)


def _save_best(run_dir: Path, cfg: Config, policy: Policy, epoch: int, metrics: dict[str, Any],
               init_source: dict[str, Any] | None) -> None:
    write_checkpoint_dir(run_dir / "best", config_yaml=config_to_yaml(cfg), policy=policy,
                         step=epoch, meta={"baseline": "sft", **metrics}, init_source=init_source)


def train_sft(cfg: Config, run_dir: Path, opts: SFTOptions,
              log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run SFT into ``run_dir``; return the summary (also written to ``summary.json``)."""
    if opts.epochs < 1 or opts.batch_size < 1 or opts.val_every < 1:
        raise ProasError("sft: --epochs, --batch-size and --val-every must be >= 1")
    if not (math.isfinite(opts.sequence_loss) and opts.sequence_loss >= 0):
        raise ProasError(f"sft: --sequence-loss must be a finite number >= 0, got {opts.sequence_loss}")
    if opts.sequence_loss and cfg.policy.kind != "lm":
        raise ProasError("sft: --sequence-loss needs policy=lm (the scorer has no tokens to predict)")
    if (run_dir / "config.yaml").exists():
        raise ProasError(f"{run_dir}: a run already lives here; choose another directory")
    log = log or (lambda s: None)
    # its checkpoint records them (paths, the per-env defaults as values): eval and RL from it
    # work from any directory, with its setting
    cfg = pin_tuned_defaults(absolute_paths(cfg))
    t_start = time.perf_counter()
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.train.threads)
    rng = np.random.default_rng(cfg.seed)
    make = make_factory(cfg.env.name, cfg.env.options, config=True)
    env0 = make()
    label = env_name(cfg, env0)
    max_steps = int(cfg.env.max_steps or env0.max_steps)
    init_source = init_source_record(cfg)  # an lm source's structure: its checkpoint records it, as a run's does
    policy = build_policy(cfg, cfg.seed)
    optimizer = make_sft_optimizer(policy, cfg, opts.lr)

    train_ids = sft_task_ids(cfg, env0, opts.max_tasks)
    examples, failed = oracle_examples(env0, train_ids, env_label=label, max_steps=max_steps)
    data = [d for d in (teacher_data(policy, c, a) for c, a in examples) if d is not None]
    if not data:
        raise ProasError(f"sft: no oracle step to learn from ({len(train_ids)} tasks, {failed} unsolved)")
    log(f"sft: {len(data)} oracle steps from {len(train_ids) - failed} tasks "
        f"({failed} unsolved, {len(examples) - len(data)} steps not expressible)")
    # the lm, as LLM trainers: gradients clipped at algo.max_grad_norm, and the schedule of
    # policy.lm (warmup, constant / linear / cosine) stepped once per batch over every epoch
    clip = cfg.algo.max_grad_norm if policy.kind == "lm" else None
    scheduler = policy.make_scheduler(optimizer, opts.epochs * math.ceil(len(data) / opts.batch_size))

    val_ids = validation_ids(cfg, env0)
    envs = [env0] + [make() for _ in range(max(0, len(val_ids) - 1))]

    def run_val(epoch: int) -> dict[str, Any]:
        if not val_ids:
            return {}
        res = validate(policy, envs[: len(val_ids)], val_ids, seed=val_seed(cfg.seed, epoch),
                       temperature=cfg.policy.val_temperature, max_steps=max_steps, env_name=label,
                       success_reward=cfg.env.success_reward)
        return res.metrics()

    run_dir.mkdir(parents=True, exist_ok=True)
    write_run_config(run_dir, cfg)
    # what config.yaml does not hold: SFT's own knobs, the rate as the optimiser got it
    group = optimizer.param_groups[0]
    options = {"epochs": opts.epochs, "lr": float(group.get("initial_lr", group["lr"])),
               "batch_size": opts.batch_size, "val_every": opts.val_every, "max_tasks": opts.max_tasks,
               "sequence_loss": opts.sequence_loss}
    metrics_path = run_dir / "metrics.jsonl"
    history: list[dict[str, Any]] = []

    def record(rec: dict[str, Any]) -> None:
        history.append(rec)
        with open(metrics_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec, allow_nan=False) + "\n")

    best = -1.0
    t_val = time.perf_counter()
    rec0 = {"step": 0, "sft/examples": len(data), **run_val(0)}
    rec0["time/val_s"] = time.perf_counter() - t_val
    if "val/sr" in rec0:
        best = rec0["val/sr"]
        _save_best(run_dir, cfg, policy, 0, rec0, init_source)
    record(rec0)
    params = [p for g in optimizer.param_groups for p in g["params"]]  # checked finite after each step
    for epoch in range(1, opts.epochs + 1):
        order = rng.permutation(len(data))
        losses, seq_losses, norms, rates = [], [], [], []
        t_epoch = time.perf_counter()
        for start in range(0, len(order), opts.batch_size):
            idx = order[start: start + opts.batch_size]
            items = [data[i] for i in idx]
            batch = policy.prepare(items)
            stats = policy.evaluate(batch)
            choice_loss = -(stats.logp * stats.mask).sum() / stats.mask.sum().clamp(min=1.0)
            loss = choice_loss
            if opts.sequence_loss:
                seq = sequence_nll(policy, items)
                loss = choice_loss + opts.sequence_loss * seq
                seq_losses.append(float(seq.detach()))
            if not torch.isfinite(loss):
                raise ProasError(f"sft: the loss diverged (non-finite) in epoch {epoch}; lower --lr "
                                 f"(the best checkpoint so far is kept in {run_dir / 'best'})")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip is not None:
                norm = float(torch.nn.utils.clip_grad_norm_(policy.parameters(), clip))
                if not math.isfinite(norm):
                    raise ProasError(f"sft: the gradient diverged (non-finite) in epoch {epoch}; lower --lr "
                                     f"(the best checkpoint so far is kept in {run_dir / 'best'})")
                norms.append(norm)
            if scheduler is not None:
                rates.append(scheduler.get_last_lr()[0])
            optimizer.step()
            if not weights_finite(params):
                raise ProasError(f"sft: the weights are not finite after an optimiser step in epoch {epoch} (the "
                                 "learning rate or weight decay is too large for float32); lower --lr (the best "
                                 f"checkpoint so far is kept in {run_dir / 'best'})")
            if scheduler is not None:
                scheduler.step()
            losses.append(float(choice_loss.detach()))
        rec: dict[str, Any] = {"step": epoch, "sft/nll": float(np.mean(losses)),
                               "time/train_s": time.perf_counter() - t_epoch}
        if seq_losses:
            rec["sft/sequence_nll"] = float(np.mean(seq_losses))
        if norms:
            rec["sft/grad_norm"] = float(np.mean(norms))  # before clipping
        if rates:
            rec["sft/lr"] = rates[-1]  # the epoch's last batch's
        if epoch % opts.val_every == 0 or epoch == opts.epochs:
            t_val = time.perf_counter()
            rec.update(run_val(epoch))
            rec["time/val_s"] = time.perf_counter() - t_val
            if "val/sr" in rec and rec["val/sr"] > best:
                best = rec["val/sr"]
                _save_best(run_dir, cfg, policy, epoch, rec, init_source)
        if not val_ids and epoch == opts.epochs:
            _save_best(run_dir, cfg, policy, epoch, rec, init_source)
        record(rec)
        log(f"epoch {epoch}/{opts.epochs}  nll {rec['sft/nll']:.4f}"
            + (f"  val SR {100 * rec['val/sr']:.1f}%" if "val/sr" in rec else ""))

    vals = [(r["step"], r["val/sr"]) for r in history if "val/sr" in r]
    top = max(vals, key=lambda x: (x[1], -x[0])) if vals else (None, None)
    summary = {
        "run_dir": str(run_dir), "baseline": "sft", "options": options, "epochs": opts.epochs, "examples": len(data),
        "train_tasks": len(train_ids), "oracle_failed": failed, "wall_s": time.perf_counter() - t_start,
        "first_val_sr": vals[0][1] if vals else None, "best_val_sr": top[1], "best_val_epoch": top[0],
        "last_val_sr": vals[-1][1] if vals else None,
        "final_nll": history[-1].get("sft/nll", math.nan) if history else None,
        # the code that made the start (an RL run's summary names its own): PROAS_COMMIT on a device copy
        "commit": source_commit(),
    }
    atomic_write_json(run_dir / "summary.json", summary)
    return summary
