"""The trainer's one configuration system: structured OmegaConf configs with documented defaults.

Every knob of ``proas train`` lives in a dataclass below, next to its one-line doc and its one
default. The command line overrides it with dotted keys, the convention of verl and Hydra::

    proas train env=household algo.estimator=gigpo algo.shaping=proas seed=1 \\
        env.fixed_train_set.path=path/to/schedule_dir train.steps=50

``env=household`` is shorthand for ``env.name=household``, likewise ``policy=lm`` for
``policy.kind=lm``. Unknown keys, values of the wrong type and values outside their allowed set
or range (each numeric field declares its range beside its default: ``ranged``) are
``ProasError`` with one line naming the key. The resolved config is written to the run
directory as ``config.yaml``; ``--resume`` reads it back from there.

Defaults follow verl-agent's GRPO ALFWorld script (docs/training.md, "Settings against verl-agent's
scripts") where the ``lm`` policy is concerned (16 tasks x 8 per step, 150 steps, clip 0.2, dual
clip 3.0, invalid-action penalty 0.1, validation on 128 tasks every 10 steps); the ``scorer``
policy's width is ours, chosen so the household job learns on two CPU cores in minutes, and its
optimiser and rate, when unset, are the held-out study's choice for the env (``SCORER_TUNED``).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from proas.credit import ESTIMATORS as CREDIT_ESTIMATORS
from proas.credit import GROUP_STATS, REA_RULES
from proas.credit import SHAPINGS as CREDIT_SHAPINGS
from proas.credit.registry import ESTIMATOR_ALIASES, estimator_name, estimator_names, estimator_spec
from proas.envs.base import SUCCESS_REWARD
from proas.errors import ProasError
from proas.lm import options as lm_options
from proas.ranges import Range
from proas.termtext import printable
from proas.train.overrides import check_override
from proas.types import MAX_ABS_NUMBER

__all__ = [
    "AlgoConfig",
    "Config",
    "ESTIMATORS",
    "ESTIMATOR_ALIASES",
    "SHAPINGS",
    "build_config",
    "relocate_shipped_paths",
    "same_setting",
    "shipped_relative",
    "config_from_yaml",
    "config_to_yaml",
    "pin_tuned_defaults",
    "scorer_env",
]

#: base estimators of the trainer: the credit core's, each by its one name
#: (``proas.credit.registry.estimator_names``); ``gae`` = GAE over the critic's values, the
#: advantage PPO trains on
ESTIMATORS = estimator_names()
#: ``ESTIMATOR_ALIASES`` (``proas.credit.registry``): other names ``algo.estimator`` takes and
#: records under the one name (``ppo`` -> ``gae``; docs/credit.md, "Estimator names")
#: shaping variants of the credit core; ``proas`` is the method, the rest are its ablations
SHAPINGS = tuple(CREDIT_SHAPINGS)
LOSS_AGG = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
POLICIES = ("scorer", "lm")
SCORER_OPTIMIZERS = ("sgd", "adam", "adamw")
GRAPH_SOURCES = ("oracle", "load", "rollouts")
#: GiGPO's normalisation in verl-agent's scripts: mean_std_norm for ALFWorld, mean_norm for WebShop
GIGPO_MODE_BY_ENV = {"household": "mean_std_norm", "shop": "mean_norm"}
#: what the ``ppo`` critic sees (``algo.critic_features``; proas.train.critic)
CRITIC_FEATURES = ("state", "context")
#: ``algo.kl_coef`` of the ``lm`` policy when unset (verl-agent's ``kl_loss_coef`` with LLMs)
LM_KL_COEF = 0.01
#: the scorer's optimiser and rate when unset, per env: the held-out study's choice for the
#: default arm, GRPO+ProAS from random weights (results/heldout/tuning/selection.md, sections
#: "household grpo_proas" and "shop grpo_proas"; docs/training.md, "Tuned defaults"): the
#: optimiser it chose, and for each optimiser the rate its grid found best (adam, never tuned,
#: takes adamw's)
SCORER_TUNED: dict[str, tuple[str, dict[str, float]]] = {
    "household": ("adamw", {"sgd": 1.0, "adamw": 0.001}),
    "shop": ("sgd", {"sgd": 1.0, "adamw": 0.003}),
}
#: another env's (never tuned), and an lm run's, whose scorer section trains nothing: SGD at 1,
#: the trainer's default before the study
SCORER_UNTUNED: tuple[str, dict[str, float]] = ("sgd", {"sgd": 1.0, "adamw": 0.001})


def ranged(interval: str, default: Any = None, *, factory: Any = None) -> Any:
    """A numeric field: its default and the range its use needs (``proas.ranges.Range``, an
    interval such as ``"[0, 1)"`` or ``"[F32_TINY, F32]"``), kept in the field's metadata, where
    ``check_ranges`` reads it when a config is read. The ranges follow one rule (docs/training.md,
    "Numeric ranges"): a float that meets a float32 tensor stays within float32 (a positive one
    at or above its smallest normal value, which is not zero on the tensor); a reward within
    ``proas.types.MAX_ABS_NUMBER``; a size small enough to allocate; a count >= 1 (>= 0 where 0
    means "never" or "all"); a probability or fraction in [0, 1]; a temperature >= 0; a seed in
    numpy's [0, 2**32 - 1]. A None default (an optional field) is checked when set; a list's
    range holds for each of its items."""
    meta = {"range": Range.parse(interval)}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class FixedTrainSet:
    #: directory with ``schedule.jsonl`` + ``manifest.json`` (``proas.tasksets``); None samples
    #: the step's tasks online from the env's ``train`` split with the run's seed
    path: Optional[str] = None


@dataclass
class FixedValSet:
    #: validate on the fixed validation set (shipped ``fixed_val_set/<env>.jsonl`` unless ``path``)
    enabled: bool = True
    #: a validation ``.jsonl`` of ``proas.tasksets``; None = the one shipped for the env, or the
    #: first ``size`` ids of the env's ``valid`` split when none is shipped
    path: Optional[str] = None
    #: number of validation tasks (the paper's 128)
    size: int = ranged("[1, 2**20]", 128)


@dataclass
class EnvConfig:
    #: ``household``, ``shop``, or ``package.module:factory`` for your own env (a callable that
    #: takes the ``options`` dict as keyword arguments and returns a ``proas.envs.base.Env``)
    name: str = "household"
    #: tasks per RL step (verl-agent's ``data.train_batch_size``)
    tasks_per_step: int = ranged("[1, 2**16]", 16)
    #: trajectories per task, G (verl-agent's ``env.rollout.n``)
    group_size: int = ranged("[1, 2**16]", 8)
    #: episode step limit; None = the env's own (50 household, 15 shop)
    max_steps: Optional[int] = ranged("[1, 2**16]", None)
    #: cost of an invalid action, i.e. a response that cannot be parsed into an action (verl-agent's
    #: ``invalid_action_penalty_coef`` on ``is_action_valid``), subtracted from that step's final
    #: advantage. Actions the env rejects are ProAS's unreasonable steps instead (docs/training.md)
    invalid_action_penalty: float = ranged(f"[0, {MAX_ABS_NUMBER}]", 0.1)
    #: outcome reward of a won episode (verl-agent: 10 x won); by default the envs' own win reward,
    #: ``proas.envs.base.SUCCESS_REWARD``
    success_reward: float = ranged(f"(0, {MAX_ABS_NUMBER}]", SUCCESS_REWARD)
    #: keyword arguments for the env's constructor
    options: dict[str, Any] = field(default_factory=dict)
    fixed_train_set: FixedTrainSet = field(default_factory=FixedTrainSet)
    fixed_val_set: FixedValSet = field(default_factory=FixedValSet)


@dataclass
class ScorerConfig:
    #: width of the bilinear context-action interaction
    dim: int = ranged("[1, 4096]", 16)
    #: log2 of the hashed feature table size (household's vocabulary needs a few thousand rows)
    hash_bits: int = ranged("[4, 24]", 14)
    #: optimiser: sgd | adam | adamw; None = the held-out study's choice for the env
    #: (``SCORER_TUNED``: household adamw, shop sgd; another env, or policy=lm, sgd). Rates that
    #: suit one do not suit the other: at a high rate Adam's per-weight normalisation turns a
    #: single lucky group into full-size steps that collapse the policy (docs/training.md)
    optimizer: Optional[str] = None
    #: adamw's decoupled weight decay (verl-agent's actor: 0.01); unused by sgd and adam
    weight_decay: float = ranged("[0, F32]", 0.01)
    #: learning rate; None = the held-out study's best rate for the optimiser on the env
    #: (``SCORER_TUNED``: household adamw 0.001, sgd 1; shop sgd 1, adamw 0.003; adam takes
    #: adamw's; another env, or policy=lm: sgd 1, adamw 0.001)
    lr: Optional[float] = ranged("[F32_TINY, F32]", None)
    #: std of the initial weights (small: the untrained policy is close to uniform)
    init_std: float = ranged("[0, F32]", 0.01)
    #: observation/action pairs of history the scorer sees, as the lm prompt shows them
    #: (verl-agent's ``history_length``: 2); older steps are invisible to it
    history_length: int = ranged("[0, 1024]", 2)
    #: start from the scorer of this run or checkpoint directory (an SFT run: its best
    #: checkpoint) instead of random weights; hash_bits and dim must match it
    init_from: Optional[str] = None

    def resolved_optimizer(self, env_name: str | None) -> str:
        """``optimizer``, or the tuned one for ``env_name`` (None: no tuned setting applies, as in
        a run of another policy; ``scorer_env``)."""
        if self.optimizer is not None:
            return self.optimizer
        return SCORER_TUNED.get(env_name or "", SCORER_UNTUNED)[0]

    def resolved_lr(self, env_name: str | None) -> float:
        if self.lr is not None:
            return self.lr
        rates = SCORER_TUNED.get(env_name or "", SCORER_UNTUNED)[1]
        opt = self.resolved_optimizer(env_name)
        return rates["adamw" if opt == "adam" else opt]


@dataclass
class LMConfig:
    #: local directory of a Hugging Face causal LM (no downloads at run time)
    model_path: Optional[str] = None
    #: when no ``model_path``: a randomly initialised architecture, ``tiny`` (tests) or
    #: ``qwen2.5-1.5b`` / ``qwen2.5-7b`` (timing); needs ``tokenizer_path`` or builds a small
    #: BPE tokenizer locally
    model_config: Optional[str] = None
    #: tokenizer directory; None = ``model_path``
    tokenizer_path: Optional[str] = None
    #: AdamW learning rate (verl-agent: 1e-6); the peak rate when warming up or decaying
    lr: float = ranged("[F32_TINY, F32]", 1e-6)
    #: AdamW's decoupled weight decay (verl-agent's actor: 0.01), not applied to biases and
    #: normalisation weights (as the Hugging Face Trainer); the same optimiser for SFT and RL
    weight_decay: float = ranged("[0, F32]", 0.01)
    #: learning rate after the warmup: ``constant`` (verl-agent's actor), ``linear`` or
    #: ``cosine`` (to 0 at the last step; ``transformers.get_scheduler``). RL steps it once per
    #: RL step (verl's unit), SFT once per batch (TRL's)
    lr_schedule: str = "constant"
    #: share of the steps spent warming up linearly from 0 (verl-agent: 0, no warmup)
    warmup_ratio: float = ranged("[0, 1)", 0.0)
    #: LoRA rank; 0 trains every weight
    lora_rank: int = ranged("[0, 2**16]", 0)
    #: LoRA's scale numerator (the update is scaled by ``lora_alpha / lora_rank``); 0 would
    #: scale it away
    lora_alpha: int = ranged("[1, 2**16]", 32)
    #: start from this model instead of ``model_path``/``model_config``: a proas run or checkpoint
    #: directory of an lm policy (an SFT run: its best checkpoint, LoRA merged) or a Hugging Face
    #: model directory; the KL reference is this initial model
    init_from: Optional[str] = None
    #: dtype of the weights: ``auto`` = fp32 master weights (at lr 1e-6 Adam's updates are below
    #: bf16's resolution and round away), except a LoRA model's frozen base, bf16 on a GPU; or
    #: ``bf16`` / ``fp16`` / ``fp32`` for every weight (pure bf16 is not advised for training)
    dtype: str = "auto"
    #: compute dtype of the forward passes (``torch.autocast`` over the fp32 weights, as TRL and
    #: verl's FSDP mixed precision): ``auto`` = bf16 on a GPU, none on a CPU; ``bf16``; ``none``.
    #: Generate mode then decodes on a bf16 copy of the weights, refreshed after each update
    #: (verl's rollout weights); score mode acts on the model itself under autocast
    autocast: str = "auto"
    #: recompute each layer's activations in the backward pass instead of keeping them
    #: (``gradient_checkpointing_enable``, non-reentrant): less memory, about a third more compute
    gradient_checkpointing: bool = False
    #: attention implementation (``from_pretrained``'s ``attn_implementation``); None = the
    #: library's default (sdpa). Only ``eager`` and ``sdpa`` take the 4D masks of packed score
    #: passes and the static decoder; another (``flash_attention_2``) is refused in score mode
    #: with a packed loss, and ``decode=static`` falls back to ``hf`` with it
    attn_implementation: Optional[str] = None
    #: hold PyTorch's sdpa to one kernel on a GPU: ``efficient`` (default), ``math`` or ``cudnn``
    #: (flash takes no mask, and every score pass and padded batch passes one), with fallbacks for
    #: the calls that kernel cannot take (``lm_options.SDPA_SWITCHES``); null = PyTorch's
    #: choice per call, which is cuDNN's kernel on an H100 with PyTorch 2.11: 2.2x slower for a
    #: shop RL step, and NaN gradients at lengths of 64 more than a multiple of 128 with a padded
    #: row (docs/lm.md). Process-wide (``torch.backends.cuda``'s switches); ignored on a CPU
    sdpa_kernel: Optional[str] = "efficient"
    #: ``auto`` = cuda when present, else cpu; or ``cpu``, ``cuda``, ``cuda:N`` (a GPU this
    #: machine lacks, or any other name, is refused in one line)
    device: str = "auto"
    #: response budget per step (verl-agent: 512)
    max_new_tokens: int = ranged("[1, 2**20]", 512)
    #: prompt budget (verl-agent: 2048 household, 4096 shop); longer prompts lose the oldest
    #: history, then the middle of the observation, never the task or instructions
    max_prompt_tokens: int = ranged("[1, 2**20]", 2048)
    #: observation/action pairs of history in the prompt (verl-agent: 2)
    history_length: int = ranged("[0, 1024]", 2)
    #: sequences per forward pass in the loss (score mode: decisions per pass, acting too)
    micro_batch_size: int = ranged("[1, 2**16]", 8)
    #: score mode: at most this many tokens per forward pass, on top of ``micro_batch_size``
    #: (``expand``: candidates x the widest prompt plus candidate, the cached tokens, as the
    #: prompt's KV cache is copied for every candidate; ``packed``: see ``score_impl``); memory
    #: follows this product (a pass keeps at least one decision)
    score_tokens_per_pass: int = ranged("[1, INT32]", 262144)
    #: score mode's forward passes: ``expand`` (encode each prompt, copy its KV cache once per
    #: candidate, score the candidates on the copies), ``packed`` (one sequence per decision:
    #: the prompt, then every candidate, under a 4D mask that lets each candidate see the
    #: prompt and itself only) or ``auto``: ``packed`` for the loss, and for acting on a CPU;
    #: ``expand`` for acting on a GPU. The same log-probs up to float rounding; ``packed`` was
    #: faster on CPU at both and on an H200 at the loss only (``benchmarks/lm_score.py``). For
    #: ``packed`` ``score_tokens_per_pass`` counts decisions x (longest prompt plus all its
    #: candidates). ``shared``: encode each prompt once, then score all its candidates in one
    #: row on that one cache (no copy per candidate); counted as ``packed``
    score_impl: str = "auto"
    #: score mode: a candidate's score from its response tokens' log-probs: ``sum`` (the
    #: log-likelihood of the response) or ``mean`` (per token, over the candidate's own tokens,
    #: GLAM's normalised variant: long candidates are not penalised for their length)
    score_norm: str = "sum"
    #: ``generate`` (write a response, parse the action) or ``score`` (choose among the env's
    #: candidate actions by the likelihood of each one's response, GLAM; needs admissible actions)
    mode: str = "generate"
    #: generate mode's decoder: ``hf`` (``model.generate``) or ``static`` (preallocated KV cache
    #: sized ``max_prompt_tokens + max_new_tokens``; on CUDA the one-token step is a CUDA graph
    #: per power-of-two batch bucket; eager on CPU); same outputs, faster rollouts on a GPU
    decode: str = "hf"


@dataclass
class PolicyConfig:
    #: ``scorer`` (fast CPU policy over candidate actions) or ``lm`` (Hugging Face causal LM)
    kind: str = "scorer"
    #: sampling temperature during training rollouts
    temperature: float = ranged("[F32_TINY, F32]", 1.0)
    #: sampling temperature during validation (verl-agent: 0.4, sampled)
    val_temperature: float = ranged("[0, F32]", 0.4)
    scorer: ScorerConfig = field(default_factory=ScorerConfig)
    lm: LMConfig = field(default_factory=LMConfig)


@dataclass
class GraphConfig:
    #: where the Agentic Reference Graph comes from: ``oracle`` (the env's oracle replayed on the
    #: training tasks, the paper's default), ``load`` (a saved graph at ``path``: ``distill``),
    #: ``rollouts`` (empty; grows from the run's own successes)
    source: str = "oracle"
    #: a graph file written by ``ReferenceGraph.save`` (for ``source=load``)
    path: Optional[str] = None
    #: merge each step's successful trajectories (False = the paper's ``static`` ablation)
    evolve: bool = True
    #: fraction of state-action edges removed before training (the ``incomplete`` ablation: 0.4)
    prune: float = ranged("[0, 1)", 0.0)
    #: at most this many training tasks are replayed by the oracle to build the graph (0 = all)
    oracle_tasks: int = ranged("[0, INT32]", 0)
    #: reasonableness rule: ``transition`` ((s_t, s_t+1) is an ARG edge; the paper's "invalid
    #: state transition"), ``state_action`` ((s_t, a_t) labels an ARG edge) or ``node``
    #: (s_t+1 is an ARG node; the first version's rule)
    rea: str = "transition"


@dataclass
class AlgoConfig:
    #: base estimator: grpo | dapo | gigpo | rloo | reinforce_pp | migpo (milestones from the ARG;
    #: uses gamma, step_weight, gigpo_mode) | gae (PPO: critic + GAE; ``ppo`` is taken for it and
    #: recorded as ``gae``)
    estimator: str = "grpo"
    #: none | proas | no_mui | no_apr | mask_pm | suffix | random | progress_reward
    shaping: str = "proas"
    #: GRPO/DAPO: divide by the group std (False = Dr.GRPO, mean only)
    norm_by_std: bool = True
    #: discount for GiGPO step returns and GAE (verl-agent: 0.95 GiGPO; 1.0 PPO)
    gamma: float = ranged("(0, 1]", 0.95)
    #: GAE lambda for ``ppo``. verl's default and verl-agent's PPO scripts use 1.0 (Monte Carlo
    #: returns minus V); 0.95 (PPO's paper) credits an action by the change in V it brings, so the
    #: critic, not the whole episode's outcome, carries the signal (docs/credit.md, "GAE and its
    #: critic")
    lam: float = ranged("[0, 1]", 0.95)
    #: GiGPO / MiGPO normalisation: mean_norm | mean_std_norm; None = verl-agent's script for
    #: the env (household: mean_std_norm, as its ALFWorld script; shop and others: mean_norm)
    gigpo_mode: Optional[str] = None
    #: group mean/std of GRPO, DAPO and GiGPO's / MiGPO's episode level: over the group's step
    #: rows (``steps``, verl-agent's ``compute_mean_std_cross_steps=True``) or one sample per
    #: trajectory (``trajectories``)
    group_stats: str = "steps"
    #: GiGPO weight of the anchor-state term
    step_weight: float = ranged(f"[0, {MAX_ABS_NUMBER}]", 1.0)
    #: PPO clip below 1 (ratio >= 1 - clip_low)
    clip_low: float = ranged("[0, 1]", 0.2)
    #: PPO clip above 1; None = 0.28 for dapo (clip-higher), else 0.2
    clip_high: Optional[float] = ranged("[0, F32]", None)
    #: dual clip for negative advantages (verl's clip_ratio_c)
    dual_clip: float = ranged("(1, F32]", 3.0)
    #: token-mean | seq-mean-token-mean | seq-mean-token-sum
    loss_agg: str = "token-mean"
    #: low-variance KL (k3) to the frozen initial policy; 0 = off; None = 0.01 for the ``lm``
    #: policy (verl-agent's LLM scripts; it anchors RL to the SFT or pretrained start) and 0 for
    #: the ``scorer``, which starts near uniform, where a KL anchor only slows learning
    kl_coef: Optional[float] = ranged("[0, F32]", None)
    #: entropy bonus (verl: 0.001)
    entropy_coef: float = ranged("[0, F32]", 0.001)
    #: passes over the batch per step
    ppo_epochs: int = ranged("[1, INT32]", 1)
    #: steps per optimiser update (verl-agent's ppo_mini_batch_size counts step rows: 256)
    minibatch_size: int = ranged("[1, INT32]", 256)
    #: gradient-norm clip
    max_grad_norm: float = ranged("[F32_TINY, F32]", 1.0)
    #: DAPO dynamic sampling: drop groups whose outcome rewards are all equal and roll out more
    #: tasks, up to ``max_gen_batches`` rollouts; None = on for dapo only
    dynamic_sampling: Optional[bool] = None
    max_gen_batches: int = ranged("[1, INT32]", 10)
    #: learning rate of the critic (``ppo`` only; a hashed-feature value model, Adam)
    critic_lr: float = ranged("[F32_TINY, F32]", 0.01)
    #: what the critic sees (``ppo`` only): ``state`` (the scorer's context features plus the
    #: env's abstract state and that state crossed with the step count) or ``context`` (the
    #: context features alone, which cannot fit a state's value); proas.train.critic
    critic_features: str = "state"
    graph: GraphConfig = field(default_factory=GraphConfig)

    def resolved_clip_high(self) -> float:
        if self.clip_high is not None:
            return self.clip_high
        return 0.28 if self.estimator == "dapo" else 0.2

    def resolved_kl_coef(self, policy_kind: str) -> float:
        if self.kl_coef is not None:
            return self.kl_coef
        return LM_KL_COEF if policy_kind == "lm" else 0.0

    def resolved_gigpo_mode(self, env_name: str) -> str:
        if self.gigpo_mode is not None:
            return self.gigpo_mode
        return GIGPO_MODE_BY_ENV.get(env_name, "mean_norm")

    def estimator_options(self, env_name: str) -> dict[str, Any]:
        """The options this config gives the credit estimator: of the settings below (option
        name -> field), those the estimator takes (``proas.credit.ESTIMATORS``); the rest keep
        the estimator's own defaults. The per-batch ``step_penalty`` is the trainer's."""
        settings = {
            "norm_by_std": self.norm_by_std,
            "gamma": self.gamma,
            "lam": self.lam,
            "step_weight": self.step_weight,
            "mode": self.resolved_gigpo_mode(env_name),
            "group_stats": self.group_stats,
        }
        spec = estimator_spec(self.estimator)
        return {key: value for key, value in settings.items() if spec.takes(key)}

    def resolved_dynamic_sampling(self) -> bool:
        if self.dynamic_sampling is not None:
            return self.dynamic_sampling
        return self.estimator == "dapo"


@dataclass
class TrainConfig:
    #: RL steps
    steps: int = ranged("[1, INT32]", 150)
    #: validate every N steps (and after the last); 0 = never
    val_every: int = ranged("[0, INT32]", 10)
    #: validate the untrained policy before step 0
    val_before_train: bool = True
    #: after the last step, validate the final policy again at each of these temperatures
    #: (0 = greedy), on the same tasks with the same sampling seed; recorded as
    #: ``val_t<T>/sr``, ``val_t<T>/errors``, ``val_t<T>/entropy`` (docs/study-protocol.md)
    final_val_temperatures: list[float] = ranged("[0, F32]", factory=list)
    #: write a resumable checkpoint every N steps (and after the last)
    save_every: int = ranged("[0, INT32]", 10)
    #: parent directory of run directories
    out_dir: str = "runs"
    #: run directory name; None = ``<env>-<policy>-<estimator>-<shaping>-s<seed>-<time>``
    run_name: Optional[str] = None
    #: torch CPU threads. 1 is fastest for the scorer: its ops are small, and a second OpenMP
    #: thread spin-waits (50x slower per call measured on a busy 2-core machine); raise it for
    #: the lm policy on CPU
    threads: int = ranged("[1, 1024]", 1)
    #: show a rich progress bar (off when stdout is not a terminal)
    progress: bool = True
    #: write the step's rollouts with their per-step credit to ``rollouts/step_N.jsonl.gz`` every
    #: N steps (and at the last) for ``proas inspect`` and ``proas probe stats``; about 90 KiB a
    #: step on household; 0 = never
    rollout_log_every: int = ranged("[0, INT32]", 10)


@dataclass
class Config:
    #: seeds task sampling, weights, action sampling, graph pruning
    seed: int = ranged("[0, SEED]", 0)
    env: EnvConfig = field(default_factory=EnvConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


#: ``key=value`` shorthands: the group name alone sets its main field
_SHORTHANDS = {"env": "env.name", "policy": "policy.kind", "estimator": "algo.estimator",
               "shaping": "algo.shaping"}


#: the largest scorer table (``policy.scorer.dim`` x ``2**policy.scorer.hash_bits`` weights;
#: the scorer keeps two, 4 GiB each at this size): a product that still fits in memory
MAX_SCORER_TABLE = 2**30
#: the most episodes a step may roll out (``env.tasks_per_step`` x ``env.group_size``), each an
#: env game held in memory
MAX_EPISODES_PER_STEP = 2**20


def field_ranges(cls: type | None = None, prefix: str = "") -> dict[str, Range]:
    """Every numeric config key (dotted, in config order) and its declared range: the table
    ``check_ranges`` applies, read from the fields' metadata (``ranged``)."""
    import dataclasses

    cls = Config if cls is None else cls
    out: dict[str, Range] = {}
    for f in dataclasses.fields(cls):
        if "range" in f.metadata:
            out[prefix + f.name] = f.metadata["range"]
        elif dataclasses.is_dataclass(f.default_factory if f.default_factory is not dataclasses.MISSING else None):
            out.update(field_ranges(f.default_factory, f"{prefix}{f.name}."))
    return out


