"""The lm policy trains as LLM trainers do (issue #25): mixed precision, AdamW with weight decay,
warmup and schedules, gradient checkpointing, the attention implementation, the generate mode's
log-probs without stored logits, and score mode's per-token mean. Tiny models built here."""

import numpy as np
import pytest
import torch

from proas.errors import ProasError
from proas.lm.model import local_tokenizer, resolve_precision
from proas.lm.policy import LMPolicy
from proas.policies.base import Context
from proas.train.config import build_config

torch.set_num_threads(1)


def ctx(step=1):
    history = [(f"obs {k}", f"go to desk {k}") for k in range(step)]
    return Context("household", "put some key on bed", "You arrive at desk 1.", history,
                   ["go to bed 1", "take key 1 from desk 1", "examine the small red key on desk 1"], [], step)


def policy(*over, **lm):
    """An lm policy on the CPU (where these tests are meant to run, also on a GPU machine)."""
    lm.setdefault("device", "cpu")
    cfg = build_config(["policy=lm", "policy.lm.max_new_tokens=8", *over,
                        *[f"policy.lm.{k}={v}" for k, v in lm.items()]])
    return LMPolicy.from_config(cfg.policy.lm, seed=0)


def tiny(**lm):
    return policy("policy.lm.model_config=tiny", **lm)


@pytest.fixture(scope="module")
def llama_bf16(tmp_path_factory):
    """A 2-layer Llama (hidden 32) saved in bf16, as checkpoints such as Qwen2.5 ship."""
    from transformers import LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("llama_bf16")
    tok = local_tokenizer(512)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None,
                      initializer_range=0.02)
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def sft_batch(p, n=2):
    """A fixed batch: the tiny model's prompts with a taught response."""
    resp = p.tokenizer("<think>go</think><action>go to bed 1</action>", add_special_tokens=False)["input_ids"]
    return p.prepare([{"prompt": p.encode_prompt(ctx(step=k)), "response": resp + [p.stop_ids[0]]}
                      for k in range(n)])


def train_steps(p, steps=10, lr=1e-6):
    """``steps`` AdamW steps on one batch (the policy's own optimiser); the weights' changes."""
    before = [q.detach().float().clone() for q in p.parameters()]
    opt = p.make_optimizer(lr)
    batch = sft_batch(p)
    for _ in range(steps):
        st = p.evaluate(batch)
        loss = -(st.logp * st.mask).sum() / st.mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return [q.detach().float() - b for q, b in zip(p.parameters(), before)]


def moved(deltas):
    return sum(int((d != 0).sum()) for d in deltas) / sum(d.numel() for d in deltas)


# ---- precision

def test_mixed_precision_is_the_default_on_a_gpu_and_fp32_on_a_cpu():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert resolve_precision("auto", "auto", cuda) == (torch.float32, torch.bfloat16)
    assert resolve_precision("auto", "auto", cpu) == (torch.float32, None)
    assert resolve_precision("auto", "bf16", cpu) == (torch.float32, torch.bfloat16)
    # LoRA: the frozen base in bf16 on a GPU (the adapters are fp32, peft's default)
    assert resolve_precision("auto", "auto", cuda, lora=True) == (torch.bfloat16, torch.bfloat16)
    # pure bf16 on request: nothing left to autocast
    assert resolve_precision("bf16", "auto", cuda) == (torch.bfloat16, None)
    assert resolve_precision("fp32", "none", cuda) == (torch.float32, None)


