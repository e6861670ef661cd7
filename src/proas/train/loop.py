"""The training loop, top to bottom: ``train`` (the run) and ``Trainer.train_step`` (one RL step).

``train(cfg)`` runs a run (docs/training.md, "The loop"): it checks or creates the run
directory, builds the ``Trainer`` (env, task sets, policy, critic, reference graph; or restores
them from the last checkpoint), validates the untrained policy, then repeats, until
``train.steps``: one RL step, validation every ``train.val_every`` steps (the best checkpoint
kept), a resumable checkpoint every ``train.save_every`` steps, one line of ``metrics.jsonl``;
at the end the learning curve and ``summary.json`` (``proas.train.outputs`` writes them).

One RL step (``Trainer.train_step``), its phases named and numbered as docs/training.md names
them:

1. **Tasks**: the step's line of the fixed schedule, or tasks drawn online with the run's RNG;
2. **Rollout**: G trajectories per task (``proas.train.rollout``);
3. **DAPO dynamic sampling**: groups whose outcome rewards are all equal are dropped and more
   tasks are rolled out, at most ``algo.max_gen_batches`` rollouts (the last one unfiltered,
   as verl-agent);
4. **Critic**: for ``gae`` (PPO) the critic values every step;
5. **Credit**: ``proas.credit.compute_credit`` (``credit_arrays``, the one place an advantage
   is made): base estimator with the critic's values, ProAS (or an ablation) against the
   reference graph, which first absorbs the batch's successes unless it is static, and the
   invalid-action penalty;
6. **Update**: the PPO-style loss on every step (``proas.train.losses``), minibatches of
   ``algo.minibatch_size`` steps, ``algo.ppo_epochs`` passes; the critic regresses on the GAE
   returns;
7. **Metrics** of the step (validation and checkpoints are the run's, above).

Everything random draws from RNGs whose states are checkpointed (numpy for tasks and sampling,
torch and Python's for the rest), so a run resumed from a checkpoint on CPU replays exactly
the metrics an uninterrupted run writes (the ``time/*`` keys excepted).
"""

from __future__ import annotations

import gc
import math
import random
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from proas.credit import ESTIMATORS, InvalidActionPenalty, ReferenceGraph, compute_credit, dynamic_sampling_keep
from proas.envs import make_factory
from proas.envs.base import Env
from proas.envs.replay import replay_oracles
from proas.errors import ProasError
from proas.fileio import atomic_write_json
from proas.policies.base import HF_FILES, POLICY_FILES, Policy
from proas.rollout_log import write_rollouts
from proas.termtext import printable
from proas.train import checkpoint as ckpt
from proas.train.config import (
    Config,
    config_to_yaml,
    pin_tuned_defaults,
    relocate_shipped_paths,
    same_setting,
    scorer_env,
)
from proas.train.critic import ValueModel, critic_metrics
from proas.train.diagnostics import group_metrics, length_bias
from proas.train.losses import agg_loss, low_var_kl, policy_loss, value_loss
from proas.train.outputs import (
    MetricsSink,
    default_run_name,
    gc_paused,
    load_run_config,
    plot_curve,
    read_summary,
    run_lock,
    summarise,
    wall_so_far,
    write_run_config,
)
from proas.train.rollout import Slot, rollout
from proas.train.rundir import ResumePoint, absolute_paths, apply_repairs, check_resume
from proas.train.warm_start import INIT_SOURCE, build_policy, init_source_record
from proas.types import Trajectory

__all__ = ["Trainer", "load_run_config", "train", "val_result", "val_seed", "validate", "write_run_config"]

# ----------------------------------------------------------------------------- the run
#: without a progress bar, the longest silence between two progress lines (seconds)
PLAIN_LINE_EVERY_S = 60.0


def train(cfg: Config | None, *, run_dir: Path | None = None, resume: Path | None = None,
          console: Console | None = None, stop_after: int | None = None) -> dict[str, Any]:
    """Run (or resume) a training run; return its summary.

    ``stop_after`` ends this call after that many RL steps, without forcing a checkpoint,
    exactly as a kill would (the experiments runner and tests use it to interrupt a run). The
    run directory is locked while this runs (``run_lock``).
    """
    with ExitStack() as held:
        if resume is not None:
            if not Path(resume).is_dir():
                raise ProasError(f"{resume}: no such run directory")
            held.enter_context(run_lock(Path(resume)))
        return _train(cfg, run_dir=run_dir, resume=resume, console=console, stop_after=stop_after, held=held)


