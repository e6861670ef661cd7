"""Run verl-agent's own rollout loop and advantage code on proas's envs, then the recipe's ProAS
step, and compare with proas's credit layer. Prints one JSON object.

    PYTHONPATH=PATCHED_VERL_AGENT:src python tests/verl_agent_check.py --loop      # the rollout loop
    PYTHONPATH=PATCHED_VERL_AGENT:src python tests/verl_agent_check.py --parity    # + the advantages
    PYTHONPATH=PATCHED_VERL_AGENT:src python tests/verl_agent_check.py --checkpoint RUN_DIR
    PYTHONPATH=PATCHED_VERL_AGENT:src python tests/verl_agent_check.py --sft   # the SFT start's rows

tests/test_verl_agent.py runs these in a subprocess whose ``PYTHONPATH`` starts with a verl-agent
checkout patched with the recipe (its ``verl`` package is verl-agent's fork, not the PyPI verl of
the other verl tests).

What runs is verl-agent's: its ``make_envs`` (as the patch wraps it: proas's envs behind its own
env managers, prompts and projection), its ``TrajectoryCollector.multi_turn_loop`` (the
vanilla loop, and the dynamic one of DAPO), ``compute_step_discounted_returns`` (GiGPO),
``adjust_batch`` (padding copies), ``EpisodeRewardManager`` (the outcome on the last response
token), ``apply_invalid_action_penalty`` and ``compute_advantage`` (ray_trainer.py). The model
is scripted (``ScriptedActor``: it decodes each prompt and answers with the env's oracle move, an
admissible detour, an inadmissible command or an untagged answer, seeded), and the tokenizer is
proas's byte-level BPE with its chat template. The reference the ProAS step is compared with is
built from what the env manager returned (``RecordingEnvs``), not from the batch's rows.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from proas.credit import SHAPINGS, ReferenceGraph, compute_credit
from proas.integrations.verl.verl_agent import trainer_credit
from proas.types import Step, Trajectory

TASKS = 3  # data.train_batch_size: tasks a batch
GROUP = 4  # env.rollout.n
MAX_STEPS = 10
RESPONSE = 128  # response tokens a row (data.max_response_length)
PENALTY = 0.1
ENVS = ("proas/household", "proas/shop")


class SilentTokenizer:
    """EpisodeRewardManager decodes the rows to print a few; nothing is printed here."""

    def decode(self, ids, skip_special_tokens=False):
        return ""


_TOKENIZER = []


def tokenizer():
    """proas's byte-level BPE with its chat template (every text round-trips), trained once."""
    if not _TOKENIZER:
        from proas.lm.model import train_tokenizer

        texts = ["Your task is to: put some apple in fridge. You arrive at countertop 1.",
                 "<think>plan</think><action>go to countertop 1</action>", "search[red shirt] click[buy now]"]
        _TOKENIZER.append(train_tokenizer(texts, 400, "line"))
    return _TOKENIZER[0]


