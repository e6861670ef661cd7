"""The lm policy on CPU with a tiny random Qwen2 model and a tokenizer built locally."""

import dataclasses
import re

import numpy as np
import pytest
import torch

from proas.errors import ProasError
from proas.lm.policy import LMPolicy
from proas.lm.prompt import build_prompt, project_action
from proas.policies.base import Context
from proas.train.config import build_config

torch.set_num_threads(1)


def _ctx_with(step, admissible, invalid=()):
    history = [(f"obs {k}", f"go to desk {k}") for k in range(step)]
    return Context("household", "put some key on bed", "You arrive at desk 1.", history, list(admissible),
                   list(invalid), step)


def ctx(step=3):
    return _ctx_with(step, ["go to bed 1", "take key 1 from desk 1", "help"])


def tiny(**over):
    # CPU unless told, also on a GPU machine (device=auto would take cuda, with bf16 autocast)
    over = {"device": "cpu", **over}
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
        assert torch.equal(x.detach().cpu(), y.detach().cpu())  # device=auto: q may sit on a GPU
    # the tokenizer comes back as saved: AutoTokenizer alone would give it the pre-tokenizer of the
    # model's class (Qwen2's) and other token ids
    text = build_prompt(ctx()) + "<think>x</think><action>go to desk 1</action>"
    assert q.tokenizer(text)["input_ids"] == p.tokenizer(text)["input_ids"]


def test_a_missing_model_directory_is_a_clear_error(tmp_path):
    cfg = build_config(["policy=lm", f"policy.lm.model_path={tmp_path / 'none'}"])
    with pytest.raises(ProasError, match="cannot load a local model"):
        LMPolicy.from_config(cfg.policy.lm)


# ---- score mode (GLAM): choose among the candidate actions by their likelihood

def scored(**over):
    return tiny(mode="score", **over)


#: a trainer on the toy env (tests/toy_env.py) with a tiny score-mode lm
TOY_SCORE = ["env.name=toy_env:make_env", "env.options.n_places=2", "env.options.max_steps=4", "env.options.n_train=8",
             "env.options.n_valid=2", "env.tasks_per_step=2", "env.group_size=2", "train.progress=false",
             "policy=lm", "policy.lm.model_config=tiny", "policy.lm.mode=score", "policy.lm.device=cpu"]


def full_forward_logp(p, prompt, cand):
    """The candidate's summed token log-probs from one plain forward pass over prompt + candidate."""
    ids = torch.tensor([prompt + cand])
    with torch.no_grad():
        logp = torch.log_softmax(p.module(input_ids=ids).logits[0].float(), dim=-1)
    return sum(float(logp[len(prompt) - 1 + j, t]) for j, t in enumerate(cand))


def test_score_mode_candidate_log_probs_equal_a_plain_forward_pass():
    p = scored()
    contexts = [ctx(step=3), ctx(step=0)]  # prompts of different lengths: the padding is exercised
    made = [p.score_item(c) for c in contexts]
    cands, prompt, resp = made[0]
    assert cands == ["go to bed 1", "take key 1 from desk 1", "help"]  # admissible + invalid, in order
    # the shared response prefix moved into the prompt; each candidate keeps its own tokens + end
    text = p.tokenizer.decode(prompt[-3:] + resp[1], skip_special_tokens=True)
    assert text.endswith("<action>take key 1 from desk 1</action>")
    assert all(r[-1] == p.stop_ids[0] for r in resp) and len({tuple(r) for r in resp}) == 3
    p.module.eval()
    with torch.no_grad():
        got = p.candidate_logps([(pr, rs) for _, pr, rs in made])
    for (_, pr, rs), sums in zip(made, got):
        assert sums.shape == (len(rs),)
        for k, r in enumerate(rs):
            assert float(sums[k]) == pytest.approx(full_forward_logp(p, pr, r), abs=1e-5)