def _train(cfg: Config | None, *, run_dir: Path | None, resume: Path | None, console: Console | None,
           stop_after: int | None, held: ExitStack) -> dict[str, Any]:
    console = console or Console(stderr=False)
    if resume is not None:
        run_dir = Path(resume)
        recorded = load_run_config(run_dir)
        # a run made from another checkout: its shipped task sets are read from this one's
        cfg_on_disk = relocate_shipped_paths(recorded)
        if cfg is None:
            cfg = cfg_on_disk
        elif not same_setting(cfg, cfg_on_disk):
            raise ProasError(f"{run_dir}: --resume continues the run's own config; only train.steps "
                             "and train.progress may be overridden")
        else:
            cfg = relocate_shipped_paths(cfg)
        # metrics, config and checkpoints must agree (rundir.check_resume) before anything is
        # built or written; what a kill left behind the checkpoint is repaired once the trainer stands
        point: ResumePoint | bool = check_resume(run_dir, cfg_on_disk)
    else:
        assert cfg is not None
        point = False
        # --resume, eval and serve then work from any directory, and with the setting it started
        # with: the per-env defaults it resolved are recorded as values
        cfg = pin_tuned_defaults(absolute_paths(cfg))
        if run_dir is None:
            run_dir = Path(cfg.train.out_dir) / (cfg.train.run_name or default_run_name(cfg))
        if (run_dir / "config.yaml").exists():
            raise ProasError(f"{run_dir}: a run already lives here; use --resume {run_dir} or another "
                             "train.run_name")

    # a resumed run is named at once; a new one once its directory exists, after the trainer
    # has named what it loads (env, task sets, the oracle graph): a run that cannot start has
    # no directory to name
    if resume is not None:
        console.print(f"resuming run: {escape(str(run_dir))}", soft_wrap=True)
    t_start = time.perf_counter()
    # what the run keeps is frozen out of the collector's passes until the run ends (gc_paused),
    # unless this process froze objects itself: those are not the run's to give back
    freeze = gc.get_freeze_count() == 0
    if freeze:
        held.callback(gc.unfreeze)
    # the trainer resolves the env, task sets, policy and graph before the run directory exists,
    # so a run that cannot start leaves no config-only directory that blocks the next attempt
    with gc_paused(freeze, collect=False):
        trainer = Trainer(cfg, run_dir, resume=point, console=console)
    if resume is not None and cfg != recorded:
        write_run_config(run_dir, cfg)  # a new step budget, or this checkout's task sets
    if resume is None:
        if (run_dir / "config.yaml").exists():  # another run took the directory meanwhile
            raise ProasError(f"{run_dir}: a run already lives here; use --resume {run_dir} or another "
                             "train.run_name")
        run_dir.mkdir(parents=True, exist_ok=True)
        held.enter_context(run_lock(run_dir))
        if (run_dir / "config.yaml").exists():  # taken between the check above and the lock
            raise ProasError(f"{run_dir}: a run already lives here; use --resume {run_dir} or another "
                             "train.run_name")
        write_run_config(run_dir, cfg)
        console.print(f"run directory: {escape(str(run_dir))}", soft_wrap=True)
    history = trainer.history
    # the run's wall time over all its parts (each start's loading included): what the parts
    # before this one took, as the last record kept says, plus this part's
    wall_before = wall_so_far(history)

    def wall() -> float:
        return wall_before + time.perf_counter() - t_start

    finished_before = trainer.step >= cfg.train.steps and (run_dir / "summary.json").exists()
    sink = MetricsSink(run_dir, purge_step=trainer.step + 1 if resume is not None else None)
    total = cfg.train.steps
    show_bar = cfg.train.progress and console.is_terminal
    progress = Progress(
        TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(), console=console, disable=not show_bar,
    )
    done_this_call = 0
    last_line = time.monotonic()
    try:
        with progress:
            bar = progress.add_task("train", total=total, completed=trainer.step, info="")
            if trainer.step == 0 and not history:
                rec: dict[str, Any] = {"step": 0}
                if cfg.train.val_before_train and cfg.train.val_every and trainer.val_ids:
                    console.print(f"validating the untrained policy on {len(trainer.val_ids)} tasks ...")
                    with gc_paused(freeze):
                        rec.update(trainer.run_validation(0))
                    if "val/sr" in rec:  # the figure every later line is read against
                        console.print(f"step 0/{total}  val SR {100 * rec['val/sr']:5.1f}%", soft_wrap=True)
                rec["time/wall"] = wall()
                sink.write(rec)
                history.append(rec)
                trainer.save()
            while trainer.step < total:
                if stop_after is not None and done_this_call >= stop_after:
                    break
                t0 = time.perf_counter()
                with gc_paused(freeze):
                    rec = trainer.train_step()
                    k = trainer.step
                    if cfg.train.val_every and (k % cfg.train.val_every == 0 or k == total):
                        rec.update(trainer.run_validation(k))
                rec["time/step"] = time.perf_counter() - t0
                rec["time/wall"] = wall()
                sink.write(rec)
                history.append(rec)
                if cfg.train.save_every and (k % cfg.train.save_every == 0 or k == total):
                    trainer.save()
                info = (f"SR {100 * rec['train/sr']:5.1f}%  reward {rec['train/reward']:6.2f}  "
                        f"{rec['time/step']:.2f}s/step")
                if "val/sr" in rec:
                    info += f"  val SR {100 * rec['val/sr']:5.1f}%"
                done_this_call += 1
                progress.update(bar, completed=k, info=info)
                # without a bar (a log file, a pipe): the first step at once, so that a start is
                # seen to have worked, then validations, the last step and a line a minute
                if not show_bar and (done_this_call == 1 or "val/sr" in rec or k == total
                                     or time.monotonic() - last_line >= PLAIN_LINE_EVERY_S):
                    console.print(f"step {k}/{total}  {info}", soft_wrap=True)
                    last_line = time.monotonic()
    finally:
        sink.close()

    if finished_before and done_this_call == 0:
        # a --resume of a finished run: nothing ran, so its summary and curve stay as they are
        kept = read_summary(run_dir)
        if kept is not None:
            console.print(f"finished already: {trainer.step} of {total} steps; {run_dir / 'summary.json'} "
                          f"kept (continue with: proas train --resume {run_dir} train.steps=N)", soft_wrap=True)
            return kept
    summary = summarise(cfg, run_dir, history, wall(), trainer)
    if trainer.step >= total:
        plot_curve(history, run_dir / "curve.png",
                   f"{cfg.env.name} / {cfg.policy.kind} / {cfg.algo.estimator}+{cfg.algo.shaping} / seed {cfg.seed}")
        atomic_write_json(run_dir / "summary.json", summary)
        vals = (f"best validation SR {_pct(summary['best_val_sr'])} (step {summary['best_val_step']}), "
                f"last {_pct(summary['last_val_sr'])}" if summary.get("best_val_step") is not None
                else "no validation (train.val_every=0)")
        console.print(
            f"[bold green]done[/]: {trainer.step} steps in {summary['wall_s']:.0f}s; {vals}\n"
            f"run:            {run_dir}\n"
            f"learning curve: {run_dir / 'curve.png'}\n"
            f"best checkpoint: {run_dir / 'best'}  (proas eval {run_dir})",
            soft_wrap=True,
        )
    return summary