class ScriptedActor:
    """Stands in for the actor's Ray worker group: ``generate_sequences`` decodes each row's
    prompt and answers for env ``index`` (the row's env) with, seeded: the env's oracle move
    (60 %), an admissible detour (20 %), an inadmissible command (10 %) or an untagged answer."""

    world_size = 1

    def __init__(self, vec, seed):
        self.vec = vec  # the ProasVecEnv under verl-agent's manager: each env's oracle and moves
        self.rng = np.random.default_rng(seed)
        self.prompts = []  # per call: the decoded prompt of every row

    def choose(self, i):
        env, info = self.vec.envs[i], self.vec.infos[i]
        moves = [a for a in info.get("admissible", []) if a != "help"] or ["look"]
        u = self.rng.random()
        hint = env.hint() if not self.vec.done[i] else None
        if u < 0.6 and hint:
            return f"<think>plan</think><action>{hint}</action>"
        if u < 0.8:
            return f"<think>detour</think><action>{moves[int(self.rng.integers(len(moves)))]}</action>"
        if u < 0.9:
            return "<think>hm</think><action>juggle the fridge</action>"
        return "go to the moon"  # no tags: format-invalid (verl-agent's penalty)

    def generate_sequences(self, batch):
        import torch
        from verl import DataProto

        tok = tokenizer()
        ids, mask = batch.batch["input_ids"], batch.batch["attention_mask"]
        self.prompts.append([tok.decode(ids[r][mask[r].bool()].tolist()) for r in range(len(ids))])
        texts = [self.choose(int(i)) for i in range(len(ids))]
        enc = [tok.encode(t, add_special_tokens=False) for t in texts]
        width = RESPONSE  # as a rollout engine pads to data.max_response_length: rows of every step stack
        assert max(len(e) for e in enc) <= width, "a scripted response is longer than RESPONSE tokens"
        responses = torch.full((len(enc), width), tok.pad_token_id, dtype=ids.dtype)
        resp_mask = torch.zeros((len(enc), width), dtype=mask.dtype)
        for r, e in enumerate(enc):
            responses[r, : len(e)] = torch.as_tensor(e)
            resp_mask[r, : len(e)] = 1
        attention = torch.cat([mask, resp_mask], dim=1)
        out = DataProto.from_dict(tensors={
            "prompts": ids, "responses": responses, "input_ids": torch.cat([ids, responses], dim=1),
            "attention_mask": attention, "position_ids": torch.clamp(torch.cumsum(attention, dim=1) - 1, min=0)})
        out.meta_info = dict(batch.meta_info)
        return out


class RecordingEnvs:
    """verl-agent's env manager, unchanged, with what it hands the loop kept per episode: the
    anchor each action was taken in, the reward, and the step's info."""

    def __init__(self, envs):
        self.envs = envs
        self.episodes = []  # per reset: per env, [(anchor, reward, info), ...]

    def __getattr__(self, name):
        return getattr(self.__dict__["envs"], name)

    def reset(self, *args, **kwargs):
        obs, infos = self.envs.reset(*args, **kwargs)
        self.episodes.append([[] for _ in infos])
        self.anchors = list(obs["anchor"])
        self.prompts = [list(obs["text"])]
        return obs, infos

    def step(self, actions):
        obs, rewards, dones, infos = self.envs.step(actions)
        for i, info in enumerate(infos):
            if "proas" in info:
                self.episodes[-1][i].append((self.anchors[i], float(rewards[i]), info))
        self.anchors = list(obs["anchor"])
        self.prompts.append(list(obs["text"]))
        return obs, rewards, dones, infos


def config(env_name, adv="grpo", estimator=None, shaping="proas", mode="mean_norm", graph_path=None, divisor=1,
           filter_groups=False):
    from omegaconf import OmegaConf

    return OmegaConf.create({
        "algorithm": {"adv_estimator": adv, "gamma": 0.95, "norm_adv_by_std_in_grpo": True, "use_kl_in_reward": False,
                      "gigpo": {"mode": mode, "step_advantage_w": 1.0},
                      "filter_groups": {"enable": filter_groups, "max_num_gen_batches": 2}},
        "actor_rollout_ref": {"actor": {"use_invalid_action_penalty": True, "invalid_action_penalty_coef": PENALTY,
                                        "use_kl_loss": True, "ppo_micro_batch_size_per_gpu": divisor,
                                        "ppo_mini_batch_size": divisor},
                              "rollout": {"log_prob_micro_batch_size_per_gpu": divisor},
                              "ref": {"log_prob_micro_batch_size_per_gpu": divisor}},
        "trainer": {"n_gpus_per_node": 1, "nnodes": 1},
        "data": {"train_batch_size": TASKS, "val_batch_size": 2, "max_prompt_length": 16384, "truncation": "error",
                 "return_raw_chat": True},
        "env": {"env_name": env_name, "seed": 0, "max_steps": MAX_STEPS, "history_length": 2,
                "rollout": {"n": GROUP}, "resources_per_worker": {"num_cpus": 0.1}},
        "proas": {"enable": True, "graph": graph_path, "estimator": estimator, "shaping": shaping,
                  "estimator_options": {"group_stats": "steps"}, "seed": 7, "rea": "transition",
                  "invalid_action_penalty": None, "columns": {"error": "env_error"}},
    })


