"""Run verl-agent's own advantage code on a batch recorded from proas's envs, then the recipe's
ProAS step, and compare with proas's credit layer. Prints one JSON object.

Two stages, because proas's household env needs the alfworld package (the main environment has
it, the verl venv does not) and verl-agent's code needs its own ``verl`` fork:

    python tests/verl_agent_check.py --record tests/data/verl_agent_rollout.json.gz   # main env
    PYTHONPATH=$VERL_AGENT_DIR:src python tests/verl_agent_check.py tests/data/verl_agent_rollout.json.gz
    PYTHONPATH=PATCHED_COPY:src python tests/verl_agent_check.py --checkpoint RUN_DIR   # the patched trainer

The recording is committed; tests/test_recipe_verl_agent.py checks it equals a fresh one.
tests/test_verl_agent.py runs the second stage in a subprocess whose ``PYTHONPATH`` starts with
the verl-agent checkout (its ``verl`` package is verl-agent's fork, not the PyPI verl of the
other verl tests).

What runs is verl-agent's: ``to_list_of_dict`` (its rollout loop's per-step records),
``TrajectoryCollector.gather_rollout_data`` (episode rewards onto the rows),
``filter_group_data`` (DAPO's dynamic sampling), ``compute_step_discounted_returns`` (GiGPO),
``adjust_batch`` (padding copies), ``EpisodeRewardManager`` (the outcome on the last response
token), ``apply_invalid_action_penalty`` and ``compute_advantage`` (ray_trainer.py). What the
recipe's patch adds runs as the patch calls it: ``rollout_columns(infos)`` after each env step,
``trainer_credit(config).reshape(batch)`` right after ``compute_advantage``.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np

from proas.credit import SHAPINGS, ReferenceGraph, compute_credit
from proas.integrations.verl.verl_agent import rollout_columns, trainer_credit
from proas.types import Step, Trajectory

PROMPT, RESPONSE = 4, 6
MAX_STEPS = 12
GROUP = 4
PENALTY = 0.1


class SilentTokenizer:
    """EpisodeRewardManager decodes the rows to print a few; nothing is printed here."""

    def decode(self, ids, skip_special_tokens=False):
        return ""


def record_rollout(seed: int = 11) -> dict:
    """Play proas's household env through ``ProasEnvManager`` as verl-agent's rollout loop does,
    with a scripted policy mixing the oracle's actions, admissible detours, inadmissible commands
    and untagged answers; return what the env manager gave back at every step (JSON-able)."""
    from proas.envs.household import make_household_env
    from proas.integrations.verl import ProasEnvManager
    from proas.integrations.verl.verl_agent import oracle_trajectories

    rng = np.random.default_rng(seed)
    probe = make_household_env(max_steps=MAX_STEPS)
    ids = probe.task_ids("train")
    # two tasks of each of three types
    tasks = [t for kind in ("pick", "clean", "cool") for t in [i for i in ids if i.split("-")[1] == kind][:2]]
    envs = ProasEnvManager(lambda: make_household_env(max_steps=MAX_STEPS), group_n=GROUP)
    obs, infos = envs.reset(tasks)
    n = len(tasks) * GROUP
    plans = [envs.envs[i].oracle(tasks[i // GROUP]) for i in range(n)]
    progress = np.zeros(n, dtype=np.int64)
    steps = []
    for _ in range(MAX_STEPS):
        texts = []
        for i in range(n):
            u = rng.random()
            admissible = [a for a in infos[i].get("admissible", []) if a != "help"] or ["look"]
            if u < 0.6 and progress[i] < len(plans[i]):
                act, progress[i] = plans[i][progress[i]], progress[i] + 1
                texts.append(f"<think>plan</think><action>{act}</action>")
            elif u < 0.8:
                texts.append(f"<think>detour</think><action>{admissible[int(rng.integers(len(admissible)))]}</action>")
            elif u < 0.9:
                texts.append("<think>hm</think><action>juggle the fridge</action>")
            else:
                texts.append("go to the moon")  # no tags: format-invalid (verl-agent's penalty)
        anchors = list(obs["anchor"])
        obs, rewards, dones, infos = envs.step(texts)
        steps.append({
            "anchor": anchors, "reward": [float(r) for r in rewards], "done": [bool(d) for d in dones],
            "info": [{"is_action_valid": bool(info["is_action_valid"]),
                      **({"proas": info["proas"]} if "proas" in info else {})} for info in infos],
        })
        if all(dones):
            break
    oracle, _ = oracle_trajectories(probe, tasks[:3])
    return {"tasks": tasks, "group": GROUP, "steps": steps, "success": [bool(x) for x in envs.success()],
            "oracle": [t.to_json() for t in oracle]}


def replay(rec: dict, seed: int = 11):
    """verl-agent's rollout loop over the recording: per step the rows' tensors, uid / traj_uid,
    then what the loop stores after ``envs.step`` (is_action_valid, rewards, active_masks) and the
    patch's ``rollout_columns(infos)``, kept with verl-agent's ``to_list_of_dict``."""
    import torch
    from agent_system.multi_turn_rollout.utils import to_list_of_dict
    from verl import DataProto

    rng = np.random.default_rng(seed)
    n = len(rec["tasks"]) * rec["group"]
    uid = np.repeat(np.array([f"uid-{k}" for k in range(len(rec["tasks"]))], dtype=object), rec["group"])
    traj_uid = np.array([f"traj-{i}" for i in range(n)], dtype=object)
    done = np.zeros(n, dtype=bool)
    total = [[] for _ in range(n)]
    raw = [[] for _ in range(n)]  # (anchor, reward, info) per executed step, for the reference
    episode_rewards = np.zeros(n, dtype=np.float32)
    episode_lengths = np.zeros(n, dtype=np.float32)
    for step in rec["steps"]:
        active = ~done
        lengths = torch.as_tensor(rng.integers(1, RESPONSE + 1, size=n))
        resp_mask = (torch.arange(RESPONSE)[None, :] < lengths[:, None]).to(torch.int64)
        attention = torch.cat([torch.ones(n, PROMPT, dtype=torch.int64), resp_mask], dim=1)
        batch = DataProto.from_dict(
            tensors={
                "prompts": torch.ones(n, PROMPT, dtype=torch.int64),
                "responses": torch.ones(n, RESPONSE, dtype=torch.int64),
                "input_ids": torch.ones(n, PROMPT + RESPONSE, dtype=torch.int64),
                "attention_mask": attention,
                "position_ids": torch.cumsum(attention, dim=1) - 1,
            },
            non_tensors={"anchor_obs": np.array(step["anchor"], dtype=object),
                         "data_source": np.array(["proas/household"] * n, dtype=object)},
        )
        batch.non_tensor_batch["uid"] = uid
        batch.non_tensor_batch["traj_uid"] = traj_uid
        rewards, dones, infos = np.array(step["reward"], dtype=np.float32), np.array(step["done"]), step["info"]
        # as verl-agent's vanilla_multi_turn_loop stores them
        batch.non_tensor_batch["is_action_valid"] = np.array([info["is_action_valid"] for info in infos], dtype=bool)
        episode_rewards[active] += rewards[active]
        episode_lengths[active] += 1
        batch.non_tensor_batch["rewards"] = rewards.astype(object)
        batch.non_tensor_batch["active_masks"] = active.astype(object)
        batch.non_tensor_batch.update(rollout_columns(infos))  # the patch's line
        for i, row in enumerate(to_list_of_dict(batch)):
            total[i].append(row)
            if active[i]:
                raw[i].append((step["anchor"][i], float(rewards[i]), infos[i]))
        done |= dones
    success = {"success_rate": np.array(rec["success"], dtype=np.float64)}
    tool_callings = np.zeros(n, dtype=np.float32)
    return total, raw, episode_rewards, episode_lengths, success, traj_uid, uid, tool_callings


def reference_trajectories(raw, episode_rewards, traj_uid, uid, keep):
    """The same episodes as proas trajectories, built from the env's own infos (not from rows)."""
    out = []
    for i in keep:
        steps = [Step(info["proas"]["abstract_state"], info["proas"]["action"], info["proas"]["next_abstract_state"],
                      error=bool(info["proas"]["env_error"]), anchor=anchor, reward=r)
                 for anchor, r, info in raw[i]]
        out.append(Trajectory(uid[i], traj_uid[i], float(episode_rewards[i]), steps))
    return out


