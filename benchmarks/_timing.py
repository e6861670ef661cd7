"""Timing shared by the lm benchmarks (``lm_decode.py``, ``lm_score.py``); imported as a sibling
module when a benchmark runs as ``python benchmarks/NAME.py``."""

from __future__ import annotations

import time
from typing import Any, Callable

import torch


def timed(fn: Callable[[], Any], repeats: int, device: torch.device,
          seed: int | None = None, warmups: int = 1) -> tuple[float, Any, float | None]:
    """``(seconds per call, the last call's result, peak GiB)`` of ``fn`` over ``repeats`` calls
    after ``warmups`` warm-up calls. On CUDA the timing waits for the GPU, and the peak is the
    most GPU memory allocated while timed; elsewhere it is None. ``seed``: ``torch.manual_seed``
    before every timed call, so that sampled paths draw the same numbers."""
    cuda = device.type == "cuda"
    for _ in range(warmups):
        fn()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    out = None
    for _ in range(repeats):
        if seed is not None:
            torch.manual_seed(seed)
        out = fn()
    if cuda:
        torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    return (time.perf_counter() - t0) / repeats, out, peak