def collect(cfg, seed=11):
    """verl-agent's ``make_envs`` and ``TrajectoryCollector.multi_turn_loop`` with the scripted
    actor: the gathered batch, the recording of the env manager, the actor."""
    import torch
    from agent_system.environments import make_envs
    from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
    from verl import DataProto

    envs, _ = make_envs(cfg)
    recording = RecordingEnvs(envs)
    actor = ScriptedActor(envs.envs, seed)
    gen_batch = DataProto.from_dict(
        tensors={"input_ids": torch.zeros(TASKS, 1, dtype=torch.int64)},
        non_tensors={"raw_prompt": np.array([[{"role": "user", "content": ""}]] * TASKS, dtype=object),
                     "data_source": np.array([cfg.env.env_name] * TASKS, dtype=object)})
    batch = TrajectoryCollector(cfg, tokenizer()).multi_turn_loop(gen_batch, actor, recording, is_train=True)
    return batch, recording, actor


def reference_trajectories(batch, recording):
    """The batch's episodes as proas trajectories, built from what the env manager returned; each
    trajectory is found by its env (the rows' ``index``) and its actions."""
    nt = batch.non_tensor_batch
    rows_of = {}
    for r in range(len(batch)):
        rows_of.setdefault(nt["traj_uid"][r], []).append(r)
    out = []
    for traj, rows in rows_of.items():
        rows.sort(key=lambda r: int(nt["step_index"][r]))
        env, actions = int(nt["index"][rows[0]]), [nt["action"][r] for r in rows]
        matches = [ep[env] for ep in recording.episodes if [info["proas"]["action"] for *_, info in ep[env]] == actions]
        assert matches, f"no recorded episode of env {env} took the actions {actions}"
        steps = [Step(info["proas"]["abstract_state"], info["proas"]["action"], info["proas"]["next_abstract_state"],
                      error=bool(info["proas"]["env_error"]) or not bool(info["is_action_valid"]), anchor=anchor,
                      reward=reward) for anchor, reward, info in matches[0]]
        out.append(Trajectory(nt["uid"][rows[0]], traj, float(sum(st.reward for st in steps)), steps))
    return out


def rows_equal(batch, trajs):
    """Each trajectory's rows, in step order, hold the states, action and error_t of the steps the
    env manager returned (``reference_trajectories``)."""
    nt = batch.non_tensor_batch
    for t in trajs:
        rows = sorted((int(nt["step_index"][r]), r) for r in range(len(batch)) if nt["traj_uid"][r] == t.trajectory)
        got = [(nt["abstract_state"][r], nt["action"][r], nt["next_abstract_state"][r], bool(nt["env_error"][r]),
                nt["anchor_obs"][r]) for _, r in rows]
        want = [(st.state, st.action, st.next_state, st.error, st.anchor) for st in t.steps]
        if [k for k, _ in rows] != list(range(len(t))) or got != want:
            return False
    return True


def loop_report(env_name):
    """The rollout loop on one env: what the rows hold against what the env manager returned."""
    batch, recording, actor = collect(config(env_name))
    nt = batch.non_tensor_batch
    trajs = reference_trajectories(batch, recording)
    rows = sum(len(t) for t in trajs)
    from proas.integrations.verl.envs import task_of

    tasks = [task_of(info).replace("Your task is to: ", "") for info in recording.envs.envs.infos]
    task_everywhere = all(tasks[i] in call[i] for call in recording.prompts for i in range(len(tasks)))
    decoded = [p for call in actor.prompts for p in call]
    return {
        "env": env_name,
        "manager": type(recording.envs).__name__,
        "rows": len(batch), "steps": rows, "trajectories": len(trajs), "groups": len(set(nt["uid"])),
        "columns": sorted(k for k in ("step_index", "abstract_state", "next_abstract_state", "action", "env_error")
                          if k in nt),
        "rows_equal_recording": rows_equal(batch, trajs),
        "env_errors": int(sum(bool(x) for x in nt["env_error"])),
        "invalid_format": int(sum(not bool(x) for x in nt["is_action_valid"])),
        "won": int(sum(t.success for t in trajs)),
        "task_in_every_prompt": bool(task_everywhere),
        "prompts_decoded": len(decoded),
        "chat_template_in_prompts": all(p.startswith("<|im_start|>user") for p in decoded),
    }