def check_ranges(obj: Any, prefix: str = "") -> None:
    """Every number of the config lies in its field's declared range (``ranged``): one line
    naming the key, the value and the range otherwise. Unchecked, a NaN rate or an infinite
    penalty would train to the end and exit 0, a rate of 1e300 is inf on the float32 weights, a
    negative count is read as Python reads a negative index (``oracle_tasks=-5``: all but five
    tasks) and a width of 10**9 cannot be allocated. A number in a field with no declared range
    (none: tests/test_input_ranges.py checks that every numeric field declares one) must at
    least be finite."""
    import dataclasses

    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = prefix + f.name
        if dataclasses.is_dataclass(value):
            check_ranges(value, key + ".")
            continue
        rng = f.metadata.get("range")
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, bool) or not isinstance(v, (int, float)):  # None: an optional key left unset
                continue
            if rng is not None and v not in rng:
                raise ProasError(f"config: {key} holds {v!r}, outside {rng}" if isinstance(value, list)
                                 else f"config: {rng.problem(key, v)}")
            if rng is None and isinstance(v, float) and not math.isfinite(v):
                raise ProasError(f"config: {key}={v!r} must be a finite number")


def _validate(cfg: Config) -> None:
    check_ranges(cfg)
    scorer = cfg.policy.scorer
    if scorer.dim << scorer.hash_bits > MAX_SCORER_TABLE:
        raise ProasError(f"config: policy.scorer.dim={scorer.dim} x 2**policy.scorer.hash_bits={scorer.hash_bits} is "
                         f"{scorer.dim << scorer.hash_bits} weights a table; at most 2**30")
    episodes = cfg.env.tasks_per_step * cfg.env.group_size
    if episodes > MAX_EPISODES_PER_STEP:
        raise ProasError(f"config: env.tasks_per_step={cfg.env.tasks_per_step} x env.group_size={cfg.env.group_size} "
                         f"is {episodes} episodes a step; at most 2**20")

    def choice(key: str, value: Any, allowed: tuple) -> None:
        if value not in allowed:
            raise ProasError(f"config: {key}={value!r} is not one of {', '.join(allowed)}")

    choice("policy.kind", cfg.policy.kind, POLICIES)
    choice("algo.estimator", cfg.algo.estimator, ESTIMATORS)
    choice("algo.shaping", cfg.algo.shaping, SHAPINGS)
    choice("algo.loss_agg", cfg.algo.loss_agg, LOSS_AGG)
    if cfg.policy.scorer.optimizer is not None:
        choice("policy.scorer.optimizer", cfg.policy.scorer.optimizer, SCORER_OPTIMIZERS)
    choice("policy.lm.mode", cfg.policy.lm.mode, lm_options.MODES)
    choice("policy.lm.decode", cfg.policy.lm.decode, lm_options.DECODERS)
    choice("policy.lm.score_impl", cfg.policy.lm.score_impl, lm_options.SCORE_IMPLS)
    choice("policy.lm.score_norm", cfg.policy.lm.score_norm, lm_options.SCORE_NORMS)
    choice("policy.lm.autocast", cfg.policy.lm.autocast, lm_options.AUTOCAST)
    choice("policy.lm.lr_schedule", cfg.policy.lm.lr_schedule, lm_options.LR_SCHEDULES)
    if cfg.algo.gigpo_mode is not None:
        choice("algo.gigpo_mode", cfg.algo.gigpo_mode, CREDIT_ESTIMATORS["gigpo"].options["mode"].choices)
    choice("algo.group_stats", cfg.algo.group_stats, GROUP_STATS)
    choice("algo.graph.rea", cfg.algo.graph.rea, REA_RULES)
    choice("algo.critic_features", cfg.algo.critic_features, CRITIC_FEATURES)
    choice("algo.graph.source", cfg.algo.graph.source, GRAPH_SOURCES)
    if cfg.algo.graph.source == "load" and not cfg.algo.graph.path:
        raise ProasError("config: algo.graph.source=load needs algo.graph.path=<graph file>")
    if not cfg.env.name:
        raise ProasError("config: env.name must not be empty")
    lm = cfg.policy.lm
    if cfg.policy.kind == "lm" and not (lm.model_path or lm.model_config or lm.init_from):
        raise ProasError(
            "config: policy=lm needs policy.lm.model_path=<local dir>, "
            "policy.lm.model_config=tiny|qwen2.5-1.5b|qwen2.5-7b or policy.lm.init_from=<run or model dir>"
        )
    if lm.init_from and (lm.model_path or lm.model_config):
        raise ProasError("config: policy.lm.init_from replaces policy.lm.model_path / model_config; set only one")
    problem = lm_options.attn_problem(lm.attn_implementation, lm.mode, lm.score_impl, lm.gradient_checkpointing)
    if problem:
        raise ProasError(f"config: {problem}")
    if lm.sdpa_kernel is not None and lm.sdpa_kernel not in lm_options.SDPA_KERNELS:
        raise ProasError(f"config: policy.lm.sdpa_kernel={lm.sdpa_kernel!r} is not one of "
                         f"{', '.join(lm_options.SDPA_KERNELS)} (or null: PyTorch's choice)")