# ----------------------------------------------------------------------------- the RL step
class Trainer:
    """Owns the run's state: env pool, policy, optimiser, critic, graph, RNGs, run directory.
    ``train_step`` is one RL step; ``train`` drives the run."""

    def __init__(self, cfg: Config, run_dir: Path, *, resume: bool | ResumePoint = False, console=None):
        """``resume``: True, or what ``rundir.check_resume`` found (``train`` checks the run
        directory before anything is built or written)."""
        self.cfg = cfg
        self.run_dir = run_dir
        self.console = console
        point = check_resume(run_dir, cfg) if resume is True else (resume or None)
        torch.set_num_threads(cfg.train.threads)
        self.make_env = make_factory(cfg.env.name, cfg.env.options, config=True)
        self.envs: list[Env] = [self.make_env()]
        self.env_name = str(getattr(self.envs[0], "name", cfg.env.name))
        self.max_steps = int(cfg.env.max_steps or self.envs[0].max_steps)

        seed = cfg.seed
        random.seed(seed)
        torch.manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        # resumed from a checkpoint that holds what a warm start's source gave (its weights, the
        # KL reference, an lm's structure): the source is not read again
        restore = point.state if point is not None and point.state is not None else None
        if restore is not None and self._init_from() and "reference" not in restore \
                and cfg.algo.resolved_kl_coef(cfg.policy.kind) > 0 and not self._lora():
            restore = None  # a checkpoint from before the reference was kept: the source gives it
        self.policy = build_policy(cfg, seed, restore=restore)
        self.init_source = (restore[INIT_SOURCE] if restore is not None and INIT_SOURCE in restore
                            else init_source_record(cfg))
        self.lr = cfg.policy.scorer.resolved_lr(scorer_env(cfg)) if cfg.policy.kind == "scorer" else cfg.policy.lm.lr
        self.optimizer = self.policy.make_optimizer(self.lr)
        # the lm's warmup and schedule, stepped once per RL step (verl's unit); None: constant
        self.scheduler = self.policy.make_scheduler(self.optimizer, cfg.train.steps)
        self.kl_coef = cfg.algo.resolved_kl_coef(cfg.policy.kind)
        self.ref = self.policy.reference_module() if self.kl_coef > 0 else None
        self.critic = self.critic_opt = None
        if ESTIMATORS[cfg.algo.estimator].needs_values:
            self.critic = ValueModel(cfg.policy.scorer.hash_bits, cfg.algo.critic_features)
            self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.algo.critic_lr)
        #: what the optimisers step, checked finite after each update (``weights_finite``)
        self._weights = [p for g in self.optimizer.param_groups for p in g["params"]] + (
            list(self.critic.parameters()) if self.critic is not None else [])

        self._load_task_sets()
        sched = (f" (schedule {escape(str(self.schedule.path))}: {len(self.schedule.steps)} steps)"
                 if self.schedule is not None else "")
        self._log(f"env {self.env_name}: {len(self.train_ids)} training tasks{sched}, "
                  f"{len(self.val_ids)} validation tasks")
        self.step = 0
        self.best_sr = -1.0
        self.history: list[dict[str, Any]] = []
        # set here, never None after: a resumed run's graph is its checkpoint's
        self.graph: ReferenceGraph = self._resume(point) if point is not None else self._initial_graph()

    # ---- one RL step
    def train_step(self) -> dict[str, Any]:
        """Run RL step ``self.step + 1``, phase by phase (module docstring); return its metrics record."""
        k = self.step + 1
        t0 = time.perf_counter()
        # 1-3. tasks, rollout, DAPO dynamic sampling
        trajs, rec = self._rollout(k)
        t1 = time.perf_counter()
        if trajs:
            # 4. critic
            values = self._critic_values(trajs)
            # 5. credit
            res = self._credit(trajs, k, values)
            t2 = time.perf_counter()
            every = self.cfg.train.rollout_log_every
            if every and (k % every == 0 or k == self.cfg.train.steps):
                write_rollouts(self.run_dir, k, trajs, res)
            # 6. update
            rec.update(self._update(trajs, res))
            # 7. metrics
            rec.update(_credit_metrics(trajs, res))
        else:
            t2 = time.perf_counter()
        if self.scheduler is not None:
            rec["optim/lr"] = float(self.scheduler.get_last_lr()[0])  # the rate of this step's updates
            self.scheduler.step()
        t3 = time.perf_counter()
        rec.update({"graph/nodes": float(self.graph.num_nodes), "graph/edges": float(self.graph.num_edges)})
        rec.update({"time/rollout": t1 - t0, "time/credit": t2 - t1, "time/update": t3 - t2})
        self.step = k
        return {"step": k, **rec}

    def _tasks_for(self, step: int, batch: int) -> list[str]:
        """1. Tasks: the schedule's line of ``step`` (its first batch), else drawn online."""
        n = self.cfg.env.tasks_per_step
        if self.schedule is not None and batch == 0:
            return self.schedule.tasks_at(step - 1)
        idx = self.rng.choice(len(self.train_ids), size=min(n, len(self.train_ids)), replace=False)
        return [self.train_ids[i] for i in idx]

    def _rollout(self, step: int) -> tuple[list[Trajectory], dict[str, float]]:
        """2-3. Rollout, with DAPO's dynamic sampling: the trajectories kept, and the rollout's
        metrics (over every trajectory played)."""
        cfg = self.cfg
        G = cfg.env.group_size
        dynamic = cfg.algo.resolved_dynamic_sampling()
        target = cfg.env.tasks_per_step * G
        kept: list[Trajectory] = []
        seen: list[Trajectory] = []
        exceptions = 0
        first_exception = ""
        batches = 0
        acted = [0, 0, 0]  # decisions, truncated responses, trimmed prompts
        while True:
            tasks = self._tasks_for(step, batches)
            slots = [Slot(t, f"s{step}b{batches}g{k}", f"s{step}b{batches}g{k}t{j}")
                     for k, t in enumerate(tasks) for j in range(G)]
            trajs, stats = rollout(
                self._env_pool(len(slots)), slots, self.policy, self.rng,
                temperature=cfg.policy.temperature, max_steps=self.max_steps,
                success_reward=cfg.env.success_reward, env_name=self.env_name)
            batches += 1
            exceptions += stats.env_exceptions
            for j, v in enumerate((stats.decisions, stats.truncated_responses, stats.trimmed_prompts)):
                acted[j] += v
            if stats.exception_messages and not first_exception:
                first_exception = stats.exception_messages[0]
            for msg in stats.exception_messages[:3]:
                # the message quotes env text: shown literally, never as markup or escapes
                self._log(f"[yellow]env exception[/] step {step}: {escape(printable(msg, newlines=False))}")
            seen.extend(trajs)
            if not dynamic or batches >= cfg.algo.max_gen_batches:
                kept.extend(trajs)
                break
            keep = dynamic_sampling_keep(trajs)
            kept.extend(t for t in trajs if keep[t.group])
            if len(kept) >= target:
                break
        if seen and exceptions >= len(seen):  # each episode raises at most once: all of them did
            raise ProasError(f"step {step}: the env raised in every one of the {len(seen)} episodes "
                             f"(first: {first_exception}); nothing to train on")
        kept = [t for t in kept if t.steps]  # an env that failed at reset left nothing to learn from
        n = max(1, len(seen))
        info = {
            "train/sr": sum(t.success for t in seen) / n,
            "train/reward": sum(t.reward for t in seen) / n,
            "train/score": sum(float(t.extra.get("score", 0.0)) for t in seen) / n,
            "train/steps": sum(len(t) for t in seen) / n,
            "train/env_exceptions": float(exceptions),
            "train/gen_batches": float(batches),
            "train/trajectories": float(len(kept)),
        }
        info.update(group_metrics(seen))  # the signal the groups carry (all-fail, flat groups)
        if self.policy.kind == "lm":  # budgets of the lm: how often they bite
            info["rollout/truncated_responses"] = acted[1] / max(1, acted[0])
            info["rollout/trimmed_prompts"] = acted[2] / max(1, acted[0])
            info.update(length_bias(seen))  # score mode: does it pick the shortest candidate?
        return kept, info

    def _critic_values(self, trajs: list[Trajectory]) -> np.ndarray | None:
        """4. Critic: ``V(s_t)`` of every step (``(S,)``), for ``gae``; ``None`` without a critic."""
        if self.critic is None:
            return None
        with torch.no_grad():
            return self.critic([s for t in trajs for s in t.steps]).double().numpy()

    def _credit(self, trajs: list[Trajectory], step: int, values: np.ndarray | None = None):
        """5. Credit: ``compute_credit`` with the critic's values and verl-agent's invalid-action
        penalty on responses that could not be parsed into an action (``credit_arrays`` charges
        it: before the group statistics, or on the final advantage)."""
        a = self.cfg.algo
        steps = [s for t in trajs for s in t.steps]
        penalty = InvalidActionPenalty(self.cfg.env.invalid_action_penalty, np.fromiter(
            (bool(s.extra.get("malformed")) for s in steps), dtype=bool, count=len(steps)))
        return compute_credit(trajs, self.graph, estimator=a.estimator, shaping=a.shaping,
                              estimator_options=a.estimator_options(self.env_name),
                              seed=self.cfg.seed * 1_000_003 + step, evolve=a.graph.evolve, rea=a.graph.rea,
                              values=values, penalty=penalty)

    def _update(self, trajs: list[Trajectory], res) -> dict[str, float]:
        """6. Update: the policy (and the critic) on every step of the batch; the losses' metrics."""
        a = self.cfg.algo
        steps = [s for t in trajs for s in t.steps]
        data = [s.extra["policy"] for s in steps]
        adv_np = res.final  # the advantage with the invalid-action penalty, however it was charged
        adv = torch.as_tensor(adv_np, dtype=torch.float32)
        n = len(steps)
        mb = a.minibatch_size
        micro = self.cfg.policy.lm.micro_batch_size if self.policy.kind == "lm" else mb
        # old log-probs, token by token, before any update (verl's old_log_prob); a policy whose
        # rollout log-probs are exact (the scorer: same weights, same arithmetic) reuses them
        old_tok: list[torch.Tensor] = []
        old_one: torch.Tensor | None = None  # one token a step (the scorer): every step's at once
        if self.policy.exact_rollout_logp:
            old_one = torch.tensor([float(s.extra["logp"]) for s in steps], dtype=torch.float32)
        else:
            slots: list[torch.Tensor | None] = [None] * n
            with torch.no_grad():
                # a policy's passes need not take the decisions in order (the lm's go by width)
                for group in self.policy.micro_batches(data, micro):
                    st = self.policy.evaluate(self.policy.prepare([data[i] for i in group]))
                    for j, i in enumerate(group):
                        slots[i] = st.logp[j][st.mask[j] > 0]
            old_tok = slots  # type: ignore[assignment]  # micro_batches puts every decision in one group
        sums = {"loss/pg": 0.0, "loss/kl": 0.0, "loss/entropy": 0.0, "loss/clipfrac": 0.0,
                "loss/grad_norm": 0.0, "loss/critic": 0.0}
        updates = 0
        clip_high = a.resolved_clip_high()
        returns = torch.as_tensor(res.returns, dtype=torch.float32) if res.returns is not None else None
        prepare = self.policy.preparer(data)  # each minibatch's ``prepare``, from data packed once
        for _ in range(a.ppo_epochs):
            order = self.rng.permutation(n)
            for start in range(0, n, mb):
                idx = order[start: start + mb]
                self.optimizer.zero_grad(set_to_none=True)
                for group in self.policy.micro_batches([data[i] for i in idx], micro):
                    sub = idx[group]
                    weight = len(sub) / len(idx)
                    prepared = prepare(sub)
                    st = self.policy.evaluate(prepared)
                    if old_one is not None and st.logp.shape[1] == 1:
                        old = old_one[torch.from_numpy(sub)][:, None].to(st.logp)  # its device and dtype
                    else:
                        old = _pad([old_tok[i] if old_one is None else old_one[i:i + 1] for i in sub], st.logp)
                    pg, pm = policy_loss(st.logp, old, adv[sub][:, None].to(st.logp), st.mask,
                                         clip_low=a.clip_low, clip_high=clip_high, dual_clip=a.dual_clip,
                                         agg=a.loss_agg)
                    ent = agg_loss(st.entropy, st.mask, a.loss_agg)
                    loss = pg - a.entropy_coef * ent
                    kl = torch.zeros(())
                    if self.ref is not None:
                        with torch.no_grad():
                            ref = self.policy.evaluate(prepared, module=self.ref).logp
                        kl = agg_loss(low_var_kl(st.logp, ref), st.mask, a.loss_agg)
                        loss = loss + self.kl_coef * kl
                    (loss * weight).backward()
                    sums["loss/pg"] += float(pg.detach()) * weight
                    sums["loss/kl"] += float(kl.detach()) * weight
                    sums["loss/entropy"] += float(ent.detach()) * weight
                    sums["loss/clipfrac"] += pm["clipfrac"] * weight
                gn = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), a.max_grad_norm)
                if not (math.isfinite(float(gn)) and math.isfinite(sums["loss/pg"])):
                    # a NaN or infinite loss or gradient would poison every weight from here on
                    raise ProasError(f"step {self.step + 1}: the loss or its gradient is not finite "
                                     f"(policy loss {sums['loss/pg']:.4g}, gradient norm {float(gn):.4g}); "
                                     "the run stops here and its last checkpoint is intact")
                sums["loss/grad_norm"] += float(gn)
                self.optimizer.step()
                if self.critic is not None and returns is not None:
                    self.critic_opt.zero_grad(set_to_none=True)
                    v = self.critic([steps[i] for i in idx])
                    vl = value_loss(v, returns[idx])
                    vl.backward()
                    self.critic_opt.step()
                    sums["loss/critic"] += float(vl.detach())
                if not weights_finite(self._weights):
                    # a step from finite gradients can still overflow (a huge rate or weight
                    # decay): stop before any checkpoint holds the inf/NaN weights
                    raise ProasError(f"step {self.step + 1}: the weights are not finite after an optimiser step "
                                     "(the learning rate or weight decay is too large for float32); the run "
                                     "stops here and its last checkpoint is intact")
                updates += 1
        out = {k: v / max(1, updates) for k, v in sums.items()}
        out["loss/updates"] = float(updates)
        if self.critic is not None and returns is not None:  # the critic's fit before this update
            out.update(critic_metrics(res.values, res.returns))
        return out

    # ---- construction
    def _init_from(self) -> str | None:
        p = self.cfg.policy
        return p.scorer.init_from if p.kind == "scorer" else p.lm.init_from

    def _lora(self) -> bool:
        return self.cfg.policy.kind == "lm" and self.cfg.policy.lm.lora_rank > 0

    # ---- task sets and graph
    def _load_task_sets(self) -> None:
        from proas import tasksets

        cfg = self.cfg.env
        self.schedule = None
        if cfg.fixed_train_set.path:
            # as given, else under the shipped data (docs/tasksets.md)
            self.schedule = tasksets.load_schedule(tasksets.resolve_data_path(cfg.fixed_train_set.path))
            if self.schedule.env != self.env_name:
                raise ProasError(f"{cfg.fixed_train_set.path}: a schedule for {self.schedule.env!r}, "
                                 f"not for env {self.env_name!r}")
        self.train_ids = list(self.envs[0].task_ids("train"))
        if not self.train_ids and self.schedule is None:
            raise ProasError(f"env {self.env_name!r} has no training tasks")
        self.val_ids = self._val_ids_for(self.cfg, self.envs[0], self.env_name)

    @staticmethod
    def _val_ids_for(cfg: Config, env: Env, env_name: str) -> list[str]:
        """The validation tasks: a given ``.jsonl``, else the shipped fixed set of the env, else
        the env's ``valid`` split; the first ``size`` of them."""
        from proas import tasksets

        v = cfg.env.fixed_val_set
        if not v.enabled:
            return []
        where = "the env's valid split"
        if v.path or tasksets.val_set_path(env_name).exists():
            vs = (tasksets.load_val_set(path=tasksets.resolve_data_path(v.path), env=env_name) if v.path
                  else tasksets.load_val_set(env=env_name))
            if vs.env != env_name:
                raise ProasError(f"{vs.path}: a validation set for env {vs.env!r}, but this run's env is "
                                 f"{env_name!r}; give env.fixed_val_set.path of a {env_name} set")
            ids, where = vs.task_ids, str(vs.path)
        elif env_name in tasksets.SHIPPED_VAL_ENVS:
            raise ProasError(f"{tasksets.val_set_path(env_name)}: the validation set shipped for env {env_name!r} "
                             "is missing (a damaged install: reinstall proas), or give env.fixed_val_set.path")
        else:
            ids = list(env.task_ids("valid"))
        ids = list(ids[: v.size])
        # every task must start: a task the env cannot start would count as a failure and
        # validation would read 0% without saying why
        for task in ids:
            try:
                env.reset(task)
            except Exception as exc:  # noqa: BLE001 - any failure to start is the same refusal
                msg = printable(str(exc), newlines=False)[:200]
                raise ProasError(f"{where}: validation task {printable(task, newlines=False)[:80]!r} cannot be "
                                 f"started by env {env_name!r} ({type(exc).__name__}: {msg})") from None
        return ids

    def _initial_graph(self) -> ReferenceGraph:
        g = self.cfg.algo.graph
        if g.source == "load":
            graph = ReferenceGraph.load(g.path)
            self._log(f"reference graph: {escape(str(g.path))}: {graph.num_nodes} states, {graph.num_edges} edges")
        elif g.source == "rollouts":
            graph = ReferenceGraph()
        else:
            if self.schedule is not None:
                ids = sorted({t for step in self.schedule.steps for t in step})
            else:
                ids = list(self.train_ids)
            if g.oracle_tasks:
                ids = ids[: g.oracle_tasks]
            # the slowest part of starting a run (about 25 s for household's 3553 tasks)
            self._log(f"reference graph: replaying the oracle on {len(ids)} training tasks ...")
            t0 = time.perf_counter()
            trajs, failed = replay_oracles(self.envs[0], ids, int(self.envs[0].max_steps))
            if not trajs:
                first = f"{failed[0].task_id}: {failed[0].failure}" if failed else ""
                raise ProasError(f"env {self.env_name!r}: the oracle solved none of {len(ids)} "
                                 f"training tasks ({first}); cannot build the reference graph")
            graph = ReferenceGraph.from_trajectories(trajs)
            graph.meta.update({"built_from": len(trajs), "oracle_failed": len(failed)})
            self._log(f"reference graph: {graph.num_nodes} states, {graph.num_edges} edges from {len(trajs)} "
                      f"walkthroughs ({time.perf_counter() - t0:.0f}s)")
        if g.prune > 0:
            graph.prune(g.prune, seed=self.cfg.seed)
        return graph

    def _env_pool(self, n: int) -> list[Env]:
        while len(self.envs) < n:
            self.envs.append(self.make_env())
        return self.envs[:n]

    # ---- validation, checkpoints, run directory
    def run_validation(self, step: int) -> dict[str, float]:
        if not self.val_ids:
            return {}
        t0 = time.perf_counter()
        res = validate(self.policy, self._env_pool(len(self.val_ids)), self.val_ids,
                       seed=val_seed(self.cfg.seed, step), temperature=self.cfg.policy.val_temperature,
                       max_steps=self.max_steps, env_name=self.env_name,
                       success_reward=self.cfg.env.success_reward)
        out = res.metrics()
        out["time/val"] = time.perf_counter() - t0
        if res.sr > self.best_sr:
            self.best_sr = res.sr
            out["val/best_sr"] = res.sr
            self._save_best(step, out)
        out["val/best_sr"] = self.best_sr
        if step == self.cfg.train.steps:
            # the final policy again at other temperatures, on the same tasks and sampling seed
            # (docs/study-protocol.md: what ProAS changes, preferences or sharpness)
            for temp in self.cfg.train.final_val_temperatures:
                extra = validate(self.policy, self._env_pool(len(self.val_ids)), self.val_ids,
                                 seed=val_seed(self.cfg.seed, step), temperature=float(temp),
                                 max_steps=self.max_steps, env_name=self.env_name,
                                 success_reward=self.cfg.env.success_reward)
                out.update({k: v for k, v in extra.metrics(f"val_t{float(temp):g}/").items() if "/sr/" not in k})
        return out

    def state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "config": config_to_yaml(self.cfg),
            # the weights: in state.pt, or for the lm a Hugging Face directory beside it
            # (``checkpoint_writer``, docs/lm.md)
            **self.policy.checkpoint_state(),
            "optimizer": self.optimizer.state_dict(),
            **({"lr_scheduler": self.scheduler.state_dict()} if self.scheduler is not None else {}),
            "critic": self.critic.state_dict() if self.critic is not None else None,
            "critic_optimizer": self.critic_opt.state_dict() if self.critic_opt is not None else None,
            "rng_numpy": self.rng.bit_generator.state,
            "rng_torch": torch.get_rng_state(),
            "rng_python": random.getstate(),
            "best_sr": self.best_sr,
            # a warm start's: the KL reference (its weights, which no seed rebuilds) and, for an
            # lm, the source's structure (``warm_start.init_source_record``), so that resuming
            # and evaluating never read the source again
            **({"reference": self.ref.state_dict()} if self._keeps_reference() else {}),
            **({INIT_SOURCE: self.init_source} if self.init_source is not None else {}),
        }

    def _keeps_reference(self) -> bool:
        # a LoRA model's reference is its own base weights (adapters off), saved with the policy
        return self.ref is not None and bool(self._init_from()) and len(self.ref.state_dict()) > 0

    def save(self) -> Path:
        return ckpt.save_resumable(self.run_dir, self.step, self.state(), self.graph,
                                   write_files=self.policy.checkpoint_writer())

    def _save_best(self, step: int, metrics: dict[str, float]) -> None:
        meta = {"step": step, **{k: v for k, v in metrics.items() if k.startswith("val/")}}
        state = dict(self.state(), step=step)
        state.pop("reference", None)  # never resumed from: evaluating needs no reference
        ckpt.replace_checkpoint(self.run_dir / "best", state, meta, self.graph,
                                write_files=self.policy.checkpoint_writer())

    def _resume(self, point: ResumePoint) -> ReferenceGraph:
        """Restore the checkpoint ``point`` names into ``self`` (its structure already checked),
        make the repairs ``check_resume`` found safe; return the checkpoint's reference graph."""
        if point.checkpoint is None:  # killed before the first checkpoint: start over
            graph = self._initial_graph()
            apply_repairs(self.run_dir, point, self._notice)
            return graph
        latest, state = point.checkpoint, point.state
        assert state is not None
        if self.policy.kind == "lm" and state.get(POLICY_FILES) != HF_FILES:
            raise ProasError(f"{latest / ckpt.STATE_FILE}: an lm checkpoint from before Hugging Face checkpoints "
                             "(its weights and Adam state in state.pt) cannot be resumed; start a new run from it "
                             f"with policy.lm.init_from={latest}")
        try:
            self.policy.load_checkpoint(latest, state)
            self.optimizer.load_state_dict(state["optimizer"])
            check_optimizer_state(self.optimizer, "optimizer")
            if self.scheduler is not None and "lr_scheduler" in state:
                self.scheduler.load_state_dict(state["lr_scheduler"])
            if self.critic is not None:
                self.critic.load_state_dict(state["critic"])
                self.critic_opt.load_state_dict(state["critic_optimizer"])
                check_optimizer_state(self.critic_opt, "critic_optimizer")
            if self.ref is not None and "reference" in state:
                self.ref.load_state_dict(state["reference"])
            self.rng.bit_generator.state = state["rng_numpy"]
            torch.set_rng_state(state["rng_torch"])
            random.setstate(state["rng_python"])
        except (KeyError, RuntimeError, TypeError, ValueError, AttributeError) as exc:
            first = printable(str(exc), newlines=False)[:200]
            raise ProasError(f"{latest / ckpt.STATE_FILE}: does not fit this run's policy, optimiser or critic "
                             f"({type(exc).__name__}: {first})") from None
        self.step = int(state["step"])
        self.best_sr = float(state["best_sr"])
        self._log(f"resuming from {escape(str(latest))} (step {self.step})")
        graph_file = latest / ckpt.GRAPH_FILE
        graph = ReferenceGraph.load(graph_file) if graph_file.exists() else ReferenceGraph()
        self.history = apply_repairs(self.run_dir, point, self._notice)
        return graph

    def _notice(self, msg: str) -> None:
        if self.console is not None:
            self.console.print(escape(msg), soft_wrap=True)  # one line, however narrow the terminal

    def _log(self, msg: str) -> None:
        if self.console is not None:
            self.console.print(msg)