def test_a_bf16_model_moves_at_lr_1e_6_as_an_fp32_model_does(llama_bf16):
    """The issue's finding: pure bf16 weights with Adam at lr 1e-6 round almost every update
    away. The default (fp32 master weights, bf16 compute under autocast, as on a GPU) moves the
    weights of the same bf16 checkpoint as an fp32 run does."""
    path = f"policy.lm.model_path={llama_bf16}"
    fp32 = train_steps(policy(path, autocast="none"))
    mixed_policy = policy(path, autocast="bf16")
    assert next(mixed_policy.module.parameters()).dtype == torch.float32
    assert mixed_policy.autocast_dtype == torch.bfloat16
    mixed = train_steps(mixed_policy)
    pure = train_steps(policy(path, dtype="bf16"))
    # every weight with a gradient moves (the embeddings of tokens the batch lacks have none)
    assert moved(fp32) > 0.7
    assert moved(mixed) == pytest.approx(moved(fp32), rel=0.01)
    assert moved(pure) < 0.05  # the failure the default avoids (the issue measured 1.9%)
    # the same updates, up to bf16's rounding of the forward pass: Adam's steps of about lr each
    size = lambda ds: float(torch.cat([d.abs().flatten() for d in ds]).mean())  # noqa: E731
    assert size(mixed) == pytest.approx(size(fp32), rel=0.2)
    agree = sum(int((torch.sign(a) == torch.sign(b)).sum()) for a, b in zip(mixed, fp32))
    assert agree / sum(d.numel() for d in fp32) > 0.9


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_defaults_train_a_bf16_checkpoint_in_mixed_precision_and_decode_a_bf16_copy(llama_bf16):
    """On a GPU the defaults are the mixed precision of the CPU tests above: fp32 weights, bf16
    autocast, fused AdamW; the bf16 checkpoint moves at lr 1e-6 as without autocast; the static
    decoder captures its graphs on the bf16 rollout copy."""
    path = f"policy.lm.model_path={llama_bf16}"
    p = policy(path, device="cuda")
    assert p.autocast_dtype == torch.bfloat16 and next(p.module.parameters()).dtype == torch.float32
    assert p.make_optimizer(1e-6).defaults["fused"]
    mixed = train_steps(p)
    fp32 = train_steps(policy(path, device="cuda", autocast="none"))
    assert moved(fp32) > 0.7 and moved(mixed) == pytest.approx(moved(fp32), rel=0.01)
    q = policy(path, device="cuda", decode="static")
    dec = q.static_decoder()
    assert dec.graphs and dec.model is q.rollout_module() and dec.dtype == torch.bfloat16
    prompts = [q.encode_prompt(ctx(step=k)) for k in range(3)]
    a, la = q.generate_ids(prompts, 0.0, decode="static", min_new_tokens=8)
    b, lb = q.generate_ids(prompts, 0.0, decode="hf", min_new_tokens=8)
    assert a.shape == b.shape == (3, 8) and la.shape == lb.shape


def test_the_forward_passes_run_in_bf16_under_autocast():
    p = tiny(autocast="bf16")
    seen = []
    layer = p.module.model.layers[0].mlp.down_proj
    layer.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    st = p.evaluate(sft_batch(p))
    assert seen == [torch.bfloat16] and st.logp.dtype == torch.float32
    assert next(p.module.parameters()).dtype == torch.float32
    q = tiny()  # the CPU default: fp32 throughout
    seen.clear()
    q.module.model.layers[0].mlp.down_proj.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    q.evaluate(sft_batch(q))
    assert seen == [torch.float32]


def test_generate_mode_decodes_on_a_bf16_copy_refreshed_after_each_update():
    p = tiny(autocast="bf16")
    roll = p.rollout_module()
    assert roll is not p.module and next(roll.parameters()).dtype == torch.bfloat16
    assert not any(q.requires_grad for q in roll.parameters())
    assert roll.model.rotary_emb.inv_freq.dtype == torch.float32  # buffers keep their precision
    first = roll.model.embed_tokens.weight.clone()
    assert p.rollout_module() is roll  # nothing changed: not copied again
    opt = p.make_optimizer(1e-2)
    st = p.evaluate(sft_batch(p))
    (-(st.logp * st.mask).sum()).backward()
    opt.step()
    assert p.rollout_module() is roll  # refreshed in place (the static decoder's buffers stay valid)
    for a, b in zip(roll.parameters(), p.module.parameters()):
        assert torch.equal(a, b.detach().to(torch.bfloat16))
    assert not torch.equal(first, roll.model.embed_tokens.weight)
    d = p.act([ctx()], np.random.default_rng(0), temperature=1.0)[0]
    assert d.data["response"]
    q = tiny()  # without autocast the model decodes itself
    assert q.rollout_module() is q.module


def test_the_static_decoder_decodes_the_bf16_copy_and_keeps_it_across_updates():
    p = tiny(autocast="bf16", decode="static")
    dec = p.static_decoder()
    assert dec.model is p.rollout_module() and dec.dtype == torch.bfloat16
    tok, logp = p.generate_ids([p.encode_prompt(ctx())], 0.0)
    assert tok.shape == logp.shape and tok.shape[1] >= 1
    opt = p.make_optimizer(1e-2)
    st = p.evaluate(sft_batch(p))
    (-(st.logp * st.mask).sum()).backward()
    opt.step()
    assert p.static_decoder() is dec and dec.model is p.rollout_module()  # refreshed in place
    assert torch.equal(dec.model.lm_head.weight, p.module.lm_head.weight.detach().to(torch.bfloat16))


# ---- the optimiser and its schedule

