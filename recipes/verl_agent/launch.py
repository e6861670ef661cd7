#!/usr/bin/env python3
"""Launch one row of the paper's tables on verl-agent with the ProAS recipe.

    python recipes/verl_agent/launch.py ROW --env household --size 1.5b --seed 0 [--dry-run]
    python recipes/verl_agent/launch.py --list

ROW is a row of the main table (grpo, grpo_proas, dapo, dapo_proas, gigpo, gigpo_proas, ppo,
ppo_proas, migpo, sft), of the shaping ablation (progress_reward, no_mui, no_apr, mask_pm,
suffix) or of the ARG ablation (arg_random, arg_static, arg_incomplete, arg_incomplete_static,
arg_teacher, arg_distill). The command runs in a verl-agent checkout patched with
verl-agent.patch (``--verl-agent DIR`` or ``$VERL_AGENT_DIR``); ``--dry-run`` prints the
commands and the resolved ``proas:`` config and runs nothing (no GPU, no verl needed).
Arguments after ``--`` are appended to the trainer's Hydra overrides.

The settings are verl-agent's own example scripts' (examples/*_trainer/run_alfworld.sh,
run_webshop.sh at the pinned commit): 16 tasks x 8 rollouts a batch (PPO: 128 x 1), 150
epochs, lr 1e-6, KL loss 0.01, invalid-action penalty 0.1, GiGPO gamma 0.95 with
mean_std_norm on household and mean_norm on shop, DAPO clip 0.2/0.28 with filter_groups.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROAS_YAML = HERE / "proas.yaml"


@dataclass(frozen=True)
class Row:
    table: str
    label: str
    algo: str  # verl-agent base: grpo | dapo | gigpo | ppo | sft
    proas: dict = field(default_factory=dict)  # proas.* overrides; empty: ProAS off
    graph: str | None = None  # initial ARG variant built before training: oracle | incomplete | distill
    note: str = ""


ROWS: dict[str, Row] = {
    # main table
    "grpo": Row("main", "GRPO", "grpo"),
    "grpo_proas": Row("main", "GRPO+ProAS", "grpo", {"shaping": "proas"}, "oracle"),
    "dapo": Row("main", "DAPO", "dapo"),
    "dapo_proas": Row("main", "DAPO+ProAS", "dapo", {"estimator": "dapo", "shaping": "proas"}, "oracle"),
    "gigpo": Row("main", "GiGPO", "gigpo"),
    "gigpo_proas": Row("main", "GiGPO+ProAS", "gigpo", {"shaping": "proas"}, "oracle"),
    "ppo": Row("main", "PPO", "ppo"),
    "ppo_proas": Row(
        "main", "PPO+ProAS", "ppo", note="the same run as ppo: GAE credits no step uniformly, so ProAS "
        "changes none of its advantages (the hook refuses GAE for that reason); report ppo's numbers"),
    "migpo": Row("main", "MiGPO", "grpo", {"estimator": "migpo", "shaping": "none"}, "oracle",
                 note="milestones read off the oracle ARG; verl-agent runs its GRPO rollout path"),
    "sft": Row("main", "SFT", "sft", note="verl's FSDP SFT trainer on the oracle's walkthroughs of the training tasks"),
    # (a) shaping ablation, GRPO base
    "progress_reward": Row("shaping", "GRPO + ProgressReward", "grpo", {"shaping": "progress_reward"}, "oracle"),
    "no_mui": Row("shaping", "GRPO + ProAS- (no MUI)", "grpo", {"shaping": "no_mui"}, "oracle"),
    "no_apr": Row("shaping", "GRPO + ProAS+ (no APR)", "grpo", {"shaping": "no_apr"}, "oracle"),
    "mask_pm": Row("shaping", "GRPO + ProAS msk±", "grpo", {"shaping": "mask_pm"}, "oracle"),
    "suffix": Row("shaping", "GRPO + ProAS suffix", "grpo", {"shaping": "suffix"}, "oracle"),
    # (b) ARG ablation, GRPO + ProAS
    "arg_random": Row("arg", "Random", "grpo", {"shaping": "random"}, "oracle"),
    "arg_static": Row("arg", "Static", "grpo", {"shaping": "proas", "evolve": False}, "oracle"),
    "arg_incomplete": Row("arg", "Incomplete", "grpo", {"shaping": "proas"}, "incomplete"),
    "arg_incomplete_static": Row("arg", "Incomplete & Static", "grpo", {"shaping": "proas", "evolve": False},
                                 "incomplete"),
    "arg_teacher": Row("arg", "ARG teacher (GiGPO; graph grown from its own successes)", "gigpo",
                       {"shaping": "none"},
                       note="GiGPO unchanged (shaping none); ProAS only grows the graph and saves it with "
                            "each checkpoint, for arg_distill"),
    "arg_distill": Row("arg", "Distill", "grpo", {"shaping": "proas"}, "distill"),
}

SIZES = {
    # model, GPUs, tensor parallel (verl-agent's scripts: 1.5B on 2 GPUs, TP 2)
    "1.5b": ("Qwen/Qwen2.5-1.5B-Instruct", 2, 2),
    "7b": ("Qwen/Qwen2.5-7B-Instruct", 4, 2),
}

ENVS = {
    # verl-agent env name, max steps, GiGPO mode, prompt length, mini batch, micro batch (PPO's
    # actor and critic: their own), log-prob micro batch: its ALFWorld and WebShop scripts
    "household": dict(env_name="proas/household", max_steps=50, mode="mean_std_norm", prompt=2048,
                      mini=256, micro=32, ppo_micro=16, critic_micro=16, logprob=32),
    "shop": dict(env_name="proas/shop", max_steps=15, mode="mean_norm", prompt=4096, mini=64, micro=8,
                 ppo_micro=8, critic_micro=4, logprob=16),
}

TASKS, GROUP, VAL_TASKS, EPOCHS = 16, 8, 128, 150


def run_dir(out: Path, env: str, row: str, size: str, seed: int) -> Path:
    return out / env / row / size / f"seed{seed}"


def graph_path(out: Path, env: str, row: Row, row_id: str, size: str, seed: int) -> Path | None:
    if row.graph is None:
        return None
    if row.graph == "oracle":
        return out / env / "graphs" / "oracle.json.gz"
    if row.graph == "incomplete":
        # the pruning is seeded, so each seed has its own incomplete graph
        return out / env / "graphs" / f"incomplete_seed{seed}.json.gz"
    return run_dir(out, env, row_id, size, seed) / "distill.json.gz"


def teacher_graph(out: Path, env: str, size: str, seed: int) -> Path:
    """The graph the arg_teacher run saves with its last checkpoint."""
    return run_dir(out, env, "arg_teacher", size, seed) / f"global_step_{EPOCHS}" / "proas" / "graph.json.gz"


def trainer_overrides(row_id: str, env: str, size: str, seed: int, out: Path) -> list[str]:
    row, e = ROWS[row_id], ENVS[env]
    model, gpus, tp = SIZES[size]
    ppo = row.algo == "ppo"
    tasks, group = (TASKS * GROUP, 1) if ppo else (TASKS, GROUP)
    o = [
        f"algorithm.adv_estimator={'gae' if ppo else 'gigpo' if row.algo == 'gigpo' else 'grpo'}",
        "data.train_files=$HOME/data/verl-agent/text/train.parquet",
        "data.val_files=$HOME/data/verl-agent/text/test.parquet",
        f"data.train_batch_size={tasks}",
        f"data.val_batch_size={VAL_TASKS}",
        f"data.max_prompt_length={e['prompt']}",
        "data.max_response_length=512",
        "data.filter_overlong_prompts=True",
        "data.truncation=error",
        "data.return_raw_chat=True",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.model.use_remove_padding=True",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={e['mini']}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={e['ppo_micro'] if ppo else e['micro']}",
        "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.actor.kl_loss_coef=0.01",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.model.enable_gradient_checkpointing=True",
        "actor_rollout_ref.actor.fsdp_config.param_offload=False",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={e['logprob']}",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
        "actor_rollout_ref.rollout.enable_chunked_prefill=False",
        "actor_rollout_ref.rollout.enforce_eager=False",
        "actor_rollout_ref.rollout.free_cache_engine=False",
        "actor_rollout_ref.rollout.val_kwargs.temperature=0.4",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={e['logprob']}",
        "actor_rollout_ref.ref.fsdp_config.param_offload=True",
        "actor_rollout_ref.actor.use_invalid_action_penalty=True",
        "actor_rollout_ref.actor.invalid_action_penalty_coef=0.1",
        "algorithm.use_kl_in_reward=False",
    ]
    if row.algo == "gigpo":
        o += ["algorithm.gamma=0.95", "algorithm.gigpo.step_advantage_w=1.0", f"algorithm.gigpo.mode={e['mode']}"]
    if row.algo == "dapo":
        o += ["actor_rollout_ref.actor.clip_ratio_low=0.2", "actor_rollout_ref.actor.clip_ratio_high=0.28",
              "algorithm.filter_groups.enable=True", "algorithm.filter_groups.max_num_gen_batches=10"]
    if ppo:
        o += ["critic.optim.lr=1e-5", "critic.model.use_remove_padding=True", f"critic.model.path={model}",
              "critic.model.enable_gradient_checkpointing=True",
              f"critic.ppo_micro_batch_size_per_gpu={e['critic_micro']}",
              "critic.model.fsdp_config.param_offload=False", "critic.model.fsdp_config.optimizer_offload=False"]
    o += [
        f"env.env_name={e['env_name']}",
        f"env.seed={seed}",
        f"env.max_steps={e['max_steps']}",
    ]
    if not ppo:
        o.append(f"env.rollout.n={group}")
    o += [
        "trainer.critic_warmup=0",
        "trainer.logger=['console']",
        f"trainer.project_name=proas_verl_agent_{env}",
        f"trainer.experiment_name={row_id}_{size}_seed{seed}",
        f"trainer.default_local_dir={run_dir(out, env, row_id, size, seed)}",
        f"trainer.n_gpus_per_node={gpus}",
        "trainer.nnodes=1",
        "trainer.save_freq=50",
        "trainer.test_freq=5",
        f"trainer.total_epochs={EPOCHS}",
        "trainer.val_before_train=True",
    ]
    if row.proas:
        o += ["proas.enable=True", f"proas.seed={seed}"]
        o += [f"proas.{k}={_hydra(v)}" for k, v in row.proas.items()]
        g = graph_path(out, env, row, row_id, size, seed)
        if g is not None:
            o.append(f"proas.graph={g}")
    return o


def _hydra(value) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    return str(value)


def sft_command(env: str, size: str, seed: int, out: Path) -> list[list[str]]:
    model, gpus, _ = SIZES[size]
    data = out / env / "sft_data.parquet"
    rd = run_dir(out, env, "sft", size, seed)
    return [
        ["proas", "verl", "sft-data", "--env", env, "--out", str(data)],
        ["torchrun", "--standalone", "--nnodes=1", f"--nproc_per_node={gpus}", "-m", "verl.trainer.fsdp_sft_trainer",
         f"data.train_files={data}", f"data.val_files={data}", "data.prompt_key=prompt", "data.response_key=response",
         f"data.max_length={ENVS[env]['prompt'] + 512}", "data.micro_batch_size_per_gpu=4",
         f"model.partial_pretrain={model}", "optim.lr=1e-5", f"trainer.default_local_dir={rd}",
         f"trainer.project_name=proas_verl_agent_{env}", f"trainer.experiment_name=sft_{size}_seed{seed}",
         "trainer.total_epochs=10", "trainer.logger=['console']", f"trainer.seed={seed}"],
    ]


def commands(row_id: str, env: str, size: str, seed: int, out: Path, extra: list[str]) -> list[list[str]]:
    """Every command of the row, in order: graph building, data preparation, the trainer."""
    row = ROWS[row_id]
    if row.algo == "sft":
        cmds = sft_command(env, size, seed, out)
        cmds[-1] += extra
        return cmds
    cmds: list[list[str]] = []
    g = graph_path(out, env, row, row_id, size, seed)
    if row.graph == "oracle":
        cmds.append(["proas", "verl", "build-graph", "--env", env, "--variant", "oracle", "--out", str(g)])
    elif row.graph == "incomplete":
        cmds.append(["proas", "verl", "build-graph", "--env", env, "--variant", "incomplete",
                     "--seed", str(seed), "--out", str(g)])
    elif row.graph == "distill":
        cmds.append(["proas", "verl", "build-graph", "--env", env, "--variant", "distill",
                     "--from", str(teacher_graph(out, env, size, seed)), "--out", str(g)])
    tasks = TASKS * GROUP if row.algo == "ppo" else TASKS
    cmds.append(["python3", "-m", "examples.data_preprocess.prepare", "--mode", "text",
                 "--train_data_size", str(tasks), "--val_data_size", str(VAL_TASKS)])
    cmds.append(["python3", "-m", "verl.trainer.main_ppo", *trainer_overrides(row_id, env, size, seed, out), *extra])
    return cmds


def resolved_proas(row_id: str, env: str, size: str, seed: int, out: Path, extra: list[str]) -> dict | None:
    """The ``proas:`` settings the patched trainer will build its ``ProASCredit`` from (the recipe's
    proas.yaml + the row's overrides, the rest filled from verl-agent's settings), validated by
    building it (without loading the graph file, which may not exist yet)."""
    row = ROWS[row_id]
    if not row.proas:
        return None
    from omegaconf import OmegaConf

    from proas.integrations.verl import ProASCredit
    from proas.integrations.verl.verl_agent import proas_settings

    base = OmegaConf.load(PROAS_YAML)
    # the verl-agent settings proas_settings reads, at verl-agent's config defaults
    base.merge_with(OmegaConf.create({
        "algorithm": {"adv_estimator": "grpo", "gamma": 1.0, "norm_adv_by_std_in_grpo": True,
                      "gigpo": {"mode": "mean_norm", "step_advantage_w": 1.0}},
        "actor_rollout_ref": {"actor": {"use_invalid_action_penalty": True, "invalid_action_penalty_coef": 0.1}},
    }))
    overrides = [o for o in trainer_overrides(row_id, env, size, seed, out) + extra
                 if o.split("=", 1)[0].split(".")[0] in ("proas", "algorithm", "actor_rollout_ref")
                 and "$" not in o]
    cfg = OmegaConf.merge(base, OmegaConf.from_dotlist([o.lstrip("+") for o in overrides]))
    settings = proas_settings(cfg)
    ProASCredit.from_config({k: v for k, v in settings.items() if k != "graph"})
    return settings


def _missing_proas() -> str | None:
    """Why proas (or omegaconf, which it brings) cannot be imported here, or ``None``."""
    import importlib.util

    for name in ("proas", "omegaconf"):
        if importlib.util.find_spec(name) is None:
            return f"{name} is not installed in this Python ({sys.executable})"
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("row", nargs="?", choices=sorted(ROWS), metavar="ROW", help="a table row; --list shows them")
    p.add_argument("--env", choices=sorted(ENVS), default="household")
    p.add_argument("--size", choices=sorted(SIZES), default="1.5b")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.environ.get("PROAS_RUNS", "runs/verl_agent"),
                   help="runs, graphs and data go under here (default $PROAS_RUNS or runs/verl_agent)")
    p.add_argument("--verl-agent", default=os.environ.get("VERL_AGENT_DIR"),
                   help="the patched verl-agent checkout to run in (default $VERL_AGENT_DIR)")
    p.add_argument("--dry-run", action="store_true", help="print the commands and the proas config; run nothing")
    p.add_argument("--list", action="store_true", help="list the rows")
    args = p.parse_args(argv)
    if args.list:
        for rid, row in ROWS.items():
            print(f"{row.table:8} {rid:22} {row.label}")
        return 0
    if args.row is None:
        p.error("ROW is required (or --list)")
    out = Path(args.out).resolve()
    row = ROWS[args.row]
    cmds = commands(args.row, args.env, args.size, args.seed, out, extra)
    missing = _missing_proas()
    if missing and not args.dry_run:
        print(f"launch.py: {missing}; the patched trainer imports it: pip install proas (or pip install -e "
              f"/path/to/proas) into verl-agent's environment", file=sys.stderr)
        return 2
    settings = None if missing else resolved_proas(args.row, args.env, args.size, args.seed, out, extra)
    print(f"# {row.table} table, {row.label}: env {args.env}, {args.size}, seed {args.seed}")
    if row.note:
        print(f"# note: {row.note}")
    if args.dry_run:
        # unset: the variable, in double quotes, so the pasted line expands it
        print(f"cd {shlex.quote(args.verl_agent)}" if args.verl_agent else 'cd "$VERL_AGENT_DIR"')
        for cmd in cmds:
            print(" \\\n    ".join(shlex.quote(c) if "$" not in c else c for c in cmd))
        if missing and ROWS[args.row].proas:
            print(f"# proas config not resolved: {missing}")
        elif settings is None:
            print("# proas: off (verl-agent's own advantage)")
        else:
            from omegaconf import OmegaConf

            print("# resolved proas config:")
            print(OmegaConf.to_yaml({"proas": settings}).rstrip())
        return 0
    if not args.verl_agent:
        p.error("--verl-agent DIR (or $VERL_AGENT_DIR) must name the patched verl-agent checkout")
    for cmd in cmds:
        cmd = [os.path.expandvars(c) for c in cmd]
        print("+ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
        rc = subprocess.call(cmd, cwd=args.verl_agent)
        if rc != 0:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
