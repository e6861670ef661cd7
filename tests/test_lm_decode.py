"""``policy.lm.decode=static``: the static-cache decoder gives what ``generate`` gives.

CPU tests run the decoder's step eagerly with a tiny random Qwen2 model; the CUDA tests (skipped
without a GPU) compare the captured-graph replay against the eager step and against ``generate``.
"""

import numpy as np
import pytest
import torch

from proas.lm import decode as lm_decode
from proas.lm.decode import StaticDecoder, bucket_rows
from proas.lm.policy import LMPolicy
from proas.policies.base import Context
from proas.train.config import build_config

torch.set_num_threads(1)

# the random model rarely writes an end token: most responses are cut (tested once, below)
pytestmark = pytest.mark.filterwarnings("ignore:lm policy. a response reached:RuntimeWarning")

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def ctx(step, obs="You arrive at desk 1."):
    history = [(f"obs {k}", f"go to desk {k}") for k in range(step)]
    return Context("household", "put some key on bed", obs, history,
                   ["go to bed 1", "take key 1 from desk 1", "help"], [], step)


#: prompts of different lengths, so the batch is left-padded
CONTEXTS = [ctx(0), ctx(3, "You open the drawer 1. The drawer 1 is open. In it, you see a key 1."), ctx(1)]


def policy(**over):
    # CPU unless told: these tests hold fp32 tolerances, and on a GPU machine ``device=auto``
    # would give bf16 (the CUDA tests below ask for cuda themselves)
    over = {"max_new_tokens": 12, "device": "cpu", **over}
    cfg = build_config(["policy=lm", "policy.lm.model_config=tiny", *[f"policy.lm.{k}={v}" for k, v in over.items()]])
    return LMPolicy.from_config(cfg.policy.lm, seed=0)


def prompts(p, contexts=CONTEXTS):
    return [p.fit_prompt(c)[0] for c in contexts]


def test_bucket_is_the_next_power_of_two():
    assert [bucket_rows(n) for n in (1, 2, 3, 4, 5, 8, 9, 100, 128)] == [1, 2, 4, 4, 8, 8, 16, 128, 128]


def test_decode_defaults_to_hf_and_rejects_unknown_decoders():
    assert policy().decode == "hf"
    with pytest.raises(Exception, match="policy.lm.decode"):
        build_config(["policy=lm", "policy.lm.model_config=tiny", "policy.lm.decode=vllm"])


def test_greedy_static_equals_hf_on_a_left_padded_batch():
    p = policy(decode="static")
    ids = prompts(p)
    assert len({len(x) for x in ids}) == 3
    hf_tok, hf_logp = p.generate_ids(ids, 0, decode="hf")
    st_tok, st_logp = p.generate_ids(ids, 0, decode="static")
    assert st_tok.tolist() == hf_tok.tolist()
    assert torch.allclose(st_logp, hf_logp, atol=1e-4)


def test_greedy_static_decisions_equal_hf_decisions():
    p = policy(decode="static")
    with pytest.warns(RuntimeWarning):  # the random model writes no end token: truncated
        st = p.act(CONTEXTS, np.random.default_rng(0), temperature=0)
    p.decode = "hf"
    hf = p.act(CONTEXTS, np.random.default_rng(0), temperature=0)
    for a, b in zip(st, hf):
        assert a.data == b.data
        assert (a.action, a.response, a.malformed) == (b.action, b.response, b.malformed)
        assert a.logp == pytest.approx(b.logp, abs=1e-4)


def test_stop_tokens_end_rows_as_in_hf():
    p = policy(decode="static")
    ids = prompts(p)
    tok, _ = p.generate_ids(ids, 0, decode="hf")
    rows = [r.tolist() for r in tok]
    # a token that row 0 writes at step 4 and no other row writes before it ends
    stop = rows[0][4]
    assert stop not in rows[0][:4]
    p.stop_ids = [stop]
    st = p.act(CONTEXTS, np.random.default_rng(0), temperature=0)
    p.decode = "hf"
    hf = p.act(CONTEXTS, np.random.default_rng(0), temperature=0)
    assert st[0].data["response"] == rows[0][:5] and not st[0].data["truncated"]
    assert [d.data for d in st] == [d.data for d in hf]
    assert [d.logp for d in st] == pytest.approx([d.logp for d in hf], abs=1e-4)