def test_score_mode_policy_is_the_candidate_softmax_at_the_policy_temperature():
    p = scored()
    c = Context("household", "put some key on bed", "You arrive at desk 1.", [], ["go to bed 1"],
                ["take key 1 from bed 1"], 0)
    cands, prompt, resp = p.score_item(c)
    s = [full_forward_logp(p, prompt, r) for r in resp]
    # a temperature that puts the two candidates 0.8 apart in the softmax: p(first) = sigmoid(+-0.8)
    p.temperature = abs(s[1] - s[0]) / 0.8
    lp = [-np.logaddexp(0.0, (s[1] - s[0]) / p.temperature), -np.logaddexp(0.0, (s[0] - s[1]) / p.temperature)]
    assert np.exp(lp).tolist() == pytest.approx(sorted([1 / (1 + np.exp(0.8)), 1 / (1 + np.exp(-0.8))],
                                                       reverse=s[0] > s[1]))
    batch = p.prepare([{"prompt": prompt, "cands": resp, "choice": 0}, {"prompt": prompt, "cands": resp, "choice": 1}])
    with torch.no_grad():
        st = p.evaluate(batch)
    assert st.logp.shape == st.mask.shape == (2, 1) and st.mask.sum() == 2
    assert st.logp[:, 0].tolist() == pytest.approx(lp, abs=1e-5)
    h = -sum(np.exp(x) * x for x in lp)
    assert st.entropy[:, 0].tolist() == pytest.approx([h, h], abs=1e-5)
    # acting: the rollout log-prob is the loss's; greedy takes the likelier; sampling at
    # temperature T draws with frequency softmax(s / T)
    d = p.act([c], np.random.default_rng(0), temperature=0)[0]
    k = int(s[1] > s[0])
    assert d.action == cands[k] and d.data["choice"] == k and not d.malformed
    assert d.logp == pytest.approx(lp[k], abs=1e-5)
    rng = np.random.default_rng(1)
    draws = [p.act([c], rng, temperature=p.temperature)[0].data["choice"] for _ in range(300)]
    assert draws.count(0) / 300 == pytest.approx(np.exp(lp[0]), abs=0.08)


def test_score_mode_gradients_flow_through_the_prompt_and_the_candidate_tokens():
    p = scored()
    c = ctx(step=1)
    d = p.act([c], np.random.default_rng(0), temperature=1.0)[0]
    # choose the least likely candidate: a random model is near-certain of its favourite, whose
    # log-prob (about 0) has no gradient to speak of
    with torch.no_grad():
        d.data["choice"] = int(torch.argmin(p.candidate_logps([(d.data["prompt"], d.data["cands"])])[0]))
    batch = p.prepare([d.data])
    st = p.evaluate(batch)
    (-st.logp.sum()).backward()
    emb = p.module.get_input_embeddings().weight.grad
    prompt_only = set(d.data["prompt"]) - {t for r in d.data["cands"] for t in r}
    assert prompt_only and all(emb[t].abs().sum() > 0 for t in prompt_only)  # through the prompt's keys and values
    head = p.module.get_output_embeddings().weight.grad
    chosen = d.data["cands"][d.data["choice"]]
    assert all(head[t].abs().sum() > 0 for t in chosen)  # the logit of each of its tokens moves
    # the gradient is the one of the same loss built from plain full forward passes
    cached = {n: q.grad.clone() for n, q in p.module.named_parameters()}
    p.module.zero_grad()
    sums = []
    for r in d.data["cands"]:
        ids = torch.tensor([d.data["prompt"] + r])
        lp = torch.log_softmax(p.module(input_ids=ids).logits[0].float(), dim=-1)
        n0 = len(d.data["prompt"]) - 1
        sums.append(sum(lp[n0 + j, t] for j, t in enumerate(r)))
    (-torch.log_softmax(torch.stack(sums) / p.temperature, dim=0)[d.data["choice"]]).backward()
    for n, q in p.module.named_parameters():
        assert torch.allclose(q.grad, cached[n], atol=1e-5, rtol=1e-3), n
    # a step on -log p(chosen) raises the chosen candidate's own summed token log-prob
    before = full_forward_logp(p, d.data["prompt"], d.data["cands"][d.data["choice"]])
    opt = torch.optim.SGD(p.parameters(), lr=1e-3)
    opt.step()
    after = full_forward_logp(p, d.data["prompt"], d.data["cands"][d.data["choice"]])
    assert after > before
    with torch.no_grad():
        assert float(p.evaluate(batch).logp) > float(st.logp)


def test_score_mode_needs_admissible_actions():
    p = scored()
    c = Context("shop", "buy shoes", "search page", [], None, [], 0)
    with pytest.raises(ProasError, match="admissible"):
        p.act([c], np.random.default_rng(0))


@pytest.mark.parametrize("lora", [0, 4])
def test_the_trainer_runs_a_step_in_score_mode(tmp_path, lora):
    from proas.train.loop import Trainer

    c = build_config(TOY_SCORE + ["policy.lm.lr=1e-3", "algo.kl_coef=0.01", "policy.temperature=0.7",
                                  f"policy.lm.lora_rank={lora}"])
    t = Trainer(c, tmp_path)
    assert t.policy.temperature == 0.7
    before = [q.detach().clone() for q in t.policy.parameters()]
    rec = t.train_step()
    assert rec["step"] == 1 and rec["loss/updates"] >= 1
    assert rec["loss/entropy"] > 0 and rec["train/error_rate"] < 1.0
    assert any(not torch.equal(a, b) for a, b in zip(before, t.policy.parameters()))
    assert rec["train/trajectories"] == 4
    # the KL reference (a frozen copy, or the adapters switched off) scores on its own cache
    # path: before any update it agrees with the policy, after one it differs
    d = t.policy.act([ctx()], np.random.default_rng(0))[0]
    with torch.no_grad():  # the least likely candidate: the favourite's log-prob is about 0 under both
        d.data["choice"] = int(torch.argmin(t.policy.candidate_logps([(d.data["prompt"], d.data["cands"])])[0]))
        live = t.policy.evaluate(t.policy.prepare([d.data])).logp
        ref = t.policy.evaluate(t.policy.prepare([d.data]), module=t.ref).logp
    assert ref.shape == live.shape == (1, 1) and not torch.allclose(live, ref, atol=1e-7)


