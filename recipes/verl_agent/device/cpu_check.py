#!/usr/bin/env python3
"""Pre-flight on the CPU for the one-GPU run (docs/verl.md section 10): verl-agent's own model
code on the run's model, before any device time is spent.

With the pinned verl-agent (patched or not) on PYTHONPATH and the transformers the device has,
this composes verl-agent's trainer config with run.sh's own overrides, those of its machinery
phases and those of its learning run's arms (so a key that verl-agent does not know fails here),
loads the learning run's config and the model as its FSDP worker does (sdpa attention, verl's
monkey patch), and runs one batch of the three model calls of a training step through
verl-agent's classes: ``HFRollout.generate_sequences`` (rollout.name=hf), the actor's
``compute_log_prob`` and its ``update_policy``. It checks their shapes, that the log-probs are
finite and that the update moves the weights.

verl-agent's rollout and actor call CUDA's cache and memory counters, which ``torch.cpu`` lacks;
here they are no-ops (the check's only stand-ins). What it cannot check: FSDP, ray and NCCL,
which need the GPU.

    PYTHONPATH=$VERL_AGENT_DIR python recipes/verl_agent/device/cpu_check.py --model DIR
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _fill(body: str, work: str, env: str) -> list[str]:
    """``body``'s words that are overrides, with run.sh's shell variables filled in: its defaults
    (``NAME=${NAME:-value}``) and the values run.sh gives the rest."""
    text = (HERE / "run.sh").read_text()
    values = dict(re.findall(r"^\s*(\w+)=\$\{\1:-([^}$]*)\}", text, re.M))
    values.update({"ENV": env, "WORK": work, "1": f"{work}/run", "2": "10", "3": "disable",
                   "MODEL_DIR": f"{work}/model", "GRAPH": f"{work}/arg.json.gz"})
    body = re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), m.group(0)), body)
    return [tok for tok in shlex.split(body, comments=True) if "=" in tok]


def run_sh_overrides(work: str = "/tmp/proas-va", env: str = "proas/household") -> list[str]:
    """The Hydra overrides of run.sh's trainer command (``run``), with its shell variables filled in."""
    text = (HERE / "run.sh").read_text()
    start = text.index("python3 -m verl.trainer.main_ppo") + len("python3 -m verl.trainer.main_ppo")
    body = text[start:text.index('"${@:4}"', start)].replace("\\\n", " ")
    return _fill(body, work, env)


def learn_overrides(work: str = "/tmp/proas-va", env: str = "alfworld/AlfredTWEnv",
                    arm: str = "grpo", lr: str = "1e-4") -> list[str]:
    """What run.sh's ``learn`` phase runs: ``run``'s overrides, then its ``learn_overrides``
    array, then the arm's shaping and rate (later Hydra overrides win)."""
    text = (HERE / "run.sh").read_text()
    start = text.index("learn_overrides=(") + len("learn_overrides=(")
    body = text[start:text.index("\n)", start)]
    start = text.index("shaping_of() {")
    arms = dict(re.findall(r"^\s*(\w+)\) echo (\w+) ;;", text[start:text.index("\n}", start)], re.M))
    shaping = arms[arm]  # run.sh's own arm -> shaping table
    return [*run_sh_overrides(work, env), *_fill(body, work, env), f"proas.shaping={shaping}",
            f"actor_rollout_ref.actor.optim.lr={lr}"]