def check_optimizer_state(optimizer: torch.optim.Optimizer, where: str) -> None:
    """Refuse (``ValueError``) an optimiser state that does not fit its parameters: a moment
    (Adam's ``exp_avg``, ``exp_avg_sq``, SGD's momentum) of another shape than its weight.
    ``load_state_dict`` checks only the number of parameters in each group, so such a state
    would load and fail in the first step, mid-run."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            for name, value in optimizer.state.get(p, {}).items():
                if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != p.shape:
                    raise ValueError(f"{where}: its {name} has shape {tuple(value.shape)}, its weight "
                                     f"{tuple(p.shape)}")


def weights_finite(params: Sequence[torch.Tensor]) -> bool:
    """Whether every weight is finite: one fused norm over all of them (``torch._foreach_norm``)
    and one sync; only when that norm is not finite (a NaN or an infinity, or finite weights
    whose squares overflow) are the weights looked at one by one, so huge but finite weights
    are not taken for infinite ones."""
    params = [p for p in params if p.numel()]
    if not params:
        return True
    norms = torch._foreach_norm([p.detach() for p in params])
    if bool(torch.isfinite(torch.stack([n.float() for n in norms]).sum())):
        return True
    return all(bool(torch.isfinite(p.detach()).all()) for p in params)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _credit_metrics(trajs: list[Trajectory], res) -> dict[str, float]:
    """Shares of unreasonable (Rea = 0) and non-advancing (PA = 0) steps, overall and in wins."""
    rea = np.asarray(res.rea, dtype=np.float64)
    pa = np.asarray(res.pa, dtype=np.float64)
    won = np.concatenate([np.full(len(t), t.success, dtype=bool) for t in trajs])
    errors = np.concatenate([[s.error for s in t.steps] for t in trajs]).astype(np.float64)
    out = {
        "train/unreasonable": float(1.0 - rea.mean()),
        "train/na": float(1.0 - pa.mean()),
        "train/error_rate": float(errors.mean()),
        "adv/mean": float(np.mean(res.advantage)),
        "adv/abs_mean": float(np.mean(np.abs(res.advantage))),
    }
    out["train/unreasonable_in_success"] = float(1.0 - rea[won].mean()) if won.any() else math.nan
    out["train/na_in_failure"] = float(1.0 - pa[~won].mean()) if (~won).any() else math.nan
    return {k: (v if math.isfinite(v) else None) for k, v in out.items()}  # type: ignore[misc]


def _pad(rows: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(like)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


# ----------------------------------------------------------------------------- validation
@dataclass
class ValResult:
    sr: float
    ts: float
    steps: float
    by_type: dict[str, tuple[int, int]] = field(default_factory=dict)  # type -> (won, total)
    #: share of the episodes' steps that the env rejected
    errors: float = 0.0
    #: mean entropy (nats) of the policy's own candidate distribution (temperature 1) over the
    #: states visited; None for a policy that does not report it (the lm)
    entropy: float | None = None

    def metrics(self, prefix: str = "val/") -> dict[str, float]:
        out = {f"{prefix}sr": self.sr, f"{prefix}ts": self.ts, f"{prefix}steps": self.steps}
        for t, (won, total) in sorted(self.by_type.items()):
            out[f"{prefix}sr/{t}"] = won / total if total else 0.0
        out[f"{prefix}errors"] = self.errors
        if self.entropy is not None:
            out[f"{prefix}entropy"] = self.entropy
        return out


def val_seed(seed: int, step: int) -> int:
    """The RNG seed of a run's validation at ``step`` (SFT: at ``epoch``): distinct per step and
    per run seed, so a later validation never replays an earlier one's samples."""
    return seed * 7919 + step