def test_decoding_stops_when_every_row_has_stopped():
    p = policy(decode="static")
    ids = prompts(p)
    tok, _ = p.generate_ids(ids, 0, decode="static")
    p.stop_ids = sorted({r[2] for r in tok.tolist()})  # every row stops by its third token
    tok2, logp2 = p.generate_ids(ids, 0, decode="static")
    assert tok2.shape[1] <= 3 and logp2.shape == tok2.shape
    # checked every 4 steps (the GPU default): at most 3 steps more, the same tokens before
    every4 = StaticDecoder(p.module, p.max_prompt_tokens + 12, p.tokenizer.pad_token_id, check_every=4)
    tok4, _ = every4.generate(ids, 12, 0.0, p.stop_ids)
    assert tok4.shape[1] == 4 and tok4[:, : tok2.shape[1]].tolist() == tok2.tolist()


def test_truncation_is_flagged_and_warned():
    p = policy(decode="static", max_new_tokens=5)
    with pytest.warns(RuntimeWarning, match="max_new_tokens=5"):
        ds = p.act(CONTEXTS, np.random.default_rng(0), temperature=0)
    assert all(d.data["truncated"] and len(d.data["response"]) == 5 for d in ds)


def test_bucket_padding_rows_change_nothing():
    p = policy(decode="static")
    ids = prompts(p)
    dec = p.static_decoder()
    exact = dec.generate(ids, 12, 0.0, p.stop_ids, rows=3)
    for rows in (4, 8):
        tok, logp = dec.generate(ids, 12, 0.0, p.stop_ids, rows=rows)
        assert tok.tolist() == exact[0].tolist()
        assert torch.allclose(logp, exact[1], atol=1e-5)


def test_shrinking_batches_reuse_the_buffers_correctly():
    p = policy(decode="static")
    ids = prompts(p)
    first = p.generate_ids(ids[:1], 0, decode="hf")
    p.generate_ids(ids, 0, decode="static")  # a larger batch first, different width
    again = p.generate_ids(ids[:1], 0, decode="static")
    assert again[0].tolist() == first[0].tolist()
    assert torch.allclose(again[1], first[1], atol=1e-4)