def _to_config(merged: DictConfig) -> Config:
    obj = OmegaConf.to_object(merged)
    assert isinstance(obj, Config)
    obj.algo.estimator = estimator_name(obj.algo.estimator)  # one name: ppo is recorded as gae
    _validate(obj)
    return obj


def build_config(overrides: list[str] | None = None, base: Config | None = None) -> Config:
    """The default config (or ``base``) with dotted ``key=value`` overrides applied and checked.

    Raises ``ProasError`` on an unknown key, a malformed override (a value that is more than a
    plain value: YAML tags, anchors, aliases, interpolations, control characters; see
    ``proas.train.overrides``), a value of the wrong type or a value outside its allowed set.
    """
    schema = OmegaConf.structured(base if base is not None else Config())
    dotlist = []
    for item in overrides or []:
        if "=" not in item:
            raise ProasError(f"config: override {item!r} must look like key=value")
        key, value = item.split("=", 1)
        check_override(key, value)  # a plain value: no YAML tags, anchors, interpolations, controls
        key = key.strip().lstrip("+")
        if not key:
            raise ProasError(f"config: override {item!r} has an empty key")
        dotlist.append(f"{_SHORTHANDS.get(key, key)}={value}")
    try:
        merged = OmegaConf.merge(schema, OmegaConf.from_dotlist(dotlist))
    except OmegaConfBaseException as exc:
        raise ProasError(f"config: {_one_line(exc)}") from None
    except (TypeError, ValueError) as exc:  # a mapping given for a list, and the like
        raise ProasError(f"config: overrides {printable(' '.join(dotlist), newlines=False)}: "
                         f"{_one_line(exc)}") from None
    except (IndexError, KeyError):  # a key omegaconf's dotlist parser cannot split (``[``)
        raise ProasError(f"config: overrides {printable(' '.join(dotlist), newlines=False)}: a key is not a "
                         f"dotted config path such as train.steps") from None
    return _to_config(merged)


