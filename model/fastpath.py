"""Fast `Runner`: a static KV cache and CUDA-graph-captured block forwards (Qwen3 only).

Why: eager HF is bound by Python and kernel launches (DESIGN §3: 30.8 ms per 1-token forward at
1.7B on an H200 while reading the weights takes ~1 ms). This runner keeps the K/V in
preallocated buffers (B, H_kv, M, D) per layer and runs its own forward over the HF modules'
weights, so every block forward has fixed shapes and can be captured once as a CUDA graph and
replayed:

- a forward writes its K/V at slots [length, length + L) with `index_copy_`; a denoise step's
  K/V is simply overwritten by the next step or by the commit (JetEngine does the same), so
  "crop" only moves the length back — no copies, no allocation;
- attention runs over all M slots with an additive mask that blocks unused slots; GQA is done by
  folding each KV head's query group into the query axis, so SDPA needs no K/V repeat;
- rows that finish stay in the captured batch as idle slots (`select_rows` only remaps), so one
  graph per (batch, L, logits?) serves the whole generation.

Equal to `HFRunner` up to float rounding (test: same tokens at temperature 0 on the tiny model;
`gpu` test: graphs on == graphs off). Not covered: sliding-window layers, tensor parallelism,
paged caches, prompts longer than the cache allocated for the call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F


@dataclass
class StaticCache:
    keys: list[torch.Tensor]            # per layer (B, H_kv, M, D)
    values: list[torch.Tensor]
    length: int = 0
    slots: torch.Tensor | None = None   # physical row of each active row (b,)
    graphs: dict[tuple[int, bool], Any] = field(default_factory=dict)


class StaticRunner:
    """`Runner` with a static KV cache; `use_graphs` captures block forwards (CUDA only)."""

    def __init__(self, model: Any, use_graphs: bool = True) -> None:
        self.model = model
        param = next(model.parameters())
        self.dtype, self.device = param.dtype, param.device
        cfg = model.config
        self.num_kv = cfg.num_key_value_heads
        self.group = cfg.num_attention_heads // cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.use_graphs = use_graphs and self.device.type == "cuda"
        if getattr(cfg, "use_sliding_window", False) and getattr(cfg, "sliding_window", None):
            raise ValueError("StaticRunner does not support sliding-window attention; use HFRunner")
        self._pool: dict[tuple[int, int], StaticCache] = {}

    # --- Runner protocol ------------------------------------------------------------------
    def new_cache(self, batch: int, max_length: int) -> StaticCache:
        """A cache for `batch` rows of up to `max_length` tokens; reused (with its graphs) across calls."""
        m = -(-max_length // 256) * 256  # few distinct sizes -> graphs get reused; aligned for SDPA
        cache = self._pool.get((batch, m))
        if cache is None:
            self._pool.clear()  # one live cache at a time: free the old buffers and graphs
            shape = (batch, self.num_kv, m, self.head_dim)
            n = self.model.config.num_hidden_layers
            cache = StaticCache(keys=[torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(n)],
                                values=[torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(n)])
            self._pool[(batch, m)] = cache
        cache.length = 0
        cache.slots = torch.arange(batch, device=self.device)
        return cache

    def cache_length(self, cache: StaticCache) -> int:
        return cache.length

    def crop(self, cache: StaticCache, length: int) -> None:
        cache.length = min(cache.length, length)   # later writes overwrite the dropped slots

    def select_rows(self, cache: StaticCache, rows: torch.Tensor) -> None:
        assert cache.slots is not None
        cache.slots = cache.slots[rows]

    @torch.no_grad()
    def forward(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache: StaticCache,
                logits: bool = True) -> torch.Tensor:
        """ids (b, L), mask (b, 1, L, K) additive over the first K slots, pos (b, L) -> logits (b, L, V)."""
        b, n = ids.shape
        big_b, m = cache.keys[0].shape[0], cache.keys[0].shape[2]
        k = mask.shape[-1]
        if cache.length + n > m or k > m:
            raise ValueError(f"static cache of {m} slots is too small for {cache.length + n} tokens")
        slots = cache.slots
        assert slots is not None
        # 1. scatter the active rows into full-batch inputs (idle rows repeat their last inputs);
        #    rows only ever leave, in order, so b == B means every row is active in place
        key = (n, logits)
        state = cache.graphs.get(key)
        if state is None:
            state = _Inputs.allocate(big_b, n, m, self.dtype, self.device)
        state.load(ids, mask, pos, cache.length, slots, full=b == big_b)
        # 2. run; block forwards (not the prefill, which starts at slot 0) replay a captured graph
        if self.use_graphs and n <= 16 and cache.length > 0:
            if "graph" not in state.extra:
                self._capture(state, cache, logits)
            state.extra["graph"].replay()
            out = state.extra["out"]
        else:
            out = self._forward(state, cache, logits)
        if n <= 16:  # keep block-sized input buffers (and graphs); a prefill's are dropped
            cache.graphs[key] = state
        cache.length += n
        return out[slots] if logits else out

    # --- the model -------------------------------------------------------------------------
    def _forward(self, s: _Inputs, cache: StaticCache, logits: bool) -> torch.Tensor:
        model = self.model
        h = model.model.embed_tokens(s.ids)                                    # (B, L, hidden)
        cos, sin = model.model.rotary_emb(h, s.pos)                             # (B, L, D)
        cos, sin = cos[:, None], sin[:, None]
        bias = s.mask.repeat(1, 1, self.group, 1)                               # (B, 1, G*L, M)
        big_b, n = s.ids.shape
        for i, layer in enumerate(model.model.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            q = attn.q_norm(attn.q_proj(x).view(big_b, n, -1, self.head_dim)).transpose(1, 2)  # (B, H, L, D)
            k = attn.k_norm(attn.k_proj(x).view(big_b, n, -1, self.head_dim)).transpose(1, 2)  # (B, Hkv, L, D)
            v = attn.v_proj(x).view(big_b, n, -1, self.head_dim).transpose(1, 2)
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
            cache.keys[i].index_copy_(2, s.write, k)
            cache.values[i].index_copy_(2, s.write, v)
            q = q.reshape(big_b, self.num_kv, self.group * n, self.head_dim)   # fold each KV head's group
            o = F.scaled_dot_product_attention(q, cache.keys[i], cache.values[i], attn_mask=bias,
                                               scale=attn.scaling)              # (B, Hkv, G*L, D)
            o = o.reshape(big_b, -1, n, self.head_dim).transpose(1, 2).reshape(big_b, n, -1)
            h = h + attn.o_proj(o)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        if not logits:
            return h[:, :0, :0]
        return model.lm_head(model.model.norm(h))                               # (B, L, V)

    def _capture(self, s: _Inputs, cache: StaticCache, logits: bool) -> None:
        # Warm-up on a side stream (allocator, cuBLAS handles), then capture. Both write K/V at the
        # current slots, which the real step overwrites anyway.
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._forward(s, cache, logits)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            s.extra["out"] = self._forward(s, cache, logits)
        s.extra["graph"] = graph


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


@dataclass
class _Inputs:
    """Static input buffers of one captured shape (full batch B)."""

    ids: torch.Tensor     # (B, L) long
    pos: torch.Tensor     # (B, L) long
    mask: torch.Tensor    # (B, 1, L, M) additive
    write: torch.Tensor   # (L,) long: cache slots this forward writes
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def allocate(cls, big_b: int, n: int, m: int, dtype: torch.dtype, device: torch.device) -> _Inputs:
        mask = torch.full((big_b, 1, n, m), torch.finfo(dtype).min, dtype=dtype, device=device)
        mask[..., 0] = 0  # idle rows attend to slot 0 until they are loaded: no all-blocked rows (NaN)
        return cls(ids=torch.zeros(big_b, n, dtype=torch.long, device=device),
                   pos=torch.zeros(big_b, n, dtype=torch.long, device=device), mask=mask,
                   write=torch.zeros(n, dtype=torch.long, device=device))

    def load(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, length: int, slots: torch.Tensor,
             full: bool) -> None:
        k = mask.shape[-1]
        self.write.copy_(torch.arange(length, length + ids.shape[1], device=self.write.device))
        if full:
            self.ids.copy_(ids)
            self.pos.copy_(pos)
            self.mask[..., :k].copy_(mask)
            self.mask[..., k:].fill_(torch.finfo(self.mask.dtype).min)
        else:
            self.ids[slots] = ids
            self.pos[slots] = pos
            rows = self.mask[slots]
            rows[..., :k] = mask
            rows[..., k:] = torch.finfo(self.mask.dtype).min
            self.mask[slots] = rows
