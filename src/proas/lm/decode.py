"""Static-cache decoding for the ``lm`` policy (``policy.lm.decode=static``).

Plain ``generate`` re-plans every step on the host: it grows a dynamic KV cache, rebuilds the
attention mask and launches each layer's kernels one by one, so at small per-token work (one
token per row) the GPU mostly waits for Python. This decoder allocates the KV buffers once
(``(rows, kv_heads, slots, head_dim)`` per layer, reused by later calls), fills them with a
prefill pass over the left-padded prompts, and runs the one-token forward of every later step on fixed input, position,
mask and cache-slot buffers. Because nothing in that forward changes shape or address, on CUDA it
is captured once as a CUDA graph per batch bucket and replayed; on CPU the same step runs eagerly.

A batch is padded up to a power-of-two *bucket* of rows, and its cache length (widest prompt plus
the response budget) rounded up to a multiple of 256 slots, so a rollout whose batch shrinks as
episodes end reuses a handful of graphs; the KV buffers of every bucket are views of one buffer,
grown to the most rows and slots seen so far (a growth re-captures the graphs). Pad rows hold a
one-token prompt and are ignored. Sampling (full vocabulary at the temperature, as ``generate``
with ``top_p=1, top_k=0``) and the temperature-1 log-prob of each drawn token run eagerly on the
step's ``(rows, vocab)`` logits.

The attention mask is built here, not by the model: left padding and the cache's unused slots are
masked with an additive ``(rows, 1, query, length)`` mask passed as the model's ``attention_mask``:
Hugging Face models take a 4D mask as given. (A per-layer-type mapping ``{"full_attention": mask}``
is not read by every version: Llama under transformers 5.17 refuses it.) Positions
are explicit (a row's position counts its own tokens), as ``generate`` computes them. The
one-token step of an sdpa model attends through ``step_attention``, which reads each key/value
head once instead of copying it for every query head that shares it.
"""

from __future__ import annotations

import functools
import inspect
import time
import warnings
from typing import Any, Sequence

import torch
from torch import nn

__all__ = ["STEP_ATTENTION", "StaticDecoder", "bucket_rows", "static_unsupported", "step_attention"]


def bucket_rows(n: int) -> int:
    """The bucket of a batch of ``n`` rows: the smallest power of two ``>= n``."""
    return 1 << max(0, (n - 1).bit_length())