def config_to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


#: what a key left unset (``null``) means when no value can be resolved for it: the run then
#: goes without it, or takes it from elsewhere (``unset_resolved``; every nullable key has one)
NULL_MEANS: dict[str, str] = {
    "env.max_steps": "the env's own step limit (household 50, shop 15)",
    "env.fixed_train_set.path": "no schedule: each step's tasks are drawn from the env's train split with the "
                                "run's seed",
    "env.fixed_val_set.path": "the validation set shipped for the env (proas/data/fixed_val_set/<env>.jsonl), else "
                              "the first env.fixed_val_set.size ids of the env's valid split",
    "policy.scorer.init_from": "no warm start: random weights (policy.scorer.init_std)",
    "policy.lm.model_path": "no local model directory: policy.lm.model_config or policy.lm.init_from names the "
                            "model (policy=lm needs one of the three)",
    "policy.lm.model_config": "no built-in architecture: the model comes from policy.lm.model_path or "
                              "policy.lm.init_from",
    "policy.lm.tokenizer_path": "the model's own tokenizer (policy.lm.model_path or init_from; a model_config "
                                "model builds a small BPE tokenizer)",
    "policy.lm.init_from": "no warm start: the model of policy.lm.model_path or policy.lm.model_config",
    "policy.lm.attn_implementation": "the library's default attention (sdpa)",
    "algo.graph.path": "no saved graph (only algo.graph.source=load reads one)",
}


