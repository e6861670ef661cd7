"""``policy.lm.sdpa_kernel``: holding PyTorch's sdpa to one kernel on a GPU."""

from __future__ import annotations

import pytest
import torch

from proas.errors import ProasError
from proas.lm.options import SDPA_KERNELS, hold_sdpa_kernel
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


@pytest.mark.parametrize("kernel", SDPA_KERNELS)
def test_a_held_kernel_is_the_only_one_enabled_on_cuda(kernel, restore_flags):
    hold_sdpa_kernel(kernel, "cuda:0")
    assert {k for k, on in _flags().items() if on} == {kernel}


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