def test_adamw_decays_weights_but_not_biases_or_norms_with_verl_agents_defaults():
    p = tiny()
    opt = p.make_optimizer(1e-6)
    assert type(opt) is torch.optim.AdamW
    names = {id(q): n for n, q in p.module.named_parameters()}
    decay = {names[id(q)] for g in opt.param_groups if g["weight_decay"] > 0 for q in g["params"]}
    plain = {names[id(q)] for g in opt.param_groups if g["weight_decay"] == 0 for q in g["params"]}
    assert {g["weight_decay"] for g in opt.param_groups} == {0.01, 0.0}
    assert "model.layers.0.self_attn.q_proj.weight" in decay and "model.embed_tokens.weight" in decay
    assert "model.layers.0.self_attn.q_proj.bias" in plain and "model.norm.weight" in plain
    assert "model.layers.1.input_layernorm.weight" in plain
    assert decay | plain == set(names.values()) and not decay & plain
    assert all(g["betas"] == (0.9, 0.999) and g["lr"] == 1e-6 for g in opt.param_groups)
    # verl-agent's actor: a constant rate, no warmup
    sched = p.make_scheduler(opt, 100)
    rates = []
    for _ in range(100):
        rates.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert rates == [1e-6] * 100
    assert tiny(weight_decay=0.1).make_optimizer(1e-3).param_groups[0]["weight_decay"] == 0.1