def _null_keys(obj: Any, prefix: str = "") -> list[str]:
    """The dotted keys of ``obj`` (a config dataclass) whose value is None, in config order."""
    import dataclasses

    out = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out += _null_keys(value, f"{prefix}{f.name}.")
        elif value is None:
            out.append(prefix + f.name)
    return out


def unset_resolved(cfg: Config) -> dict[str, Any]:
    """What every key left unset (``null``) in ``cfg`` means, in config order: the value it
    resolves to for the run's estimator, env and policy, or what the run does without it
    (``NULL_MEANS``)."""
    a, s = cfg.algo, cfg.policy.scorer
    resolved: dict[str, Any] = {
        "policy.scorer.optimizer": lambda: s.resolved_optimizer(scorer_env(cfg)),
        "policy.scorer.lr": lambda: s.resolved_lr(scorer_env(cfg)),
        "algo.clip_high": a.resolved_clip_high,
        "algo.kl_coef": lambda: a.resolved_kl_coef(cfg.policy.kind),
        "algo.dynamic_sampling": a.resolved_dynamic_sampling,
        "algo.gigpo_mode": lambda: a.resolved_gigpo_mode(cfg.env.name),
        "train.run_name": lambda: (f"{cfg.env.name.replace(':', '_')}-{cfg.policy.kind}-{a.estimator}-{a.shaping}"
                                   f"-s{cfg.seed}-<utc time>"),
    }
    out: dict[str, Any] = {}
    for key in _null_keys(cfg):
        if key in resolved:
            out[key] = resolved[key]()
        else:
            out[key] = NULL_MEANS.get(key, "unset")
    return out