def config(adv, estimator, shaping, mode, graph_path, divisor, filter_groups, n_tasks):
    from omegaconf import OmegaConf

    return OmegaConf.create({
        "algorithm": {"adv_estimator": adv, "gamma": 0.95, "norm_adv_by_std_in_grpo": True, "use_kl_in_reward": False,
                      "gigpo": {"mode": mode, "step_advantage_w": 1.0},
                      "filter_groups": {"enable": filter_groups}},
        "actor_rollout_ref": {"actor": {"use_invalid_action_penalty": True, "invalid_action_penalty_coef": PENALTY,
                                        "use_kl_loss": True, "ppo_micro_batch_size_per_gpu": divisor,
                                        "ppo_mini_batch_size": divisor},
                              "rollout": {"log_prob_micro_batch_size_per_gpu": divisor},
                              "ref": {"log_prob_micro_batch_size_per_gpu": divisor}},
        "trainer": {"n_gpus_per_node": 1, "nnodes": 1},
        "data": {"train_batch_size": n_tasks},
        "env": {"rollout": {"n": GROUP}},
        "proas": {"enable": True, "graph": graph_path, "estimator": estimator, "shaping": shaping,
                  "estimator_options": {"group_stats": "steps"}, "seed": 7, "rea": "transition",
                  "invalid_action_penalty": None, "columns": {"error": "env_error"}},
    })


