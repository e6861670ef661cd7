"""lm RL on a CUDA GPU (skipped without one): the trainer's update with the policy on the GPU.

Score mode reuses the rollout's log-probs (kept on the CPU) as PPO's old log-probs; on a GPU they
once stayed on the CPU and every lm RL run failed its first update (fixed in commit 42e679a; the
CPU tests could not see it). Here one RL step runs on the toy env (tests/toy_env.py) with a tiny
lm on CUDA, with the KL anchor to the start, in score and generate mode."""

import numpy as np
import pytest
import torch

from proas.train.config import build_config

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

#: a trainer on the toy env with a tiny lm on the GPU (as tests/test_lm_training.py's TOY_SCORE, on CUDA)
TOY_CUDA = ["env.name=toy_env:make_env", "env.options.n_places=2", "env.options.max_steps=4", "env.options.n_train=8",
            "env.options.n_valid=2", "env.tasks_per_step=2", "env.group_size=2", "train.progress=false",
            "policy=lm", "policy.lm.model_config=tiny", "policy.lm.device=cuda", "algo.kl_coef=0.01",
            "policy.lm.lr=1e-3", "policy.lm.max_new_tokens=16", "train.steps=2"]


@pytest.mark.parametrize("mode", ["score", "generate"])
def test_an_lm_rl_step_on_cuda_updates_the_weights(tmp_path, mode):
    from proas.train.loop import Trainer

    t = Trainer(build_config(TOY_CUDA + [f"policy.lm.mode={mode}"]), tmp_path)
    params = list(t.policy.parameters())
    assert params and all(q.is_cuda for q in params)
    before = [q.detach().clone() for q in params]
    rec = t.train_step()
    assert rec["loss/grad_norm"] > 0, rec
    assert np.isfinite(rec["loss/kl"]), rec
    assert any(not torch.equal(a, b) for a, b in zip(before, t.policy.parameters()))
