"""The lm policy on CPU with a tiny random Qwen2 model and a tokenizer built locally."""

import numpy as np
import pytest
import torch

from proas.errors import ProasError
from proas.policies.base import Context
from proas.policies.lm import LMPolicy, build_prompt, project_action
from proas.train.config import build_config

torch.set_num_threads(1)


def ctx(step=3):
    history = [(f"obs {k}", f"go to desk {k}") for k in range(step)]
    return Context("household", "put some key on bed", "You arrive at desk 1.", history,
                   ["go to bed 1", "take key 1 from desk 1", "help"], [], step)


def tiny(**over):
    cfg = build_config(["policy=lm", "policy.lm.model_config=tiny", "policy.lm.max_new_tokens=12",
                        *[f"policy.lm.{k}={v}" for k, v in over.items()]])
    return LMPolicy.from_config(cfg.policy.lm, seed=0)


@pytest.mark.parametrize(
    "text, action, malformed",
    [
        ("<think>the key is here</think><action>take key 1 from desk 1</action>", "take key 1 from desk 1", False),
        ("<think>x</think> <action> Go To Bed 1 </action> trailing", "go to bed 1", False),
        ("<action>go to bed 1</action>", "go to bed 1", True),  # no <think> block
        ("<think>x</think><action></action>", "", True),  # empty action
        ("I will go to the bed", "i will go to the bed"[-30:], True),  # no tags: last 30 characters
    ],
)
def test_projection_follows_verl_agent(text, action, malformed):
    assert project_action(text, "household") == (action, malformed)


def test_projection_keeps_case_outside_household():
    assert project_action("<think>.</think><action>click[Buy Now]</action>", "shop") == ("click[Buy Now]", False)


def test_prompt_holds_task_last_two_pairs_admissible_and_format():
    text = build_prompt(ctx(step=3), history_length=2)
    assert "Your task is to: put some key on bed" in text
    assert "'go to desk 0'" not in text  # only the last two pairs
    assert "[Observation 2: 'obs 1', Action 2: 'go to desk 1']" in text
    assert "[Observation 3: 'obs 2', Action 3: 'go to desk 2']" in text
    assert "'take key 1 from desk 1'" in text and "'help'" not in text
    assert "<think>" in text and "<action>" in text
    assert "Observation" not in build_prompt(ctx(step=0))  # step 0: no history block


def test_tiny_model_acts_and_evaluate_reproduces_rollout_log_probs():
    p = tiny()
    torch.manual_seed(0)
    decisions = p.act([ctx(), ctx(step=1)], np.random.default_rng(0), temperature=1.0)
    assert len(decisions) == 2
    for d in decisions:
        assert 1 <= len(d.data["response"]) <= 12
        assert d.malformed  # a random model does not write the tags
    batch = p.prepare([d.data for d in decisions])
    with torch.no_grad():
        st = p.evaluate(batch)
    assert st.logp.shape == st.mask.shape == (2, max(len(d.data["response"]) for d in decisions))
    assert st.mask.sum(1).tolist() == [len(d.data["response"]) for d in decisions]
    sums = (st.logp * st.mask).sum(1).tolist()
    assert sums == pytest.approx([d.logp for d in decisions], abs=1e-3)
    assert bool((st.entropy > 0).all())


def test_greedy_decoding_is_deterministic():
    p = tiny()
    a = p.act([ctx()], np.random.default_rng(0), temperature=0)[0]
    b = p.act([ctx()], np.random.default_rng(1), temperature=0)[0]
    assert a.data["response"] == b.data["response"]


def test_lora_trains_only_adapters_and_its_reference_is_the_base_model():
    p = tiny(lora_rank=4)
    names = [n for n, q in p.module.named_parameters() if q.requires_grad]
    assert names and all("lora" in n for n in names)
    d = p.act([ctx()], np.random.default_rng(0))[0]
    batch = p.prepare([d.data])
    ref = p.reference_module()
    with torch.no_grad():
        for q in p.parameters():  # move the adapters away from their zero start
            q.add_(0.5)
        live = p.evaluate(batch).logp
        base = p.evaluate(batch, module=ref).logp
        with p.module.disable_adapter():
            expected = p.evaluate(batch).logp
    assert torch.allclose(base, expected)
    assert not torch.allclose(live, base)


def test_a_local_model_directory_loads_without_network(tmp_path):
    p = tiny()
    p.module.save_pretrained(tmp_path)
    p.tokenizer.save_pretrained(tmp_path)
    cfg = build_config(["policy=lm", f"policy.lm.model_path={tmp_path}", "policy.lm.max_new_tokens=4"])
    q = LMPolicy.from_config(cfg.policy.lm)
    for x, y in zip(p.module.parameters(), q.module.parameters()):
        assert torch.equal(x, y)


def test_a_missing_model_directory_is_a_clear_error(tmp_path):
    cfg = build_config(["policy=lm", f"policy.lm.model_path={tmp_path / 'none'}"])
    with pytest.raises(ProasError, match="cannot load a local model"):
        LMPolicy.from_config(cfg.policy.lm)