def scorer_env(cfg: Config) -> str | None:
    """The env whose tuned setting the scorer's unset optimiser and rate take: the run's env for
    the scorer policy; None (the untuned setting) for another policy, which trains no scorer."""
    return cfg.env.name if cfg.policy.kind == "scorer" else None


def pin_tuned_defaults(cfg: Config) -> Config:
    """A copy of ``cfg`` with the scorer's optimiser and rate set to what they resolve to for its
    env. A run records its config so: the per-env defaults may be tuned again, and a run must
    resume with the setting it started with (docs/training.md, "Tuned defaults")."""
    out = copy.deepcopy(cfg)
    s, env = out.policy.scorer, scorer_env(out)
    s.optimizer, s.lr = s.resolved_optimizer(env), s.resolved_lr(env)
    return out


def config_from_yaml(text: str, where: str = "config.yaml") -> Config:
    """Parse a resolved config written by ``config_to_yaml`` (checked like overrides).

    A resolved config holds values only: an interpolation (``${oc.env:HOME}``, ``${train.seed}``)
    would read the environment or another key when loaded, so one is refused (one line)."""
    try:
        loaded = OmegaConf.create(text)
        found = _first_interpolation(OmegaConf.to_container(loaded, resolve=False))
        if found is not None:
            raise ProasError(f"{where}: {found} holds an interpolation ('${{...}}'); a run's config holds values "
                             "only")
        merged = OmegaConf.merge(OmegaConf.structured(Config()), loaded)
    except (OmegaConfBaseException, ValueError) as exc:
        raise ProasError(f"{where}: {_one_line(exc)}") from None
    except ProasError:
        raise
    except Exception as exc:  # yaml.YAMLError and friends
        raise ProasError(f"{where}: not a valid config ({type(exc).__name__})") from None
    return _to_config(merged)