def train_step(recorded, cfg, shuffle_seed):
    """The trainer's fit() from the rollout to the ProAS step, with verl-agent's functions."""
    import torch
    from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
    from agent_system.multi_turn_rollout.utils import adjust_batch, filter_group_data
    from agent_system.reward_manager.episode import EpisodeRewardManager
    from gigpo import core_gigpo
    from verl.trainer.ppo import ray_trainer

    total, raw, ep_r, ep_l, success, traj_uid, _, tool = recorded
    keep = np.arange(len(total))
    if cfg.algorithm.filter_groups.enable:
        # DAPO's dynamic sampling drops whole groups whose rewards are all equal
        total, ep_r, ep_l, success, traj_uid, tool = filter_group_data(total, ep_r, ep_l, success, traj_uid, tool, cfg)
        kept = set(traj_uid)
        keep = np.array([i for i in range(len(raw)) if recorded[5][i] in kept], dtype=np.int64)
    batch = TrajectoryCollector.gather_rollout_data(None, total, ep_r, ep_l, success, traj_uid, tool)
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
    return batch, verl_agent_adv, credit, keep, n_pad


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


def main(argv: list[str]) -> int:
    import tempfile

    if argv[:1] == ["--record"]:
        data = json.dumps(record_rollout(), sort_keys=True).encode("utf-8")
        Path(argv[1]).parent.mkdir(parents=True, exist_ok=True)
        Path(argv[1]).write_bytes(gzip.compress(data, mtime=0))
        return 0
    if argv[:1] == ["--checkpoint"]:
        print(json.dumps(checkpoint_round_trip(argv[1])))
        return 0
    import torch
    import verl

    rec = json.loads(gzip.decompress(Path(argv[0]).read_bytes()))
    tasks = rec["tasks"]
    tmp = Path(tempfile.mkdtemp())
    graph_path = str(tmp / "arg.json.gz")
    ReferenceGraph.from_trajectories([Trajectory.from_json(t) for t in rec["oracle"]]).save(graph_path)
    recorded = replay(rec)
    results = {"verl_agent_parity": [], "credit_parity": [], "verl": verl.__file__}

    def step_index_of(batch, trajs):
        index = {(t.trajectory, k): s for s, (t, k) in enumerate((t, k) for t in trajs for k in range(len(t)))}
        nt = batch.non_tensor_batch
        return np.array([index[(nt["traj_uid"][r], int(nt["step_index"][r]))] for r in range(len(batch))])

    cases = [("grpo", "grpo", "mean_norm", False), ("grpo", "dapo", "mean_norm", True),
             ("gigpo", "gigpo", "mean_norm", False), ("gigpo", "gigpo", "mean_std_norm", False)]
    # (1) shaping none, no padding: ProAS's base is verl-agent's own advantage, penalty included
    for adv, est, mode, dapo in cases:
        cfg = config(adv, est, "none", mode, graph_path, 1, dapo, len(tasks))
        batch, theirs, credit, keep, n_pad = train_step(recorded, cfg, shuffle_seed=3)
        diff = float((batch.batch["advantages"] - theirs).abs().max())
        invalid = int((~batch.non_tensor_batch["is_action_valid"].astype(bool)).sum())
        results["verl_agent_parity"].append({"estimator": est, "mode": mode, "rows": len(batch), "pad": n_pad,
                                             "max_abs_diff": diff,
                                             "invalid_rows": invalid,
                                             "nonzero": float(theirs.abs().sum())})
    # (2) every shaping, with verl-agent's padding copies: the ProAS step equals compute_credit
    for adv, est, mode, dapo in cases:
        for shaping in SHAPINGS:
            cfg = config(adv, est, shaping, mode, graph_path, 7, dapo, len(tasks))
            batch, _, credit, keep, n_pad = train_step(recorded, cfg, shuffle_seed=5)
            _, raw, ep_r, _, _, traj_uid, uid, _ = recorded
            trajs = reference_trajectories(raw, ep_r, traj_uid, uid, keep)
            # the order the hook met the trajectories in (first row after the shuffle): the random
            # ablation draws its labels in step order, so it needs the same order to agree
            order = {t.trajectory: k for k, t in enumerate(credit.last_layout.trajectories)}
            trajs.sort(key=lambda t: order[t.trajectory])
            by_id = {traj_uid[i]: i for i in keep}
            invalid = np.array([not info["is_action_valid"] for t in trajs for _, _, info in raw[by_id[t.trajectory]]],
                               dtype=np.float64)
            options = {"group_stats": "steps", "step_penalty": PENALTY * invalid}
            if est == "gigpo":
                options.update(gamma=0.95, mode=mode, step_weight=1.0)
            else:
                options.update(norm_by_std=True)
            ref = compute_credit(trajs, ReferenceGraph.load(graph_path), estimator=est, shaping=shaping,
                                 estimator_options=options, seed=7, evolve=True, rea="transition")
            plain = compute_credit(trajs, ReferenceGraph.load(graph_path), estimator=est, shaping="none",
                                   estimator_options=options, seed=7, evolve=True, rea="transition")
            want = torch.as_tensor(ref.advantage[step_index_of(batch, trajs)], dtype=torch.float32)[:, None]
            want = want * batch.batch["response_mask"]
            diff = float((batch.batch["advantages"] - want).abs().max())
            results["credit_parity"].append({"estimator": est, "mode": mode, "shaping": shaping, "rows": len(batch),
                                             "pad": n_pad, "max_abs_diff": diff,
                                             "changed": bool(not np.allclose(ref.advantage, plain.advantage))})
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