def train_step(batch, cfg, shuffle_seed):
    """The trainer's fit() from the gathered rollout to the ProAS step, with verl-agent's functions."""
    import torch
    from agent_system.multi_turn_rollout.utils import adjust_batch
    from agent_system.reward_manager.episode import EpisodeRewardManager
    from gigpo import core_gigpo
    from verl.trainer.ppo import ray_trainer

    if cfg.algorithm.adv_estimator == "gigpo":
        batch.batch["step_rewards"] = core_gigpo.compute_step_discounted_returns(batch=batch, gamma=cfg.algorithm.gamma)
    np.random.seed(shuffle_seed)
    n_rows = len(batch)
    batch = adjust_batch(cfg, batch)
    n_pad = len(batch) - n_rows
    batch.batch["response_mask"] = ray_trainer.compute_response_mask(batch)
    # _balance_batch reorders the rows across data-parallel ranks; any permutation will do here
    batch.reorder(torch.as_tensor(np.random.default_rng(shuffle_seed).permutation(len(batch))))
    batch.batch["token_level_scores"] = EpisodeRewardManager(SilentTokenizer(), 0)(batch)
    batch, _ = ray_trainer.apply_invalid_action_penalty(batch, invalid_action_penalty_coef=PENALTY)
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
    batch = ray_trainer.compute_advantage(
        batch, adv_estimator=cfg.algorithm.adv_estimator, gamma=cfg.algorithm.gamma, lam=1.0, num_repeat=GROUP,
        norm_adv_by_std_in_grpo=True, multi_turn=False, step_advantage_w=1.0, gigpo_mode=cfg.algorithm.gigpo.mode)
    verl_agent_adv = batch.batch["advantages"].clone()
    credit = trainer_credit(cfg)
    credit.reshape(batch)  # the patch's ProAS step
    return batch, verl_agent_adv, credit, n_pad


class WorkerGroupDouble:
    """Stands in for the actor's Ray worker group: records the checkpoint calls the trainer makes
    (the model's own checkpoint is verl-agent's business, not the recipe's)."""

    def __init__(self):
        self.calls = []

    def save_checkpoint(self, path, *args, **kwargs):
        self.calls.append(("save", path))

    def load_checkpoint(self, path, **kwargs):
        self.calls.append(("load", path))


class DataLoaderDouble:
    def __init__(self, state=None):
        self.state = state or {"epoch": 0}

    def state_dict(self):
        return dict(self.state)

    def load_state_dict(self, state):
        self.state = dict(state)