def _base_model(model: nn.Module) -> nn.Module:
    """The transformers model under a peft wrapper (the model itself otherwise)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def _cache_kwarg(model: nn.Module) -> str:
    """The forward keyword of the KV cache: ``cache`` in recent transformers, ``past_key_values``
    before (the model's own signature says which)."""
    params = inspect.signature(_base_model(model).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _logits_kwarg(model: nn.Module) -> dict[str, int]:
    """The forward keyword that keeps the last position's logits only (named differently before
    transformers 4.50)."""
    params = inspect.signature(_base_model(model).forward).parameters
    for name in ("logits_to_keep", "num_logits_to_keep"):
        if name in params:
            return {name: 1}
    return {}


#: the attention of the one-token step, registered with transformers' ``AttentionInterface``
STEP_ATTENTION = "proas_step_sdpa"


def step_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                   **kwargs) -> tuple[torch.Tensor, None]:
    """sdpa for one query token per row that reads each key/value head once.

    ``query`` ``(B, heads, 1, dim)``, ``key``/``value`` ``(B, kv_heads, slots, dim)``, the mask
    ``(B, 1, 1, slots)``. The query heads that share a key/value head become that head's query
    rows, ``(B, kv_heads, heads / kv_heads, dim)``, instead of the key/value heads being copied
    ``heads / kv_heads`` times (what the library's sdpa path does whenever a mask is given, in
    some releases), which would multiply the bytes a decode step moves. Anything else goes to
    the library's sdpa. Returns ``(B, 1, heads, dim)``, as attention functions do.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    b, heads, q, dim = query.shape
    kv_heads = key.shape[1]
    if q != 1 or heads == kv_heads:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(query.reshape(b, kv_heads, heads // kv_heads, dim),
                                                           key, value, attn_mask=attention_mask, scale=scaling)
    return out.reshape(b, 1, heads, dim), None


def static_unsupported(model: nn.Module) -> str | None:
    """Why ``model`` cannot decode with this decoder, or None when it can.

    It needs a decoder whose every layer is full attention (sliding-window layers keep a rolling
    cache), a RoPE whose frequencies do not depend on the positions seen (captured graphs cannot
    branch on them), sdpa or eager attention (both take an additive 4-D mask; flash-attention
    kernels take none) and a forward with ``position_ids`` and a mask mapping, as Hugging Face
    causal LMs have.
    """
    base = _base_model(model)
    cfg = getattr(base, "config", None)
    if cfg is None:
        return "the model has no Hugging Face config"
    cfg = cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg
    types = set(getattr(cfg, "layer_types", None) or ["full_attention"])
    if types != {"full_attention"}:
        return f"its layers are {sorted(types)}, not all full attention"
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    rope_type = str(rope.get("rope_type", rope.get("type", "default"))) if isinstance(rope, dict) else "default"
    if "dynamic" in rope_type or rope_type == "longrope":
        return f"its RoPE ({rope_type}) recomputes frequencies from the positions on the host"
    impl = getattr(cfg, "_attn_implementation", None) or "eager"
    if impl not in ("sdpa", "eager"):
        return f"attention implementation {impl!r} (sdpa or eager needed)"
    if "position_ids" not in inspect.signature(base.forward).parameters:
        return "its forward takes no position_ids"
    return None


class _SlotCache:
    """The KV cache the model writes into: per-layer ``(rows, heads, length, dim)`` views of the
    shared buffers, written at the slots in ``self.slots`` (a device tensor set before each
    forward, so a captured graph reads the step's slot from memory).

    It implements the one cache method a Hugging Face attention layer calls, ``update``; the
    model never asks it for a length because positions and the mask are passed in.
    """

    def __init__(self, store: "_Store", rows: int, length: int):
        self.store = store
        self.rows = rows
        self.length = length
        self.slots = torch.zeros(1, dtype=torch.long, device=store.device)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        keys, values = self.store.layer(layer_idx, key_states, value_states)
        keys, values = keys[: self.rows, :, : self.length], values[: self.rows, :, : self.length]
        keys.index_copy_(2, self.slots, key_states)
        values.index_copy_(2, self.slots, value_states)
        return keys, values


class _Store:
    """KV buffers for ``rows`` rows and ``max_len`` slots, allocated per layer on first use."""

    def __init__(self, rows: int, max_len: int, device: torch.device):
        self.rows = rows
        self.max_len = max_len
        self.device = device
        self.layers: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def layer(self, idx: int, key_states: torch.Tensor, value_states: torch.Tensor):
        if idx not in self.layers:
            _, h, _, dk = key_states.shape
            self.layers[idx] = (
                torch.zeros((self.rows, h, self.max_len, dk), dtype=key_states.dtype, device=self.device),
                torch.zeros((self.rows, h, self.max_len, value_states.shape[-1]), dtype=value_states.dtype,
                            device=self.device),
            )
        return self.layers[idx]


class _Bucket:
    """Static buffers of one bucket's one-token step and, on CUDA, its captured graph."""

    def __init__(self, store: _Store, rows: int, length: int, dtype: torch.dtype):
        dev = store.device
        self.rows = rows
        self.length = length
        self.cache = _SlotCache(store, rows, length)
        self.slot = self.cache.slots  # the step's cache slot: the captured graph reads this tensor
        self.ids = torch.zeros((rows, 1), dtype=torch.long, device=dev)
        self.pos = torch.zeros((rows, 1), dtype=torch.long, device=dev)
        self.mask = torch.zeros((rows, 1, 1, length), dtype=dtype, device=dev)
        self.graph: Any = None
        self.logits: torch.Tensor | None = None  # the graph's output buffer, (rows, vocab)


class StaticDecoder:
    """Batched sampling from a causal LM with preallocated KV buffers (see the module docstring).

    ``max_len`` bounds prompt plus response tokens. A batch attends over the slots it can fill
    (its widest prompt plus ``max_new_tokens``) rounded up to a multiple of ``length_step``, not
    over all ``max_len``: attention reads every slot it is given each step. ``graphs``: capture
    the one-token step as a CUDA graph per (rows, length) bucket (default: on CUDA), all in one
    memory pool (they never run at once); ``False`` runs the same step eagerly.
    ``prefill_chunk`` bounds the prompt tokens per prefill pass, so its mask and activations stay
    ``(rows, chunk, ...)`` however long the prompts. Whether every row has stopped is read every
    ``check_every`` steps (on the GPU each read waits for the queue to drain).
    """

    def __init__(self, model: nn.Module, max_len: int, pad_id: int, *, graphs: bool | None = None,
                 prefill_chunk: int = 512, length_step: int = 256, check_every: int | None = None):
        self.model = model
        self.max_len = max_len
        self.pad_id = pad_id
        self.prefill_chunk = prefill_chunk
        self.length_step = length_step
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.check_every = check_every or (4 if self.device.type == "cuda" else 1)
        self.graphs = self.device.type == "cuda" if graphs is None else graphs
        self._cache_kw = _cache_kwarg(model)
        self._config = _base_model(model).config
        # sdpa models take the one-token step through ``step_attention``; eager ones keep theirs
        self._step_attn = getattr(self._config, "_attn_implementation", None) == "sdpa"
        if self._step_attn:
            from transformers import AttentionInterface

            AttentionInterface.register(STEP_ATTENTION, step_attention)
        self._keep = _logits_kwarg(model)
        self._store: _Store | None = None
        self._buckets: dict[tuple[int, int], _Bucket] = {}
        self._params: tuple = ()
        self._pool: Any = None
        #: seconds spent capturing graphs (the first batch of each bucket), for benchmarks
        self.capture_s = 0.0

    # ---- the forward passes
    def _forward(self, cache: _SlotCache, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=ids, position_ids=pos, attention_mask=mask, use_cache=True,
                         **{self._cache_kw: cache}, **self._keep)
        return out.logits[:, -1]

    def _forward_step(self, b: "_Bucket") -> torch.Tensor:
        """The one-token forward of bucket ``b`` (what a graph captures), with ``step_attention``
        for sdpa models: the config names the attention function, so it is switched for the
        call and switched back."""
        if not self._step_attn:
            return self._forward(b.cache, b.ids, b.pos, b.mask)
        impl = self._config._attn_implementation
        self._config._attn_implementation = STEP_ATTENTION
        try:
            return self._forward(b.cache, b.ids, b.pos, b.mask)
        finally:
            self._config._attn_implementation = impl

    def _bucket(self, rows: int, length: int) -> _Bucket:
        params = tuple(p.data_ptr() for p in self.model.parameters())
        if params != self._params:  # weights moved (not updated in place): graphs point at old memory
            self._buckets.clear()
            self._params = params
        if self._store is None or self._store.rows < rows or self._store.max_len < length:
            # grown to the largest batch and length seen, not allocated at max_len up front
            old = self._store
            self._store = None  # the old buffers go before the new ones are allocated
            self._buckets.clear()
            self._store = _Store(max(rows, old.rows if old else 0), max(length, old.max_len if old else 0),
                                 self.device)
            del old
        if (rows, length) not in self._buckets:
            b = _Bucket(self._store, rows, length, self.dtype)
            if self.graphs:
                try:
                    self._capture(b)
                except RuntimeError as exc:  # a host sync or other uncapturable op in the forward
                    warnings.warn(f"lm decode: the one-token step cannot be captured as a CUDA graph "
                                  f"({str(exc).splitlines()[0]}); it runs eagerly", RuntimeWarning, stacklevel=2)
                    self.graphs = False
                    b.graph, b.logits = None, None
            self._buckets[rows, length] = b
        return self._buckets[rows, length]

    def _capture(self, b: _Bucket) -> None:
        """Record ``b``'s one-token step as a CUDA graph: two eager warm-up steps on a side stream
        (they allocate the KV buffers and let kernels pick their algorithms; the garbage they
        write at slot 0 is overwritten by the next prefill), then the capture."""
        t0 = time.perf_counter()
        step = functools.partial(self._forward_step, b)
        b.slot.zero_()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(stream)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        # a graph's output is read right after its own replay, before any other graph runs, so
        # one pool for all of them is safe
        with torch.cuda.graph(graph, pool=self._pool):
            b.logits = step()
        b.graph = graph
        torch.cuda.synchronize()
        self.capture_s += time.perf_counter() - t0

    def _step(self, b: _Bucket) -> torch.Tensor:
        if b.graph is not None:
            b.graph.replay()
            return b.logits
        return self._forward_step(b)

    def _prefill(self, b: _Bucket, ids: torch.Tensor, valid: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Write the prompts' keys and values at slots ``0..width-1``; the last position's logits.

        Query ``q`` attends to key ``k`` when ``k <= q`` and ``k`` is a real token; a pad query
        also attends to itself, so that no row of the softmax is empty.
        """
        rows, width = ids.shape
        neg = torch.finfo(self.dtype).min
        keys = torch.arange(b.length, device=self.device)
        key_ok = torch.zeros((rows, b.length), dtype=torch.bool, device=self.device)
        key_ok[:, :width] = valid
        logits = None
        for a in range(0, width, self.prefill_chunk):
            e = min(width, a + self.prefill_chunk)
            q = torch.arange(a, e, device=self.device)
            allowed = (key_ok[:, None, :] & (keys[None, None, :] <= q[None, :, None])) | (keys == q[:, None])[None]
            mask = torch.full(allowed.shape, neg, dtype=self.dtype, device=self.device)
            mask = mask.masked_fill_(allowed, 0.0)[:, None]  # (rows, 1, chunk, length)
            b.cache.slots = q
            logits = self._forward(b.cache, ids[:, a:e], pos[:, a:e], mask)
        b.cache.slots = b.slot
        return logits

    # ---- sampling
    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float,
                 stop_ids: Sequence[int], rows: int | None = None, min_new_tokens: int = 0
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(tokens, logp)``, both ``(len(prompts), n)`` on the CPU, ``n <= max_new_tokens``.

        ``tokens[i]`` is row ``i``'s response up to and including its first stop id (later
        entries are unspecified); ``logp[i, t]`` is the temperature-1 log-probability of
        ``tokens[i, t]``. ``temperature`` 0 is greedy. Decoding ends when every row has stopped
        or after ``max_new_tokens``. ``rows`` overrides the bucket (at least ``len(prompts)``);
        ``min_new_tokens``: stop ids cannot be drawn before that many tokens (``generate``'s
        ``min_new_tokens``: their logits are set to -inf for the draw; ``logp`` stays the raw
        model's).
        """
        n = len(prompts)
        width = max(len(p) for p in prompts)
        if width + max_new_tokens > self.max_len:
            raise ValueError(f"{width} prompt + {max_new_tokens} new tokens exceed the cache's {self.max_len} slots")
        rows = bucket_rows(n) if rows is None else rows
        if rows < n:
            raise ValueError(f"rows={rows} is fewer than the {n} prompts")
        step = self.length_step
        b = self._bucket(rows, min(self.max_len, -(-(width + max_new_tokens) // step) * step))
        dev = self.device
        ids = torch.full((rows, width), self.pad_id, dtype=torch.long)
        valid = torch.zeros((rows, width), dtype=torch.bool)
        valid[n:, -1] = True  # a pad row: a one-token prompt
        for i, p in enumerate(prompts):  # left padding, as generate's
            ids[i, width - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
            valid[i, width - len(p):] = True
        ids, valid = ids.to(dev), valid.to(dev)
        pos = (valid.long().cumsum(-1) - 1).clamp(min=0)
        logits = self._prefill(b, ids, valid, pos)

        neg = torch.finfo(self.dtype).min
        b.mask.fill_(neg)
        b.mask[:, 0, 0, :width] = torch.where(valid, 0.0, neg).to(self.dtype)
        next_pos = pos[:, -1:] + 1
        stops = torch.as_tensor(list(stop_ids), dtype=torch.long, device=dev)
        tokens = torch.zeros((rows, max_new_tokens), dtype=torch.long, device=dev)
        logp = torch.zeros((rows, max_new_tokens), dtype=torch.float32, device=dev)
        done = torch.zeros(rows, dtype=torch.bool, device=dev)
        done[n:] = True
        steps = 0
        for t in range(max_new_tokens):
            lg = logits.float()
            draw = lg
            if t < min_new_tokens and len(stop_ids):
                draw = lg.index_fill(-1, stops, float("-inf"))
            if temperature > 0:
                tok = torch.multinomial(torch.softmax(draw / temperature, dim=-1), 1).squeeze(-1)
            else:
                tok = draw.argmax(-1)
            tokens[:, t] = tok
            logp[:, t] = lg.gather(-1, tok[:, None]).squeeze(-1) - torch.logsumexp(lg, dim=-1)
            steps = t + 1
            if len(stop_ids):
                done |= torch.isin(tok, stops)
                # reading the flag waits for the GPU; every few steps lets the host queue ahead
                # (a row's tokens after its stop are never read)
                if t % self.check_every == self.check_every - 1 and bool(done.all()):
                    break
            if t + 1 == max_new_tokens:
                break
            slot = width + t
            b.ids.copy_(tok[:, None])
            b.pos.copy_(next_pos)
            next_pos += 1
            b.mask[:, 0, 0, slot] = 0.0
            b.slot.fill_(slot)
            logits = self._step(b)
        return tokens[:n, :steps].cpu(), logp[:n, :steps].cpu()