@pytest.mark.parametrize("schedule", ["constant", "linear", "cosine"])
def test_warmup_then_the_schedule(schedule):
    from torch.optim.lr_scheduler import LambdaLR

    p = tiny(lr_schedule=schedule, warmup_ratio=0.1)
    opt = p.make_optimizer(1e-3)
    sched = p.make_scheduler(opt, 50)
    assert isinstance(sched, LambdaLR)  # transformers' schedulers
    rates = []
    for _ in range(50):
        rates.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert rates[0] == 0.0 and rates[5] == pytest.approx(1e-3)
    assert rates[:6] == sorted(rates[:6]) and rates[1] == pytest.approx(2e-4)
    if schedule == "constant":
        assert rates[5:] == pytest.approx([1e-3] * 45)
    else:
        assert rates[5:] == sorted(rates[5:], reverse=True) and rates[-1] < 1e-4
        mid = rates[5 + 45 // 2]
        assert mid == pytest.approx(5e-4, rel=0.05)  # half-way: linear and cosine both at half


def test_schedule_options_are_checked():
    with pytest.raises(ProasError, match="policy.lm.lr_schedule"):
        build_config(["policy=lm", "policy.lm.model_config=tiny", "policy.lm.lr_schedule=step"])
    with pytest.raises(ProasError, match="policy.lm.warmup_ratio"):
        build_config(["policy=lm", "policy.lm.model_config=tiny", "policy.lm.warmup_ratio=1.5"])
    with pytest.raises(ProasError, match="policy.lm.autocast"):
        build_config(["policy=lm", "policy.lm.model_config=tiny", "policy.lm.autocast=fp8"])


#: a trainer on the toy env (tests/toy_env.py) with a tiny score-mode lm
TOY_SCORE = ["env.name=toy_env:make_env", "env.options.n_places=2", "env.options.max_steps=4", "env.options.n_train=8",
             "env.options.n_valid=2", "env.tasks_per_step=2", "env.group_size=2", "train.progress=false",
             "policy=lm", "policy.lm.model_config=tiny", "policy.lm.mode=score", "algo.kl_coef=0",
             "policy.lm.device=cpu"]


def test_rl_steps_the_schedule_once_a_step_and_reports_the_rate(tmp_path):
    from proas.train.loop import Trainer

    t = Trainer(build_config(TOY_SCORE + ["policy.lm.lr=1e-3", "train.steps=4", "policy.lm.warmup_ratio=0.5",
                                          "policy.lm.lr_schedule=linear"]), tmp_path)
    before = [q.detach().clone() for q in t.policy.parameters()]
    rec = t.train_step()
    assert rec["optim/lr"] == 0.0  # warming up from 0: the first update moves nothing
    assert all(torch.equal(a, b) for a, b in zip(before, t.policy.parameters()))
    assert rec["loss/grad_norm"] > 0
    assert t.train_step()["optim/lr"] == pytest.approx(5e-4)
    assert t.train_step()["optim/lr"] == pytest.approx(1e-3)
    assert t.train_step()["optim/lr"] == pytest.approx(5e-4)


# ---- memory: gradient checkpointing, the attention implementation, lean log-probs

def test_gradient_checkpointing_recomputes_layers_and_gives_the_same_gradients():
    grads = {}
    for gc in (False, True):
        p = tiny(gradient_checkpointing=gc)
        calls = []
        mlp = p.module.model.layers[0].mlp
        real = mlp.forward
        mlp.forward = lambda *a, real=real, **k: calls.append(1) or real(*a, **k)
        st = p.evaluate(sft_batch(p))
        (-(st.logp * st.mask).sum()).backward()
        assert p.module.is_gradient_checkpointing == gc
        assert len(calls) == (2 if gc else 1)  # the backward pass ran the layer again
        grads[gc] = [q.grad.clone() for q in p.parameters()]
    for a, b in zip(grads[False], grads[True]):
        assert torch.allclose(a, b, atol=1e-6)


def test_gradient_checkpointing_trains_lora_adapters_and_score_mode():
    p = tiny(gradient_checkpointing=True, lora_rank=4, mode="score")
    d = p.act([ctx()], np.random.default_rng(0))[0]
    st = p.evaluate(p.prepare([d.data]))
    assert p.module.is_gradient_checkpointing
    st.logp.sum().backward()
    lora_b = [q for n, q in p.module.named_parameters() if "lora_B" in n]
    assert lora_b and all(q.grad is not None and bool(q.grad.abs().sum() > 0) for q in lora_b)
    for impl in ("expand", "shared"):  # both score the candidates on the prompt's KV cache
        with pytest.raises(ProasError, match="gradient_checkpointing"):
            build_config(["policy=lm", "policy.lm.model_config=tiny", "policy.lm.mode=score",
                          f"policy.lm.score_impl={impl}", "policy.lm.gradient_checkpointing=true"])


def test_attn_implementation_is_applied_and_one_that_ignores_4d_masks_is_refused():
    assert tiny(attn_implementation="eager").module.config._attn_implementation == "eager"
    assert tiny(attn_implementation="sdpa").module.config._attn_implementation == "sdpa"
    for impl in ("packed", "auto", "shared"):
        with pytest.raises(ProasError) as err:
            build_config(["policy=lm", "policy.lm.model_config=tiny", "policy.lm.mode=score",
                          f"policy.lm.score_impl={impl}", "policy.lm.attn_implementation=flash_attention_2"])
        assert "4D float masks" in str(err.value) and "\n" not in str(err.value)
    # generate mode and expand's passes give 2D masks: allowed by the config (loading it needs the kernel)
    build_config(["policy=lm", "policy.lm.model_config=tiny", "policy.lm.attn_implementation=flash_attention_2"])
    build_config(["policy=lm", "policy.lm.model_config=tiny", "policy.lm.mode=score", "policy.lm.score_impl=expand",
                  "policy.lm.attn_implementation=flash_attention_2"])


def plain_logp(module, prompt, resp):
    """Each response token's log-prob from one plain forward pass over prompt + response."""
    with torch.no_grad():
        logits = module(input_ids=torch.tensor([list(prompt) + list(resp)])).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    return torch.stack([logp[len(prompt) - 1 + j, t] for j, t in enumerate(resp)])


@pytest.mark.parametrize("temperature, min_new", [(0.0, 0), (0.7, 5), (1.0, 0)])
def test_generate_records_each_drawn_tokens_raw_log_prob_without_keeping_logits(monkeypatch, temperature, min_new):
    p = tiny()
    prompts = [p.encode_prompt(ctx(step=0)), p.encode_prompt(ctx(step=2))]
    kwargs = {}
    real = p.module.generate

    def spy(**kw):
        kwargs.update(kw)
        return real(**kw)

    monkeypatch.setattr(p.module, "generate", spy)
    torch.manual_seed(0)
    tok, logp = p.generate_ids(prompts, temperature, min_new_tokens=min_new)
    assert not kwargs.get("output_logits") and not kwargs.get("output_scores")
    assert tok.shape == logp.shape and tok.shape[1] >= 1
    for i, prompt in enumerate(prompts):
        n = tok.shape[1]
        for j in range(n):  # up to the first stop id; after it the row is padding
            if tok[i, j].item() in p.stop_ids:
                n = j + 1
                break
        expect = plain_logp(p.module, prompt, tok[i, :n].tolist())
        assert torch.allclose(logp[i, :n], expect, atol=1e-4)  # temperature 1, before min_new_tokens
        if min_new:
            assert not set(tok[i, :min_new].tolist()) & set(p.stop_ids)


def test_evaluate_computes_the_response_logits_only_and_equals_plain_passes(monkeypatch):
    p = tiny()
    data = [{"prompt": p.encode_prompt(ctx(step=k)), "response": r}
            for k, r in ((0, [5, 9, 11, 3]), (2, [7]), (1, [12, 8]))]
    assert len({len(d["prompt"]) for d in data}) == 3  # left padding at work
    seen = {}
    real = p.module.forward

    def spy(*a, **kw):
        out = real(*a, **kw)
        seen.update(keep=kw.get("logits_to_keep"), shape=tuple(out.logits.shape))
        return out

    monkeypatch.setattr(p.module, "forward", spy)
    with torch.no_grad():
        st = p.evaluate(p.prepare(data))
    assert seen["keep"] == 4 and seen["shape"][1] == 4  # the widest response, not the prompt
    monkeypatch.undo()
    for i, d in enumerate(data):
        n = len(d["response"])
        assert torch.allclose(st.logp[i, :n], plain_logp(p.module, d["prompt"], d["response"]), atol=1e-5)
        assert st.mask[i].tolist() == [1.0] * n + [0.0] * (4 - n)


# ---- score mode: per-token mean

def test_score_norm_mean_divides_each_candidate_by_its_own_token_count():
    s, m = tiny(mode="score"), tiny(mode="score", score_norm="mean")
    cands, prompt, resp = s.score_item(ctx())
    lengths = torch.tensor([len(r) for r in resp], dtype=torch.float64)
    assert len(set(lengths.tolist())) > 1
    for impl in ("expand", "packed"):
        with torch.no_grad():
            total = s.candidate_logps([(prompt, resp)], impl=impl)[0].double()
            mean = m.candidate_logps([(prompt, resp)], impl=impl)[0].double()
        assert torch.allclose(mean, total / lengths, atol=1e-5)
    # the policy is the softmax of the mean scores at the policy temperature
    d = m.act([ctx()], np.random.default_rng(0), temperature=1.0)[0]
    with torch.no_grad():
        st = m.evaluate(m.prepare([d.data]))
    expect = torch.log_softmax(mean, 0)[d.data["choice"]]
    assert float(st.logp[0, 0]) == pytest.approx(float(expect), abs=1e-4)
    assert d.logp == pytest.approx(float(expect), abs=1e-4)
    with pytest.raises(ProasError, match="policy.lm.score_norm"):
        build_config(["policy=lm", "policy.lm.model_config=tiny", "policy.lm.score_norm=max"])


def test_score_norm_mean_does_not_favour_short_candidates():
    """With equal per-token log-probs a long candidate's sum is lower, its mean the same."""
    p = tiny(mode="score", score_norm="mean")
    q = tiny(mode="score")
    items = [([1, 2, 3], [[4, 5], [4, 5, 4, 5, 4, 5]])]
    for pol in (p, q):  # a uniform model: every token at log(1 / vocabulary)
        with torch.no_grad():
            pol.module.lm_head.weight.zero_()
    mean = p.candidate_logps(items, impl="packed")[0]
    total = q.candidate_logps(items, impl="packed")[0]
    assert torch.allclose(mean[0], mean[1], atol=1e-5)
    assert float(total[1]) < float(total[0]) - 1.0


def test_sft_of_the_lm_clips_gradients_and_follows_the_schedule(tmp_path, monkeypatch):
    import json

    from proas.baselines.sft import SFTOptions, train_sft

    clipped = []
    real = torch.nn.utils.clip_grad_norm_

    def spy(params, max_norm, *a, **k):
        clipped.append(max_norm)
        return real(params, max_norm, *a, **k)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    c = build_config(["env.name=toy_env:make_env", "env.options.n_places=4", "env.options.max_steps=8",
                      "env.options.n_train=32", "env.options.n_valid=16", "train.progress=false",
                      "env.fixed_val_set.enabled=false", "policy=lm", "policy.lm.model_config=tiny",
                      "algo.max_grad_norm=0.5", "policy.lm.lr_schedule=linear", "policy.lm.warmup_ratio=0.25"])
    train_sft(c, tmp_path / "sft", SFTOptions(epochs=4, max_tasks=2, lr=1e-3, batch_size=64))
    rows = [json.loads(x) for x in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()][1:]
    # one batch an epoch: the rate of epoch k's batch is the schedule's at step k - 1
    assert [r["sft/lr"] for r in rows] == pytest.approx([0.0, 1e-3, 2e-3 / 3, 1e-3 / 3])
    assert clipped == [0.5] * 4 and all(r["sft/grad_norm"] > 0 for r in rows)
