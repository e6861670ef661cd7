"""From-scratch lm models: a tokenizer trained on an env's own text, and a random model directory
that carries it (``proas lm tokenizer`` / ``proas lm new-model``)."""

import json

import numpy as np
import pytest
import torch

from proas.baselines.sft import oracle_examples
from proas.cli import main as proas_main
from proas.cli.lm import env_tokenizer
from proas.envs import make
from proas.errors import ProasError
from proas.lm.model import load_tokenizer, local_tokenizer
from proas.lm.policy import LMPolicy
from proas.lm.prompt import build_prompt, score_response
from proas.lm.tools import new_model_dir
from proas.train.config import build_config

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def household_val_contexts():
    env = make("household")
    ex, _ = oracle_examples(env, list(env.task_ids("valid"))[:6], env_label="household", max_steps=50)
    return [c for c, _ in ex]


def mean_len(tok, contexts):
    return float(np.mean([len(tok(build_prompt(c), add_special_tokens=False)["input_ids"]) for c in contexts]))


@pytest.mark.parametrize("span, at_most", [("line", 0.25), ("word", 0.75)])
def test_an_env_tokenizer_makes_prompts_much_shorter_and_decodes_exactly(tmp_path, household_val_contexts, span,
                                                                         at_most):
    cfg = build_config(["env=household"])
    tok = env_tokenizer(cfg, 2048, tmp_path / "tok", max_tasks=60, span=span)
    # validation prompts (tasks the tokenizer never saw) against the local fallback tokenizer;
    # measured: about 0.13 (line) and 0.6 (word)
    ratio = mean_len(tok, household_val_contexts) / mean_len(local_tokenizer(1024), household_val_contexts)
    assert ratio < at_most, ratio
    texts = [build_prompt(c) for c in household_val_contexts[:10]] + [
        score_response("put the mug 2 in/on coffeemachine 1"), "café ☃ naïve — 東京 \t tabs\n\nand  spaces "]
    for text in texts:
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    # saved with its chat template and reloaded as it was trained
    again = load_tokenizer(str(tmp_path / "tok"))
    assert [again(t)["input_ids"] for t in texts] == [tok(t)["input_ids"] for t in texts]
    assert again.chat_template == tok.chat_template and again.eos_token == "<|im_end|>"
    meta = json.loads((tmp_path / "tok" / "proas_tokenizer.json").read_text())
    assert meta["env"] == "household" and meta["span"] == span and meta["max_tasks"] == 60


def test_a_from_scratch_model_directory_loads_as_an_lm_policy(tmp_path):
    assert proas_main(["lm", "tokenizer", "--env", "household", "--vocab", "600", "--max-tasks", "10",
                       "--out", str(tmp_path / "tok")]) == 0
    assert proas_main(["lm", "new-model", "--tokenizer", str(tmp_path / "tok"), "--size", "tiny", "--layers", "1",
                       "--out", str(tmp_path / "m")]) == 0
    tok = load_tokenizer(str(tmp_path / "tok"))
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert cfg["vocab_size"] == len(tok) and cfg["num_hidden_layers"] == 1 and cfg["hidden_size"] == 64
    for mode in ("generate", "score"):
        c = build_config(["policy=lm", f"policy.lm.model_path={tmp_path / 'm'}", f"policy.lm.mode={mode}",
                          "policy.lm.max_new_tokens=4"])
        p = LMPolicy.from_config(c.policy.lm)
        assert p.module.get_input_embeddings().weight.shape[0] == len(tok)
        from proas.policies.base import Context

        ctx = Context("household", "put a mug in coffeemachine", "You arrive at countertop 1.", [],
                      ["go to coffeemachine 1", "take mug 1 from countertop 1"], [], 0)
        d = p.act([ctx], np.random.default_rng(0), temperature=1.0)[0]
        assert p.tokenizer.decode(d.data["prompt"]).startswith("<|im_start|>user\nYou are an expert agent")
        if mode == "score":
            assert d.action in ctx.admissible
    # the same seed gives the same weights; a used directory is refused
    other = new_model_dir(tmp_path / "tok", tmp_path / "m2", "tiny", num_hidden_layers=1)
    for k, v in other.state_dict().items():
        assert torch.equal(v, p.module.state_dict()[k]), k
    with pytest.raises(ProasError, match="not empty"):
        new_model_dir(tmp_path / "tok", tmp_path / "m2", "tiny")
    with pytest.raises(ProasError, match="not one of"):
        new_model_dir(tmp_path / "tok", tmp_path / "m3", "huge")
    assert proas_main(["lm", "tokenizer", "--env", "household", "--out", str(tmp_path / "tok")]) == 2