def test_an_lm_trainer_keeps_a_kl_reference_unless_told_not_to(tmp_path):
    from proas.train.loop import Trainer

    toy = TOY_SCORE + ["policy.lm.lr=1e-2"]
    t = Trainer(build_config(toy), tmp_path / "a")
    assert t.kl_coef == 0.01 and t.ref is not None
    t.train_step()
    rec = t.train_step()  # after an update the policy has left its reference: the KL term is live
    assert rec["loss/kl"] > 0
    off = Trainer(build_config(toy + ["algo.kl_coef=0"]), tmp_path / "b")
    assert off.kl_coef == 0.0 and off.ref is None


def test_score_mode_reuses_the_rollout_log_probs_as_the_old_log_probs(tmp_path, monkeypatch):
    from proas.train.loop import Trainer

    assert not tiny().exact_rollout_logp  # generate mode recomputes them, as verl does
    c = build_config(TOY_SCORE + ["policy.lm.lr=1e-3", "policy.temperature=0.7"])
    t = Trainer(c, tmp_path)
    assert t.policy.exact_rollout_logp
    calls = []
    real = t.policy.evaluate

    def spy(batch, module=None):
        calls.append((module is None, torch.is_grad_enabled()))
        return real(batch, module)

    monkeypatch.setattr(t.policy, "evaluate", spy)
    rec = t.train_step()
    # the policy's own passes all carry gradients (no separate old-log-prob pass); the KL
    # reference's passes do not
    assert [g for own, g in calls if own] and all(g for own, g in calls if own)
    assert any(not own and not g for own, g in calls)
    # one mini-batch: the policy is still the rollout's, so no ratio is clipped
    assert rec["loss/updates"] == 1 and rec["loss/clipfrac"] == 0.0


def test_lm_mode_is_checked():
    with pytest.raises(ProasError, match="policy.lm.mode"):
        build_config(["policy=lm", "policy.lm.model_config=tiny", "policy.lm.mode=guess"])


# ---- the prompt budget and cut responses

def long_ctx():
    words = " ".join(f"w{k}" for k in range(150))
    history = [(f"old observation {k}: {words}", f"go to desk {k}") for k in range(3)]
    obs = "You arrive at desk 1. START " + words + " END of the page."
    return Context("household", "put some key on bed", obs, history, ["go to bed 1", "take key 1 from desk 1"], [], 3)


def test_an_over_long_prompt_loses_the_oldest_history_first():
    p = tiny()
    c = long_ctx()
    full, one = p._chat_ids(c, 2), p._chat_ids(c, 1)
    p.max_prompt_tokens = len(full)
    assert p.fit_prompt(c) == (full, False)  # it fits: untouched
    p.max_prompt_tokens = len(full) - 1
    ids, trimmed = p.fit_prompt(c)
    assert trimmed and ids == one  # exactly one pair, the oldest shown, is gone
    text = p.tokenizer.decode(ids)
    assert "Action 3: 'go to desk 2'" in text and "Action 2: 'go to desk 1'" not in text
    assert text.startswith("<|im_start|>user\n")  # the start of the prompt is kept


def test_then_the_middle_of_the_observation_is_cut_with_a_marker_never_the_task_or_instructions():
    p = tiny()
    c = long_ctx()
    bare = p._chat_ids(c, 0)
    p.max_prompt_tokens = len(bare) - 60
    ids, trimmed = p.fit_prompt(c)
    assert trimmed and p.max_prompt_tokens - 12 <= len(ids) <= p.max_prompt_tokens  # no more cut than needed
    text = p.tokenizer.decode(ids)
    for kept in ("Your task is to: put some key on bed", "You arrive at desk 1. START w0 w1",
                 "END of the page.", "'take key 1 from desk 1'", "<think> </think>", "<action> </action>"):
        assert kept in text, kept
    assert "Observation 3" not in text  # the history went first
    marker = re.search(r"\[\.\.\. (\d+) tokens cut \.\.\.\]", text)
    assert marker
    # the number is the observation tokens that left: those of the full prompt minus those kept
    obs_full = len(p.tokenizer(c.observation, add_special_tokens=False)["input_ids"])
    head, tail = text.split("Current observation: ")[1].split(marker.group(0))
    tail = tail.split("\n\nAdmissible")[0]
    kept_tokens = len(p.tokenizer(head.rstrip(" "), add_special_tokens=False)["input_ids"]) + len(
        p.tokenizer(tail.lstrip(" "), add_special_tokens=False)["input_ids"])
    assert abs(int(marker.group(1)) - (obs_full - kept_tokens)) <= 2  # up to a token re-merged at each seam