def test_cache_length_buckets_follow_the_widest_prompt():
    p = policy()
    ids = prompts(p)
    dec = StaticDecoder(p.module, p.max_prompt_tokens + p.max_new_tokens, p.tokenizer.pad_token_id, length_step=16)
    for sub in (ids[:1], ids, ids[2:], ids[:1]):
        tok, logp = dec.generate(sub, 12, 0.0, p.stop_ids)
        hf = p.generate_ids(sub, 0, decode="hf")
        assert tok.tolist() == hf[0].tolist()
        assert torch.allclose(logp, hf[1], atol=1e-4)
    width = max(len(x) for x in ids)
    assert (4, -(-(width + 12) // 16) * 16) in dec._buckets
    assert len({length for _, length in dec._buckets}) == 3  # three widths, three lengths


def test_sampled_static_log_probs_equal_evaluate():
    p = policy(decode="static")
    torch.manual_seed(0)
    ds = p.act(CONTEXTS, np.random.default_rng(0), temperature=1.0)
    vocab = p.module.config.vocab_size
    for d in ds:
        assert 1 <= len(d.data["response"]) <= 12
        assert all(0 <= t < vocab for t in d.data["response"])
    with torch.no_grad():
        st = p.evaluate(p.prepare([d.data for d in ds]))
    assert (st.logp * st.mask).sum(1).tolist() == pytest.approx([d.logp for d in ds], abs=1e-3)


def test_sampling_follows_the_torch_seed():
    p = policy(decode="static")
    ids = prompts(p)
    torch.manual_seed(3)
    a = p.generate_ids(ids, 1.0)
    torch.manual_seed(3)
    b = p.generate_ids(ids, 1.0)
    assert a[0].tolist() == b[0].tolist()


def test_min_new_tokens_forbids_stop_ids_as_generate_does():
    p = policy(decode="static")
    ids = prompts(p)
    tok, _ = p.generate_ids(ids, 0, decode="hf")
    p.stop_ids = [tok[0, 1].item()]  # row 0 would stop at its second token
    st = p.generate_ids(ids, 0, decode="static", min_new_tokens=12)
    hf = p.generate_ids(ids, 0, decode="hf", min_new_tokens=12)
    assert st[0].shape == (3, 12) and st[0].tolist() == hf[0].tolist()
    assert torch.allclose(st[1], hf[1], atol=1e-4)


def test_lora_model_decodes_statically():
    p = policy(decode="static", lora_rank=4)
    assert p.static_decoder() is not None
    with torch.no_grad():  # adapters that change the output (peft starts them at zero)
        for name, w in p.module.named_parameters():
            if "lora_B" in name:
                w.normal_(0, 0.5)
    ids = prompts(p)
    hf = p.generate_ids(ids, 0, decode="hf")
    st = p.generate_ids(ids, 0, decode="static")
    assert st[0].tolist() == hf[0].tolist()
    assert torch.allclose(st[1], hf[1], atol=1e-4)


def test_eager_attention_decodes_statically():
    p = policy(decode="static")
    p.module.config._attn_implementation = "eager"
    ids = prompts(p)
    hf = p.generate_ids(ids, 0, decode="hf")
    st = p.generate_ids(ids, 0, decode="static")
    assert st[0].tolist() == hf[0].tolist()
    assert torch.allclose(st[1], hf[1], atol=1e-4)


def test_step_attention_equals_the_library_sdpa_with_repeated_heads():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    torch.manual_seed(0)
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal, module.training = 3, True, False
    q, k, v = torch.randn(4, 6, 1, 8), torch.randn(4, 2, 10, 8), torch.randn(4, 2, 10, 8)
    mask = torch.where(torch.rand(4, 1, 1, 10) < 0.3, torch.finfo(torch.float32).min, 0.0)
    mask[..., 0] = 0.0
    ours, _ = lm_decode.step_attention(module, q, k, v, mask, scaling=0.3)
    ref, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.3)
    assert ours.shape == ref.shape == (4, 1, 6, 8)
    assert torch.allclose(ours, ref, atol=1e-6)


def test_static_steps_use_step_attention_and_restore_the_config(monkeypatch):
    p = policy(decode="static")
    calls = []
    real = lm_decode.step_attention
    monkeypatch.setattr(lm_decode, "step_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    from transformers import AttentionInterface

    AttentionInterface.register(lm_decode.STEP_ATTENTION, lm_decode.step_attention)
    try:
        p.generate_ids(prompts(p), 0)
    finally:
        AttentionInterface.register(lm_decode.STEP_ATTENTION, real)
    assert calls  # every layer of every one-token step
    assert p.module.config._attn_implementation == "sdpa"


def test_unsupported_model_falls_back_to_hf_with_a_warning(monkeypatch):
    monkeypatch.setattr(lm_decode, "static_unsupported", lambda model: "a reason")
    p = policy(decode="static")
    ids = prompts(p)
    with pytest.warns(RuntimeWarning, match="a reason"):
        st = p.generate_ids(ids, 0)
    assert p.static_decoder() is None
    assert st[0].tolist() == p.generate_ids(ids, 0, decode="hf")[0].tolist()


def test_sliding_window_layers_are_unsupported():
    p = policy()
    p.module.config.layer_types = ["sliding_attention", "full_attention"]
    assert "full attention" in lm_decode.static_unsupported(p.module)


# ---- CUDA: the captured graph replays what the eager step computes


def cuda_policy(**over):
    # fp32 compute: autocast off (the GPU default decodes a bf16 copy, tested in test_lm_training)
    return policy(**{"device": "cuda", "dtype": "fp32", "autocast": "none", **over})


@cuda
def test_graph_replay_equals_eager_static_and_hf_greedy():
    p = cuda_policy(decode="static")
    ids = prompts(p)
    graph = p.static_decoder()
    assert graph.graphs
    eager = StaticDecoder(p.module, graph.max_len, p.tokenizer.pad_token_id, graphs=False)
    hf = p.generate_ids(ids, 0, decode="hf")
    # shrinking and growing batches of different widths: each bucket's graph reads its buffers
    for sub in (ids, ids[:2], ids[1:2], ids, ids[::-1]):
        g = graph.generate(sub, 12, 0.0, p.stop_ids)
        e = eager.generate(sub, 12, 0.0, p.stop_ids)
        assert g[0].tolist() == e[0].tolist()
        assert torch.allclose(g[1], e[1], atol=1e-5)
    g = graph.generate(ids, 12, 0.0, p.stop_ids)
    assert g[0].tolist() == hf[0].tolist()
    assert torch.allclose(g[1], hf[1], atol=1e-4)
    assert {rows for rows, _ in graph._buckets} == {1, 2, 4}
    assert all(b.graph is not None for b in graph._buckets.values())


@cuda
def test_graph_sees_weights_updated_in_place():
    p = cuda_policy(decode="static")
    ids = prompts(p)
    before = p.generate_ids(ids, 0)
    with torch.no_grad():
        for w in p.module.parameters():
            w.mul_(1.5)  # an optimizer step writes in place: the captured graph reads the new values
    after = p.generate_ids(ids, 0)
    hf = p.generate_ids(ids, 0, decode="hf")
    assert not torch.allclose(after[1], before[1], atol=1e-3)
    assert after[0].tolist() == hf[0].tolist()
    assert torch.allclose(after[1], hf[1], atol=1e-4)


@cuda
def test_graph_sampling_log_probs_equal_evaluate():
    p = cuda_policy(decode="static")
    torch.manual_seed(0)
    ds = p.act(CONTEXTS * 3, np.random.default_rng(0), temperature=1.0)
    with torch.no_grad():
        st = p.evaluate(p.prepare([d.data for d in ds]))
    assert (st.logp * st.mask).sum(1).tolist() == pytest.approx([d.logp for d in ds], abs=1e-3)


@cuda
def test_graph_stop_tokens_end_rows_as_in_hf():
    p = cuda_policy(decode="static")
    ids = prompts(p)
    rows = p.generate_ids(ids, 0, decode="hf")[0].tolist()
    p.stop_ids = [rows[0][4]]
    st = p.act(CONTEXTS, np.random.default_rng(0), temperature=0)
    p.decode = "hf"
    hf = p.act(CONTEXTS, np.random.default_rng(0), temperature=0)
    assert [d.data for d in st] == [d.data for d in hf]


@cuda
def test_graph_replay_equals_eager_in_bf16():
    p = cuda_policy(decode="static", dtype="bf16")
    ids = prompts(p) * 5  # 15 rows: bucket 16
    graph = p.static_decoder()
    eager = StaticDecoder(p.module, graph.max_len, p.tokenizer.pad_token_id, graphs=False)
    g = graph.generate(ids, 12, 0.0, p.stop_ids)
    e = eager.generate(ids, 12, 0.0, p.stop_ids)
    assert [rows for rows, _ in graph._buckets] == [16] and all(b.graph is not None for b in graph._buckets.values())
    assert g[0].tolist() == e[0].tolist()
    assert torch.allclose(g[1], e[1], atol=1e-3)


@cuda
def test_graph_of_a_lora_model_equals_hf():
    p = cuda_policy(decode="static", lora_rank=4)
    with torch.no_grad():
        for name, w in p.module.named_parameters():
            if "lora_B" in name:
                w.normal_(0, 0.5)
    ids = prompts(p)
    hf = p.generate_ids(ids, 0, decode="hf")
    st = p.generate_ids(ids, 0)
    assert p.static_decoder().graphs
    assert st[0].tolist() == hf[0].tolist()
    assert torch.allclose(st[1], hf[1], atol=1e-4)