def compose(verl_agent: Path, overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(verl_agent / "verl" / "trainer" / "config"), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="the run's model (proas lm new-model's --out)")
    p.add_argument("--response-length", type=int, default=16)
    args = p.parse_args()
    warnings.simplefilter("ignore")
    import torch
    import transformers
    from omegaconf import open_dict

    try:
        import verl
    except ImportError:
        print("cpu_check: verl-agent is not importable: put the pinned checkout on PYTHONPATH", file=sys.stderr)
        return 2
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl import DataProto
    from verl.models.transformers.monkey_patch import apply_monkey_patch
    from verl.utils.model import compute_position_id_with_mask
    from verl.workers.actor.dp_actor import DataParallelPPOActor
    from verl.workers.rollout.hf_rollout import HFRollout

    verl_agent = Path(verl.__file__).resolve().parents[1]
    compose(verl_agent, run_sh_overrides())  # an unknown key fails here
    for arm in ("grpo", "grpo_proas"):
        cfg = compose(verl_agent, learn_overrides(arm=arm))
    assert cfg.proas.shaping == "proas" and cfg.actor_rollout_ref.actor.use_kl_loss, cfg.proas
    with open_dict(cfg):
        cfg.actor_rollout_ref.rollout.response_length = args.response_length
    print(f"config: run.sh's {len(run_sh_overrides())} overrides and its learn phase's {len(learn_overrides())} "
          f"compose (verl-agent at {verl_agent}, transformers {transformers.__version__}, torch {torch.__version__})")

    # the CUDA-only calls of verl-agent's rollout and actor, as no-ops on the CPU
    torch.cpu.empty_cache = lambda: None
    torch.cpu.memory_allocated = torch.cpu.memory_reserved = lambda *a: 0
    torch.cpu.mem_get_info = lambda *a: (1, 1)

    torch.manual_seed(0)
    # the local directory only, and none of its own code (auto_map), as proas and verl load it
    local = {"local_files_only": True, "trust_remote_code": False}
    tok = AutoTokenizer.from_pretrained(args.model, **local)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(args.model, attn_implementation="sdpa", dtype=torch.float32, **local)
    apply_monkey_patch(model, use_remove_padding=cfg.actor_rollout_ref.model.use_remove_padding)
    chats = [[{"role": "user", "content": "Your task is to: put some key on bed."}],
             [{"role": "user", "content": "Your task is to: heat some egg and put it in countertop. A fridge 1."}]]
    enc = tok([tok.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in chats],
              return_tensors="pt", padding=True)
    batch = DataProto.from_dict(
        {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
         "position_ids": compute_position_id_with_mask(enc["attention_mask"])},
        meta_info={"eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id, "do_sample": True})
    out = HFRollout(model, cfg.actor_rollout_ref.rollout).generate_sequences(batch)
    n, width = enc["input_ids"].shape
    assert tuple(out.batch["responses"].shape) == (n, args.response_length), out.batch["responses"].shape
    assert tuple(out.batch["input_ids"].shape) == (n, width + args.response_length)
    print(f"rollout: {n} prompts of {width} tokens -> responses {tuple(out.batch['responses'].shape)}")

    actor = DataParallelPPOActor(cfg.actor_rollout_ref.actor, model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    out.meta_info.update(micro_batch_size=n, temperature=1.0, use_dynamic_bsz=False)
    logp, _ = actor.compute_log_prob(out, calculate_entropy=True)
    assert tuple(logp.shape) == (n, args.response_length) and bool(torch.isfinite(logp).all())
    print(f"log-probs: {tuple(logp.shape)}, mean {float(logp.mean()):.3f}")

    out.batch["old_log_probs"] = logp
    out.batch["ref_log_prob"] = logp.detach().clone()  # the learn phase's KL loss reads it
    out.batch["advantages"] = torch.tensor([[1.0], [-1.0]]).expand(-1, args.response_length).contiguous()
    out.batch["response_mask"] = out.batch["attention_mask"][:, -args.response_length:]
    before = [q.detach().clone() for q in model.parameters()]
    with open_dict(cfg):
        cfg.actor_rollout_ref.actor.ppo_mini_batch_size = n
        cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu = n
    metrics = actor.update_policy(out)
    moved = sum(bool((q.detach() != b).any()) for q, b in zip(model.parameters(), before))
    assert moved > 0 and "actor/pg_loss" in metrics and "actor/kl_loss" in metrics, (moved, sorted(metrics))
    print(f"update: {moved} of {len(before)} weight tensors moved; metrics {', '.join(sorted(metrics))}")
    print("cpu_check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