def validate(policy: Policy, envs: list[Env], task_ids: list[str], *, seed: int, temperature: float,
             max_steps: int, env_name: str, success_reward: float) -> ValResult:
    """One episode per validation task; SR overall and per task type, TS = mean score x 100."""
    rng = np.random.default_rng(seed)
    slots = [Slot(t, f"val-{i}", f"val-{i}") for i, t in enumerate(task_ids)]
    trajs, _ = rollout(envs, slots, policy, rng, temperature=temperature, max_steps=max_steps,
                       success_reward=success_reward, env_name=env_name)
    return val_result(trajs)


def val_result(trajs: Sequence[Trajectory]) -> ValResult:
    """SR overall and per task type, TS = mean score x 100, mean length, of finished episodes."""
    by_type: dict[str, list[int]] = {}
    for t in trajs:
        rec = by_type.setdefault(t.task_type or "unknown", [0, 0])
        rec[0] += int(t.success)
        rec[1] += 1
    n = max(1, len(trajs))
    steps = [s for t in trajs for s in t.steps]
    ents = [s.extra["policy"]["entropy"] for s in steps
            if isinstance(s.extra.get("policy"), dict) and "entropy" in s.extra["policy"]]
    return ValResult(
        sr=sum(t.success for t in trajs) / n,
        ts=100.0 * sum(float(t.extra.get("score", 0.0)) for t in trajs) / n,
        steps=sum(len(t) for t in trajs) / n,
        by_type={k: (v[0], v[1]) for k, v in by_type.items()},
        errors=sum(bool(s.error) for s in steps) / max(1, len(steps)),
        entropy=float(np.mean(ents)) if ents and len(ents) == len(steps) else None,
    )
