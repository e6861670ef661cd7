"""``policy.lm.sdpa_kernel``: holding PyTorch's sdpa to one kernel on a GPU."""

from __future__ import annotations

import pytest
import torch

from proas.errors import ProasError
from proas.lm.options import SDPA_KERNELS, SDPA_SWITCHES, hold_sdpa_kernel
from proas.train.config import build_config

B = torch.backends.cuda


def _flags() -> dict[str, bool]:
    return {"flash": B.flash_sdp_enabled(), "efficient": B.mem_efficient_sdp_enabled(),
            "math": B.math_sdp_enabled(), "cudnn": B.cudnn_sdp_enabled()}


@pytest.fixture
def restore_flags():
    saved = _flags()
    yield
    B.enable_flash_sdp(saved["flash"])
    B.enable_mem_efficient_sdp(saved["efficient"])
    B.enable_math_sdp(saved["math"])
    B.enable_cudnn_sdp(saved["cudnn"])


@pytest.mark.parametrize("kernel, want", [("efficient", {"flash", "efficient", "math"}), ("math", {"math"}),
                                          ("cudnn", {"cudnn", "math"})])
def test_a_held_kernel_and_its_fallbacks_are_the_only_ones_enabled_on_cuda(kernel, want, restore_flags):
    hold_sdpa_kernel(kernel, "cuda:0")
    assert {k for k, on in _flags().items() if on} == want


@pytest.mark.parametrize("kernel", SDPA_KERNELS)
def test_every_choice_can_still_run_a_call_without_a_mask_on_grouped_kv_heads(kernel, restore_flags):
    """The memory-efficient and cuDNN kernels take no ``enable_gqa`` call (transformers makes one
    when a batch has no padding): held to ``efficient`` alone, a household SFT run stopped with
    "Invalid backend" on an H100. Flash or math must stay on for it, and cuDNN's kernel (NaN
    gradients at some padded lengths) is on only when asked for."""
    hold_sdpa_kernel(kernel, "cuda")
    assert B.flash_sdp_enabled() or B.math_sdp_enabled()
    assert B.cudnn_sdp_enabled() == (kernel == "cudnn")
    assert SDPA_SWITCHES[kernel][0] == kernel and kernel in {k for k, on in _flags().items() if on}


@pytest.mark.parametrize("kernel, device", [(None, "cuda"), ("math", "cpu")])
def test_no_kernel_or_a_cpu_leaves_pytorchs_choice(kernel, device, restore_flags):
    before = _flags()
    hold_sdpa_kernel(kernel, device)
    assert _flags() == before


def test_the_config_refuses_a_kernel_that_takes_no_mask():
    assert build_config(["policy=lm", "policy.lm.model_config=tiny",
                         "policy.lm.sdpa_kernel=efficient"]).policy.lm.sdpa_kernel == "efficient"
    with pytest.raises(ProasError, match="sdpa_kernel='flash' is not one of"):
        build_config(["policy=lm", "policy.lm.model_config=tiny", "policy.lm.sdpa_kernel=flash"])


@pytest.mark.parametrize("over, want", [([], "efficient"), (["policy.lm.sdpa_kernel=null"], None),
                                        (["policy.lm.sdpa_kernel=cudnn"], "cudnn")])
def test_building_an_lm_policy_holds_the_configured_kernel_efficient_by_default(monkeypatch, over, want):
    """PyTorch's own choice on an H100 (cuDNN's kernel) ran a shop RL step 2.2x slower and gives
    NaN gradients at some padded lengths (docs/lm.md), so a policy holds ``efficient`` unless
    told otherwise."""
    import proas.lm.policy as lm_policy

    calls = []
    monkeypatch.setattr(lm_policy, "hold_sdpa_kernel", lambda kernel, device: calls.append((kernel, device)))
    cfg = build_config(["policy=lm", "policy.lm.model_config=tiny", "policy.lm.device=cpu", *over])
    lm_policy.LMPolicy.from_config(cfg.policy.lm, seed=0)
    assert calls == [(want, "cpu")]


def test_an_unpadded_batch_makes_the_grouped_kv_call_without_a_mask_that_needs_a_fallback(monkeypatch):
    """The premise of ``SDPA_SWITCHES``: the scratch models have grouped KV heads, and on a batch
    without padding transformers calls sdpa with no mask and ``enable_gqa`` (on CUDA as here),
    which only flash and math take. A padded batch passes a mask instead."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from proas.lm.tools import SCRATCH_SIZES

    arch = SCRATCH_SIZES["small"]
    assert arch["num_key_value_heads"] < arch["num_attention_heads"]
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, **{**arch, "num_hidden_layers": 1},
                                         attn_implementation="sdpa")).eval()
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append((kwargs.get("attn_mask") is None, kwargs.get("enable_gqa", False)))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    ids = torch.randint(1, 64, (2, 9))
    with torch.no_grad():
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
        assert calls == [(True, True)]
        calls.clear()
        model(input_ids=ids, attention_mask=torch.tensor([[0, 0, 0] + [1] * 6, [1] * 9]))
    assert calls == [(False, False)]