def checkpoint_round_trip(run_dir: str) -> dict:
    """The patched ``RayPPOTrainer``'s ``_save_checkpoint`` and ``_load_checkpoint`` (verl-agent's
    methods with the recipe's lines): the graph is saved beside the actor and restored on
    resume, under ``resume_mode`` auto and resume_path."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    def trainer(resume_mode, resume_from=None):
        cfg = OmegaConf.create({
            "trainer": {"default_local_dir": run_dir, "default_hdfs_dir": None, "resume_mode": resume_mode,
                        "resume_from_path": resume_from, "del_local_ckpt_after_load": False,
                        "max_actor_ckpt_to_keep": None, "max_critic_ckpt_to_keep": None},
            "algorithm": {"adv_estimator": "grpo"},
            "proas": {"enable": True, "graph": None, "estimator": None, "estimator_options": {"group_stats": "steps"},
                      "shaping": "proas", "invalid_action_penalty": None},
        })
        t = RayPPOTrainer.__new__(RayPPOTrainer)  # the real __init__ builds Ray worker groups
        t.config, t.use_critic, t.global_steps = cfg, False, 0
        t.actor_rollout_wg, t.train_dataloader = WorkerGroupDouble(), DataLoaderDouble()
        t.proas = trainer_credit(cfg)  # what the patched __init__ sets
        return t

    first = trainer("auto")
    win = Trajectory("g", "t", 1.0, [Step("s0", "go", "s1"), Step("s1", "take", "goal")])
    first.proas.graph.add_trajectories([win])
    first.proas.batches_seen = 4
    first.global_steps = 4
    first._save_checkpoint()
    saved = sorted(p.name for p in (Path(run_dir) / "global_step_4" / "proas").iterdir())
    resumed = trainer("auto")
    resumed._load_checkpoint()
    by_path = trainer("resume_path", f"{run_dir}/global_step_4")
    by_path._load_checkpoint()
    fresh = trainer("disable")
    fresh._load_checkpoint()
    edges = sorted(map(list, first.proas.graph.edges()))

    def same_graph(t):
        return sorted(map(list, t.proas.graph.edges())) == edges

    return {
        "saved": saved,
        "auto": [resumed.global_steps, resumed.proas.batches_seen, same_graph(resumed)],
        "resume_path": [by_path.global_steps, by_path.proas.batches_seen, same_graph(by_path)],
        "disable": [fresh.proas.batches_seen, fresh.proas.graph.num_edges],
        "actor_calls": [c[0] for c in resumed.actor_rollout_wg.calls],
    }


def parity(graph_path):
    """For GRPO, DAPO (its dynamic loop) and GiGPO: the ProAS step with shaping none gives
    verl-agent's own advantages, and with every shaping equals ``compute_credit``."""
    import copy

    import torch

    results = {"verl_agent_parity": [], "credit_parity": []}
    cases = [("grpo", "grpo", "mean_norm", False), ("grpo", "dapo", "mean_norm", True),
             ("gigpo", "gigpo", "mean_norm", False), ("gigpo", "gigpo", "mean_std_norm", False)]
    for adv, est, mode, dapo in cases:
        gathered, recording, _ = collect(config("proas/household", adv, est, "none", mode, graph_path, 1, dapo))
        trajs = reference_trajectories(gathered, recording)
        # (1) shaping none, no padding: ProAS's base is verl-agent's own advantage, penalty included
        batch, theirs, _, n_pad = train_step(copy.deepcopy(gathered), config(
            "proas/household", adv, est, "none", mode, graph_path, 1, dapo), shuffle_seed=3)
        invalid = int((~batch.non_tensor_batch["is_action_valid"].astype(bool)).sum())
        results["verl_agent_parity"].append({
            "estimator": est, "mode": mode, "rows": len(batch), "pad": n_pad, "rollouts": len(recording.episodes),
            "max_abs_diff": float((batch.batch["advantages"] - theirs).abs().max()), "invalid_rows": invalid,
            "nonzero": float(theirs.abs().sum())})
        # (2) every shaping, with verl-agent's padding copies: the ProAS step equals compute_credit
        for shaping in SHAPINGS:
            cfg = config("proas/household", adv, est, shaping, mode, graph_path, 7, dapo)
            batch, _, credit, n_pad = train_step(copy.deepcopy(gathered), cfg, shuffle_seed=5)
            order = {t.trajectory: k for k, t in enumerate(credit.last_layout.trajectories)}
            ordered = sorted(trajs, key=lambda t: order[t.trajectory])
            invalid = np.array([not valid for t in ordered for valid in _valid_flags(gathered, t)], dtype=np.float64)
            options = {"group_stats": "steps", "step_penalty": PENALTY * invalid}
            options.update(dict(gamma=0.95, mode=mode, step_weight=1.0) if est == "gigpo" else dict(norm_by_std=True))
            ref = compute_credit(ordered, ReferenceGraph.load(graph_path), estimator=est, shaping=shaping,
                                 estimator_options=options, seed=7, evolve=True, rea="transition")
            plain = compute_credit(ordered, ReferenceGraph.load(graph_path), estimator=est, shaping="none",
                                   estimator_options=options, seed=7, evolve=True, rea="transition")
            index = {(t.trajectory, k): n for n, (t, k) in enumerate((t, k) for t in ordered for k in range(len(t)))}
            nt = batch.non_tensor_batch
            at = np.array([index[(nt["traj_uid"][r], int(nt["step_index"][r]))] for r in range(len(batch))])
            want = torch.as_tensor(ref.advantage[at], dtype=torch.float32)[:, None] * batch.batch["response_mask"]
            results["credit_parity"].append({
                "estimator": est, "mode": mode, "shaping": shaping, "rows": len(batch), "pad": n_pad,
                "max_abs_diff": float((batch.batch["advantages"] - want).abs().max()),
                "changed": bool(not np.allclose(ref.advantage, plain.advantage))})
    return results