def _first_interpolation(value: Any, key: str = "") -> str | None:
    """The dotted key of the first string of a raw config that holds ``${``, or None."""
    if isinstance(value, str):
        return (key or "the config") if "${" in value else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        found = _first_interpolation(v, f"{key}.{k}" if key else str(k))
        if found is not None:
            return found
    return None


#: config fields that may name a task set shipped inside the package
_SHIPPED_PATH_FIELDS = (("env", "fixed_train_set"), ("env", "fixed_val_set"))


def shipped_relative(path: str | None) -> str | None:
    """The part of ``path`` below a ``proas/data`` folder, or None when it points elsewhere.

    A run directory records absolute paths; this lets a run made from one checkout (another
    machine, a copy of the source) be recognised, compared and resumed from another.
    """
    if not path:
        return None
    parts = Path(path).parts
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "proas" and parts[i + 1] == "data":
            return "/".join(parts[i + 2:])
    return None


def _shipped_paths(cfg: Config):
    """``(section, part below proas/data)`` of each path field of ``cfg`` that names shipped data."""
    for group, name in _SHIPPED_PATH_FIELDS:
        section = getattr(getattr(cfg, group), name)
        rel = shipped_relative(section.path)
        if rel is not None:
            yield section, rel


def relocate_shipped_paths(cfg: Config) -> Config:
    """A copy of ``cfg`` whose paths into another checkout's shipped data point to this one's
    (only where the file is missing there and present here)."""
    from proas.tasksets import default_root

    out = copy.deepcopy(cfg)
    for section, rel in _shipped_paths(out):
        if not Path(section.path).exists() and (default_root() / rel).exists():
            section.path = str(default_root() / rel)
    return out


def same_setting(a: Config, b: Config) -> bool:
    """Whether two configs describe the same run, apart from the step budget, the progress bar
    and where the shipped task sets lie."""
    a, b = pin_tuned_defaults(a), pin_tuned_defaults(b)  # an unset key is what it resolves to
    for c in (a, b):
        c.train.steps, c.train.progress = 0, False
        for section, rel in _shipped_paths(c):
            section.path = "{data}/" + rel
    return a == b


def _one_line(exc: Exception) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    # OmegaConf appends "full_key: ..., object_type=..." lines; keep the message and the key
    msg = lines[0] if lines else type(exc).__name__
    for ln in lines[1:]:
        if ln.startswith("full_key:"):
            msg += f" ({ln})"
    return msg