def test_a_budget_below_the_fixed_parts_is_a_clear_error():
    p = tiny()
    p.max_prompt_tokens = 40
    with pytest.raises(ProasError, match="max_prompt_tokens=40: the task, admissible actions and instructions"):
        p.fit_prompt(long_ctx())


def test_responses_cut_by_the_token_budget_are_flagged_and_warned_about_once():
    import warnings

    p = tiny(max_new_tokens=2)  # a random model almost never ends within 2 tokens
    with pytest.warns(RuntimeWarning, match="max_new_tokens=2"):
        d = p.act([ctx()], np.random.default_rng(0), temperature=0)
    assert d[0].data["truncated"] and len(d[0].data["response"]) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert p.act([ctx()], np.random.default_rng(0), temperature=0)[0].data["truncated"]  # no second warning
    # a model made to end at once: not truncated
    p.module.generation_config.sequence_bias = {(p.stop_ids[0],): 100.0}
    d = p.act([ctx()], np.random.default_rng(0), temperature=0)[0]
    assert d.data["response"] == [p.stop_ids[0]] and not d.data["truncated"]


@pytest.mark.parametrize("end_at_once", [False, True])
def test_the_trainer_reports_truncated_responses_and_trimmed_prompts(tmp_path, end_at_once):
    from proas.train.loop import Trainer

    c = build_config(["env.name=toy_env:make_env", "env.options.n_places=2", "env.max_steps=3",
                      "env.options.n_train=8", "env.options.n_valid=2", "env.tasks_per_step=2", "env.group_size=2",
                      "train.progress=false", "policy=lm", "policy.lm.model_config=tiny", "policy.lm.max_new_tokens=2",
                      "policy.lm.max_prompt_tokens=170"])
    t = Trainer(c, tmp_path)
    if end_at_once:
        t.policy.module.generation_config.sequence_bias = {(t.policy.stop_ids[0],): 100.0}
    rec = t.train_step()
    assert rec["rollout/truncated_responses"] == (0.0 if end_at_once else 1.0)
    # the first step's prompt has no history and fits; later ones have history and do not
    assert 0.0 < rec["rollout/trimmed_prompts"] < 1.0


def test_score_mode_passes_are_bounded_by_cached_tokens():
    p = scored(score_impl="expand")
    # (prompt length, candidate lengths); a pass costs its rows x (widest prompt + longest candidate)
    shapes = [(20, [3, 5]), (30, [2]), (10, [4, 4, 4]), (90, [20]), (5, [1])]
    # the decisions go by width (widest prompt + longest candidate): 4 (6), 2 (14), 0 (25), 1 (32), 3 (110)
    p.score_tokens_per_pass = 100
    # 1x6, 4x14=56; +2 rows: 6x25=150 > 100, new pass; 2x25, 3x32=96; decision 3 (1x110) is
    # over the budget alone and still gets its own pass
    assert p._score_groups(shapes, limit=8, impl="expand") == [[4, 2], [0, 1], [3]]
    p.score_tokens_per_pass = 200
    assert p._score_groups(shapes, limit=8, impl="expand") == [[4, 2, 0], [1], [3]]  # 6x25=150 fits, 7x32 not
    p.score_tokens_per_pass = 10**6
    assert p._score_groups(shapes, limit=2, impl="expand") == [[4, 2], [0, 1], [3]]  # micro_batch_size still caps
    assert p.micro_batches([{"prompt": [k] * pl, "cands": [[0] * n for n in c]}
                            for k, (pl, c) in enumerate(shapes)], 2) == [[4, 2], [0, 1], [3]]
    # acting in one pass per decision chooses as acting in one pass for all
    contexts = [ctx(step=3), ctx(step=0), ctx(step=1)]
    wide = p.act(contexts, np.random.default_rng(5), temperature=1.0)
    p.score_tokens_per_pass = 1
    narrow = p.act(contexts, np.random.default_rng(5), temperature=1.0)
    assert [d.action for d in narrow] == [d.action for d in wide]
    assert [d.logp for d in narrow] == pytest.approx([d.logp for d in wide], abs=1e-5)


# ---- score mode's packed passes: one sequence per decision, the candidates kept apart by the mask

def packed_items(p):
    """Decisions of different prompt lengths and candidate counts and lengths (one-token
    candidates too), from the env's contexts and from random token ids."""
    made = [p.score_item(c) for c in (ctx(step=3), ctx(step=0))]
    g = torch.Generator().manual_seed(0)

    def ids(n):
        return torch.randint(5, 1000, (n,), generator=g).tolist()

    return [(pr, rs) for _, pr, rs in made] + [(ids(7), [ids(1), ids(4), ids(2)]), (ids(15), [ids(3)]),
                                               (ids(3), [ids(2), ids(2), ids(5), ids(1), ids(1)])]