def _valid_flags(gathered, traj):
    """verl-agent's format flag of each step of ``traj``, in step order (from its rows)."""
    nt = gathered.non_tensor_batch
    rows = sorted((int(nt["step_index"][r]), r) for r in range(len(gathered)) if nt["traj_uid"][r] == traj.trajectory)
    return [bool(nt["is_action_valid"][r]) for _, r in rows]


def sft_report(tasks: int = 6) -> dict:
    """``proas verl sft-data``'s rows with verl-agent importable, against what verl-agent shows the
    policy and what verl's SFT dataset trains on: the prompts' template; the same tasks exported
    (``proas household export``) and played by ALFWorld's own ``AlfredTWEnv`` (verl-agent's
    ``config_tw.yaml``, train mode) behind verl-agent's ``AlfWorldEnvironmentManager`` with the
    rows' responses, prompt by prompt (None where TextWorld is not installed); and ``proas lm
    sft-rows``' tokens and targets of each row against verl's ``SFTDataset``'s."""
    import importlib.util
    import os
    import tempfile

    from agent_system.environments.prompts.alfworld import ALFWORLD_TEMPLATE, ALFWORLD_TEMPLATE_NO_HIS

    from proas.integrations.verl.verl_agent import sft_examples

    rows = sft_examples("household", tasks=tasks)
    tmp = Path(tempfile.mkdtemp())
    out = {"rows": len(rows), "tasks": len({r["task_id"] for r in rows}),
           "first_is_no_history_template": rows[0]["prompt"].startswith(ALFWORLD_TEMPLATE_NO_HIS.split("{")[0]),
           "later_are_history_template": all(r["prompt"].startswith(ALFWORLD_TEMPLATE.split("{")[0])
                                             for r in rows[1:] if r["task_id"] == rows[0]["task_id"])}
    out["alfworld_same_prompts"] = None
    if importlib.util.find_spec("textworld") is not None and importlib.util.find_spec("alfworld") is not None:
        import yaml
        from omegaconf import OmegaConf

        from proas import cli

        ids = sorted({r["task_id"] for r in rows})
        assert cli.main(["household", "export", "--out", str(tmp / "alf" / "json_2.1.1"), "--logic",
                         str(tmp / "alf" / "logic"), *[a for t in ids for a in ("--task", t)]]) == 0
        os.environ["ALFWORLD_DATA"] = str(tmp / "alf")
        import agent_system.environments as ae
        from agent_system.environments.env_manager import AlfWorldEnvironmentManager
        from alfworld.agents.environment import get_environment

        from proas.integrations.verl.verl_agent import _projection

        cfg_path = Path(ae.__file__).parent / "env_package" / "alfworld" / "configs" / "config_tw.yaml"
        base = get_environment("AlfredTWEnv")(yaml.safe_load(os.path.expandvars(cfg_path.read_text())),
                                              train_eval="train")

        class OneGame:  # verl-agent's AlfworldEnvs for one env, without Ray: what its worker does
            def __init__(self, env):
                self.env, self.admissible = env, [None]

            def reset(self):
                obs, info = self.env.reset()
                info = {k: v[0] for k, v in info.items()}
                self.admissible[0] = info["admissible_commands"]
                return [obs[0]], None, [info]

            def step(self, actions):
                obs, _, dones, info = self.env.step(actions)
                info = {k: v[0] for k, v in info.items()}
                self.admissible[0] = info["admissible_commands"]
                return [obs[0]], None, [10.0 * float(info["won"])], [dones[0]], [info]

            @property
            def get_admissible_commands(self):
                return self.admissible

        same = total = won = 0
        games = sorted(base.game_files)
        for game in games:
            tid = Path(game).parent.name
            base.game_files = [game]
            env = base.init_env(batch_size=1)
            env.seed(0)
            manager = AlfWorldEnvironmentManager(OneGame(env), _projection("alfworld", "alfworld_projection"),
                                                 OmegaConf.create({"env": {"history_length": 2}}))
            obs, infos = manager.reset(kwargs=None)
            for r in (r for r in rows if r["task_id"] == tid):
                same, total = same + (obs["text"][0] == r["prompt"]), total + 1
                obs, _, _, infos = manager.step([r["response"]])
            won += bool(infos[0]["won"])
            env.close()
        out["alfworld_same_prompts"] = [same, total]
        out["alfworld_won"] = [won, len(games)]
    out["sft_dataset_same_tokens"] = None
    if importlib.util.find_spec("pandas") is not None and importlib.util.find_spec("pyarrow") is not None:
        import pandas as pd
        from verl.utils.dataset.sft_dataset import SFTDataset

        from proas.lm.model import load_tokenizer
        from proas.lm.sft_rows import RowsSFTOptions, collate, encode_row
        from proas.lm.tools import build_env_tokenizer

        build_env_tokenizer([r["prompt"] + r["response"] for r in rows], 600, tmp / "tok")
        tok = load_tokenizer(tmp / "tok")
        pd.DataFrame(rows).to_parquet(tmp / "sft.parquet")
        theirs = SFTDataset(str(tmp / "sft.parquet"), tok, {"max_length": 1024, "truncation": "error"})
        same = 0
        for i, row in enumerate(rows):
            ids, n_prompt, _ = encode_row(tok, row, RowsSFTOptions())
            labels = collate([(ids, n_prompt)], tok.pad_token_id)["labels"][0]
            item = theirs[i]
            n = int(item["attention_mask"].sum())
            # verl's loss mask marks the positions whose next token is a target
            targets = [t + 1 for t in range(n) if int(item["loss_mask"][t])]
            same += (item["input_ids"][:n].tolist() == ids
                     and targets == [t for t in range(len(ids)) if int(labels[t]) != -100])
        out["sft_dataset_same_tokens"] = [same, len(rows)]
    return out


def main(argv: list[str]) -> int:
    import tempfile

    if argv[:1] == ["--sft"]:  # verl only where pandas is (verl's SFT dataset)
        print(json.dumps(sft_report()))
        return 0

    import verl

    if argv[:1] == ["--checkpoint"]:
        print(json.dumps(checkpoint_round_trip(argv[1])))
        return 0
    out = {"verl": verl.__file__}
    if argv[:1] == ["--loop"]:
        out["loops"] = [loop_report(name) for name in ENVS]
    elif argv[:1] == ["--parity"]:
        from proas.integrations.verl.verl_agent import build_graph

        graph_path = str(Path(tempfile.mkdtemp()) / "arg.json.gz")
        build_graph("household", tasks=6).save(graph_path)
        out.update(parity(graph_path))
    else:
        print("usage: verl_agent_check.py --loop | --parity | --checkpoint RUN_DIR | --sft", file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