@pytest.mark.parametrize("impl", ["packed", "shared"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_score_log_probs_equal_expand_and_plain_forward_passes(attn, impl):
    p = scored(score_impl="expand")
    p.module.config._attn_implementation = attn  # read at each forward pass
    p.module.eval()
    items = packed_items(p)
    with torch.no_grad():
        expand = p.candidate_logps(items)
        p.score_impl = impl
        packed = p.candidate_logps(items)
    for (pr, rs), e, k in zip(items, expand, packed):
        assert k.shape == (len(rs),) and bool(torch.isfinite(k).all())
        assert torch.allclose(k, e, atol=1e-5, rtol=0)
        for j, r in enumerate(rs):
            assert float(k[j]) == pytest.approx(full_forward_logp(p, pr, r), abs=1e-5)


@pytest.mark.parametrize("impl", ["packed", "shared"])
def test_packed_score_keeps_each_candidate_from_seeing_the_others(impl):
    p = scored(score_impl=impl)
    p.module.eval()
    prompt, cands = [11, 12, 13, 14], [[21, 22, 23], [31, 32], [41, 42, 43, 44]]
    with torch.no_grad():
        together = p.candidate_logps([(prompt, cands)])[0]
        alone = [float(p.candidate_logps([(prompt, [c])])[0][0]) for c in cands]
        # other tokens before the last candidate change nothing in its score
        swapped = p.candidate_logps([(prompt, [[51, 52, 53], [61], cands[2]])])[0]
    assert together.tolist() == pytest.approx(alone, abs=1e-5)
    assert float(swapped[2]) == pytest.approx(alone[2], abs=1e-5)


@pytest.mark.parametrize("other", ["packed", "shared"])
def test_packed_score_gradients_equal_expand(other):
    grads = {}
    for impl in ("expand", other):
        p = scored(score_impl=impl)  # the same seed: the same weights
        items = packed_items(p)
        with torch.no_grad():  # the least likely candidates: a favourite's log-prob (about 0) has no gradient
            p.score_impl = "expand"
            choice = [int(torch.argmin(s)) for s in p.candidate_logps(items)]
            p.score_impl = impl
        batch = p.prepare([{"prompt": pr, "cands": rs, "choice": c} for (pr, rs), c in zip(items, choice)])
        (-p.evaluate(batch).logp.sum()).backward()
        grads[impl] = {n: q.grad.clone() for n, q in p.module.named_parameters()}
    assert any(g.abs().sum() > 0 for g in grads[other].values())
    for n, g in grads["expand"].items():
        assert torch.allclose(grads[other][n], g, atol=1e-5, rtol=1e-3), n


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("other", ["packed", "shared"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_cuda_packed_score_equals_expand_in_log_probs_and_gradients(attn, other):
    """The GPU's attention kernels take the packed and shared 4D masks too (fp32, so rounding
    stays small)."""
    out = {}
    for impl in ("expand", other):
        # fp32 compute (autocast off: the GPU default computes in bf16), the same seed: the same weights
        p = scored(score_impl=impl, device="cuda", dtype="fp32", autocast="none")
        p.module.config._attn_implementation = attn
        items = packed_items(p)
        with torch.no_grad():
            p.module.eval()
            logps = [s.cpu() for s in p.candidate_logps(items)]
        choice = [int(torch.argmin(s)) for s in logps]
        p.module.train()
        batch = p.prepare([{"prompt": pr, "cands": rs, "choice": c} for (pr, rs), c in zip(items, choice)])
        (-p.evaluate(batch).logp.sum()).backward()
        out[impl] = logps, {n: q.grad.cpu() for n, q in p.module.named_parameters()}
    for e, k in zip(out["expand"][0], out[other][0]):
        assert bool(torch.isfinite(k).all()) and torch.allclose(k, e, atol=1e-4, rtol=0)
    assert any(g.abs().sum() > 0 for g in out[other][1].values())
    for n, g in out["expand"][1].items():
        assert torch.allclose(out[other][1][n], g, atol=1e-4, rtol=1e-3), n


@pytest.mark.parametrize("impl", ["packed", "shared"])
def test_packed_score_acts_as_expand(impl):
    p = scored(score_impl="expand")
    contexts = [ctx(step=3), ctx(step=0), ctx(step=1)]
    for temperature in (1.0, 0):
        expand = p.act(contexts, np.random.default_rng(5), temperature=temperature)
        p.score_impl = impl
        packed = p.act(contexts, np.random.default_rng(5), temperature=temperature)
        p.score_impl = "expand"
        assert [d.action for d in packed] == [d.action for d in expand]
        assert [d.logp for d in packed] == pytest.approx([d.logp for d in expand], abs=1e-5)


def test_auto_score_impl_packs_the_loss_everywhere_and_acting_off_the_gpu():
    p = scored()  # the default
    assert p.score_impl == "auto"
    assert (p.score_impl_for(loss=False), p.score_impl_for(loss=True)) == ("packed", "packed")  # on a CPU
    p.device = torch.device("cuda")  # resolution only: nothing runs there
    assert (p.score_impl_for(loss=False), p.score_impl_for(loss=True)) == ("expand", "packed")
    p.score_impl = "expand"
    assert (p.score_impl_for(loss=False), p.score_impl_for(loss=True)) == ("expand", "expand")
    # the trainer's passes (loss, reference) are grouped by the loss's passes
    q = scored(score_impl="auto")
    q.score_tokens_per_pass = 100
    data = [{"prompt": [0] * pl, "cands": [[0] * n for n in c]}
            for pl, c in [(20, [3, 5]), (30, [2]), (10, [4, 4, 4]), (90, [20]), (5, [1])]]
    q.device = torch.device("cuda")
    # packed widths 28, 32, 22, 110, 6: 1x6, 2x22, 3x28=84, 4x32 > 100; expand's would be [[4, 2], [0, 1], [3]]
    assert q.micro_batches(data, 8) == [[4, 2, 0], [1], [3]]


def test_packed_score_passes_are_bounded_by_decisions_times_packed_width():
    p = scored(score_impl="packed")
    # (prompt length, candidate lengths); a packed pass costs its decisions x (longest prompt
    # plus all of its candidates): widths 28, 32, 22, 110, 6
    shapes = [(20, [3, 5]), (30, [2]), (10, [4, 4, 4]), (90, [20]), (5, [1])]
    p.score_tokens_per_pass = 100
    # by width: 4 (6), 2 (22), 0 (28), 1 (32), 3 (110); 1x6, 2x22, 3x28=84; +1: 4x32 > 100, new pass; 2x110 > 100
    assert p._score_groups(shapes, limit=8, impl="packed") == [[4, 2, 0], [1], [3]]
    p.score_tokens_per_pass = 64
    assert p._score_groups(shapes, limit=8, impl="packed") == [[4, 2], [0, 1], [3]]  # 3x28=84 does not fit, 2x32 does
    p.score_tokens_per_pass = 10**6
    assert p._score_groups(shapes, limit=2, impl="packed") == [[4, 2], [0, 1], [3]]  # micro_batch_size still caps


def test_score_passes_hold_decisions_of_similar_width_and_equal_ones_together():
    p = scored(score_impl="packed")
    p.score_tokens_per_pass = 10**6
    # widths 100, 10, 90, 20: in order, every pass would be padded to 90 or 100
    shapes = [(99, [1]), (9, [1]), (89, [1]), (19, [1])]
    groups = p._score_groups(shapes, limit=2, impl="packed")
    assert groups == [[1, 3], [2, 0]]

    def padded(gs):  # the attention's area: rows x width^2 of each pass
        return sum(len(g) * max(sum(shapes[i][1]) + shapes[i][0] for i in g) ** 2 for g in gs)

    assert (padded(groups), padded([[0, 1], [2, 3]])) == (2 * 20**2 + 2 * 100**2, 2 * 100**2 + 2 * 90**2)
    # equal widths keep their order, unless classes say which decisions are equal: those go together
    same = [(9, [1])] * 4
    assert p._score_groups(same, limit=2, impl="packed") == [[0, 1], [2, 3]]
    assert p._score_groups(same, limit=2, impl="packed", classes=[0, 1, 0, 1]) == [[0, 2], [1, 3]]


@pytest.mark.parametrize("impl", ["expand", "packed", "shared"])
def test_equal_decisions_are_scored_once_with_their_own_scores_and_gradients(impl):
    p = scored(score_impl=impl)
    a = ([5, 6, 7, 8, 9], [[10, 11], [12]])
    b = ([5, 6], [[13], [14, 15, 16]])
    rows = []
    hook = p.module.get_input_embeddings().register_forward_hook(lambda m, i, o: rows.append(i[0].shape[0]))
    both = p.candidate_logps([a, b, a, a], impl=impl)
    hook.remove()
    # passes over the two distinct decisions only: packed's one; expand's and shared's prompts, then
    # their candidates (expand: a row per candidate, 2 + 2; shared: a row per decision)
    assert rows == {"packed": [2], "expand": [2, 4], "shared": [2, 2]}[impl]
    alone = [p.candidate_logps([x], impl=impl)[0] for x in (a, b, a, a)]
    for got, want in zip(both, alone, strict=True):
        assert torch.allclose(got, want, atol=1e-5)
    # a loss over the duplicates moves the weights as a loss over separate passes does

    def grads(scores):
        p.module.zero_grad(set_to_none=True)
        sum(w * s[-1] for w, s in zip([1.0, 2.0, -0.5, 0.25], scores, strict=True)).backward()
        return [q.grad.clone() for q in p.module.parameters() if q.grad is not None]

    g_once = grads(p.candidate_logps([a, b, a, a], impl=impl))
    g_alone = grads([p.candidate_logps([x], impl=impl)[0] for x in (a, b, a, a)])
    assert len(g_once) == len(g_alone)
    for x, y in zip(g_once, g_alone, strict=True):
        assert torch.allclose(x, y, atol=1e-5)


#: contexts of several widths and candidate lists, some repeated; the last two share their prompt
#: (the same admissible actions) but not their candidates (other invalid ones)
MIXED = [_ctx_with(3, ["go to bed 1", "take key 1 from desk 1", "help"]),
         _ctx_with(0, ["help", "go to bed 1"]),
         _ctx_with(3, ["go to bed 1", "take key 1 from desk 1", "help"]),
         _ctx_with(1, ["open drawer 2", "look", "inventory", "go to desk 9"]),
         _ctx_with(0, ["help", "go to bed 1"]),
         _ctx_with(5, ["take key 1 from desk 1", "help", "go to bed 1"]),
         _ctx_with(2, ["look", "go to bed 1"], ["go to sofa 1"]),
         _ctx_with(2, ["look", "go to bed 1"], ["take pen 3 from bed 1", "go to sofa 1"])]


@pytest.mark.parametrize("impl", ["packed", "expand", "shared"])
def test_acting_on_repeated_contexts_scores_each_once_and_acts_on_each(impl):
    # per-token means and a hot softmax, so that the candidates' scores differ by more than
    # their lengths and the draws vary: a score sent to the wrong decision shows
    p = scored(score_impl=impl, score_norm="mean")
    p.temperature = 5.0
    p.micro_batch_size = 3
    rows = []
    hook = p.module.get_input_embeddings().register_forward_hook(lambda m, i, o: rows.append(i[0].shape[0]))
    p.act(MIXED, np.random.default_rng(7), temperature=1.0)
    hook.remove()
    prompts = {"packed": 0, "expand": 1, "shared": 1}[impl]  # passes per group before the candidates'
    assert sum(rows[k] for k in range(0, len(rows), 1 + prompts)) == 6  # six distinct decisions of eight
    for temp in (0.0, 1.0, 5.0):
        many = p.act(MIXED, np.random.default_rng(7), temperature=temp)
        rng = np.random.default_rng(7)  # one draw per decision, in order, from the same generator
        alone = [p.act([c], rng, temperature=temp)[0] for c in MIXED]
        assert [d.action for d in many] == [d.action for d in alone]
        assert [d.logp for d in many] == pytest.approx([d.logp for d in alone], abs=1e-5)
        assert [d.data["cands"] for d in many] == [d.data["cands"] for d in alone]
    assert len({d.logp for d in many}) > 4 and len({d.action for d in many}) > 2  # the check has teeth


def test_an_update_in_width_ordered_passes_equals_one_in_passes_taken_in_order(tmp_path):
    from proas.policies.base import Policy
    from proas.train.loop import Trainer

    toy = TOY_SCORE + ["policy.lm.lr=1e-2", "algo.kl_coef=0.01", "policy.lm.micro_batch_size=3",
                       "algo.minibatch_size=8", "algo.ppo_epochs=2"]

    def run(name, old_rule):
        t = Trainer(build_config(toy), tmp_path / name)
        grads = []  # each optimiser step's gradients (AdamW's step would turn rounding into signs)
        t.optimizer.register_step_pre_hook(
            lambda opt, args, kwargs: grads.append([q.grad.clone() for q in t.policy.parameters()
                                                    if q.grad is not None]))
        update = t._update

        def with_advantages(trajs, res):
            # the toy's untrained step has no success, so every advantage is 0 and the policy
            # gradient would be silent: give each decision its own advantage
            res = dataclasses.replace(res, advantage=np.random.default_rng(1).normal(size=len(res.final)),
                                      penalty=None)
            return update(trajs, res)

        t._update = with_advantages
        if old_rule:  # the rule before width order: consecutive passes, every decision scored
            t.policy.micro_batches = lambda data, limit: Policy.micro_batches(t.policy, data, limit)
            t.policy.candidate_logps = lambda items, module=None, impl=None, distinct=None: \
                t.policy._distinct_logps(items, module, impl)
        return t.train_step(), grads

    rec_a, grads_a = run("a", old_rule=False)
    rec_b, grads_b = run("b", old_rule=True)
    for k in ("train/sr", "train/steps", "loss/updates"):
        assert rec_a[k] == rec_b[k]
    assert rec_a["loss/pg"] != 0.0
    for k in ("loss/pg", "loss/kl", "loss/entropy", "loss/grad_norm"):
        assert rec_a[k] == pytest.approx(rec_b[k], rel=1e-4, abs=1e-6)
    assert len(grads_a) == len(grads_b) == rec_a["loss/updates"] >= 4
    for ga, gb in zip(grads_a, grads_b, strict=True):
        scale = max(float(g.abs().max()) for g in ga)
        assert scale > 0
        for x, y in zip(ga, gb, strict=True):
            assert torch.allclose(x, y, rtol=0, atol=1e-4 * scale)


@pytest.mark.parametrize("impl", ["expand", "packed"])
def test_the_trainer_runs_a_step_with_either_score_impl(tmp_path, impl):
    from proas.train.loop import Trainer

    c = build_config(TOY_SCORE + [f"policy.lm.score_impl={impl}", "policy.lm.lr=1e-3", "algo.kl_coef=0.01"])
    t = Trainer(c, tmp_path)
    assert t.policy.score_impl == impl
    before = [q.detach().clone() for q in t.policy.parameters()]
    rec = t.train_step()
    assert rec["step"] == 1 and rec["loss/updates"] >= 1 and rec["train/trajectories"] == 4
    assert rec["loss/entropy"] > 0 and np.isfinite(rec["loss/entropy"])
    assert any(not torch.equal(a, b) for a, b in zip(before, t.policy.parameters()))


def test_score_impl_is_checked():
    with pytest.raises(ProasError, match="policy.lm.score_impl"):
        build_config(["policy=lm", "policy.lm.model_config=tiny", "policy.lm.score_impl=guess"])


# ---- the passes' inputs, built with numpy scatters, against the plain per-list loop they replace

def _loop_expand_inputs(items, pad):
    n, width = len(items), max(len(p) for p, _ in items)
    ids, mask = torch.full((n, width), pad), torch.zeros((n, width), dtype=torch.long)
    for i, (p, _) in enumerate(items):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    flat = [c for _, cs in items for c in cs]
    length = max(len(c) for c in flat)
    cids, cmask = torch.full((len(flat), length), pad), torch.zeros((len(flat), length), dtype=torch.long)
    for j, c in enumerate(flat):
        cids[j, : len(c)] = torch.tensor(c)
        cmask[j, : len(c)] = 1
    owner = torch.tensor([i for i, (_, cs) in enumerate(items) for _ in cs])
    return [ids, mask, cids, cmask, owner]


def _loop_packed_inputs(items, pad):
    n = len(items)
    width = max(len(p) + sum(len(c) for c in cs) for p, cs in items)
    ids, seg = torch.full((n, width), pad), torch.full((n, width), -1)
    pos = torch.zeros((n, width), dtype=torch.long)
    rows, cols, owner, flat = [], [], [], 0
    for i, (p, cs) in enumerate(items):
        ids[i, : len(p)], seg[i, : len(p)], pos[i, : len(p)] = torch.tensor(p), 0, torch.arange(len(p))
        at = len(p)
        for k, c in enumerate(cs):
            ids[i, at: at + len(c)] = torch.tensor(c)
            seg[i, at: at + len(c)] = k + 1
            pos[i, at: at + len(c)] = torch.arange(len(p), len(p) + len(c))
            rows += [i] * len(c)
            cols += [len(p) - 1, *range(at, at + len(c) - 1)]
            owner += [flat] * len(c)
            at += len(c)
            flat += 1
    return [ids, seg, pos, torch.tensor(rows), torch.tensor(cols), torch.tensor(owner)]


class _Recorder(torch.nn.Module):
    """Wraps a causal LM and keeps every forward pass's keyword tensors."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.calls = inner, []

    def forward(self, **kw):
        self.calls.append({k: v.clone() for k, v in kw.items() if isinstance(v, torch.Tensor)})
        return self.inner(**kw)


@pytest.mark.parametrize("impl", ["expand", "packed"])
def test_score_pass_inputs_equal_the_per_list_loop(impl):
    p = scored(score_impl=impl)
    p.module.eval()
    items = packed_items(p)
    pad = p.tokenizer.pad_token_id
    rec = _Recorder(p.module)
    with torch.no_grad():
        got = p.candidate_logps(items, module=rec)
    if impl == "expand":
        ids, mask, cids, cmask, owner = _loop_expand_inputs(items, pad)
        first, second = rec.calls
        assert torch.equal(first["input_ids"], ids) and torch.equal(first["attention_mask"], mask)
        assert torch.equal(second["input_ids"], cids[:, :-1])
        assert torch.equal(second["attention_mask"], torch.cat([mask[owner], cmask[:, :-1]], dim=1))
    else:
        ids, seg, pos, rows, cols, owner = _loop_packed_inputs(items, pad)
        (call,) = rec.calls
        assert torch.equal(call["input_ids"], ids) and torch.equal(call["position_ids"], pos)
        # the token log-probs the loop's (row, column) pairs and owners give, summed per candidate
        logits = p.module(input_ids=ids, attention_mask=call["attention_mask"], position_ids=pos).logits
        tok = torch.log_softmax(logits[rows, cols].float(), dim=-1).gather(1, ids[seg > 0][:, None]).squeeze(1)
        sums = torch.zeros(int(owner.max()) + 1).index_add(0, owner, tok)
        assert torch.equal(torch.cat(got), sums)
