"""Fast `Runner`: static KV cache, fused layer math (torch.compile) and CUDA-graph block forwards.

Why: eager HF is bound by Python and kernel launches, not by reading the weights (docs/benchmarks.md
profiles one forward: thousands of kernels, the GPU idle most of the wall time). This runner runs
its own Qwen3 forward (`cudice.model.layers`) over the HF
modules' weights, read live, so in-place weight updates (a trainer's optimiser) are seen; when the
weights move (`model.to(...)`), the captured graphs are dropped and captured again:

- the K/V live in preallocated buffers (B, H_kv, M, D) per layer; a block forward writes its K/V
  at slots [length, length + L) with `index_copy_` (small batches on CUDA: the attention kernel
  writes them itself, `fuse_cache_write`), and a denoise step's K/V is overwritten by the
  next step or by the commit (JetEngine does the same), so "crop" only moves the length back;
- a block forward attends under an additive mask that blocks unused slots; on CUDA through one
  Triton kernel per layer (`cudice.model.attention`: split over the keys, each row reads only the
  slots its mask allows, so left padding and unused slots cost nothing), elsewhere through SDPA
  over all M slots; GQA folds each KV head's query group into the query axis (no K/V repeat);
- each layer's q/k/v projections (and gate/up) are one GEMM over one packed weight (a frozen model's
  parameters become views of it: `pack`), so a small batch reads the weights in fewer, wider GEMMs;
- `compile=True` runs the per-token layer math through torch.compile (Inductor fuses RMSNorm,
  q/k norm, RoPE, residual adds and the SwiGLU gate: ~18 kernels per layer instead of ~50);
  the token axis is dynamic, so one compilation serves every batch and block size;
- `use_graphs=True` (CUDA) captures each block forward (batch, L <= 16, logits?) once as a CUDA
  graph and replays it; rows that finish stay in the captured batch as idle slots
  (`select_rows` only remaps), so one graph serves a whole generation;
- the prefill (the first forward into an empty cache) skips padding: rows are grouped by their
  left padding, read off the positions (`pos[r, -1] = L - 1 - pad[r]`), into the runs that cost
  the fewest padded tokens plus passes (`prefill_groups`: one pass per padding would cost a weight
  read each, a single pass all the padding); each group runs from its least padded column, its
  K/V written into its rows' slots. Mixed prompt lengths therefore cost about their real tokens in
  the prefill, and (Triton attention) only their real slots in the decode; each row still owns M
  slots of memory (no paged cache).

Equal to `HFRunner` up to float rounding (tests: same tokens at temperature 0 on the tiny model,
eager and compiled; `gpu` test: graphs on == graphs off). Not covered: sliding-window layers,
tensor parallelism, a paged cache (every row holds M slots), prompts longer than the cache
allocated for the call.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from cudice.model import attention, layers

GRAPH_MAX_TOKENS = 16  # block forwards up to this many tokens per row are captured (AR 1, block 4, fused 8)
PREFILL_PASS_TOKENS = 1536  # default cost of one prefill pass in tokens (`prefill_groups`)


@dataclass
class StaticCache:
    keys: list[torch.Tensor]  # per layer (B, H_kv, M, D)
    values: list[torch.Tensor]
    length: int = 0
    slots: torch.Tensor | None = None  # physical row of each active row (b,)
    graphs: dict[tuple[int, bool, int], Any] = field(default_factory=dict)  # (L, logits?, last) -> inputs


@dataclass(frozen=True)
class _LayerWeights:
    attn: tuple[Any, ...]  # attn_in's weights: ln, (q, k, v) or (qkv,), their biases, q norm, k norm
    mlp: tuple[Any, ...]  # mlp_block's weights: o, o bias, post ln, (gate, up) or (gate_up,), down
    sizes: tuple[int, int, int]  # widths of the q, k and v projections
    inter: int  # width of the gate and the up projection


class StaticRunner:
    """`Runner` with a static KV cache; `compile` fuses the layer math, `use_graphs` captures (CUDA)."""

    def __init__(
        self,
        model: Any,
        use_graphs: bool = True,
        compile: bool = False,
        compile_mode: str | None = None,
        keep_cache_bytes: float = 4 * 2**30,
        pack: bool | None = None,
        attention: str = "auto",
    ) -> None:
        """keep_cache_bytes: a cache (with its graphs) up to this size stays allocated for the next call
        of the same shape; a larger one (e.g. a trainer's rollout batch) is freed when the caller drops
        it, so it does not hold GPU memory through a training step.

        pack: store each layer's q/k/v weights (and gate/up) in one tensor and point the modules'
        parameters at views of it (same Parameter objects, same values, no extra memory; in-place
        updates are seen), so each is one GEMM. None: pack when no parameter requires grad (an
        inference model; a trained one keeps its own storage, which its optimiser and checkpoint
        writer may rely on: safetensors refuses tensors that share memory).

        attention: "triton" (`cudice.model.attention`; CUDA), "sdpa", or "auto": Triton on CUDA where
        it is importable, else SDPA. A Triton failure falls back to SDPA with a message."""
        self.model = model
        param = next(model.parameters())
        self.dtype, self.device = param.dtype, param.device
        cfg = model.config
        if getattr(cfg, "use_sliding_window", False) and getattr(cfg, "sliding_window", None):
            raise ValueError("StaticRunner does not support sliding-window attention; use HFRunner")
        if getattr(cfg, "hidden_act", "silu") != "silu":
            raise ValueError(
                f"StaticRunner implements the SiLU MLP of Qwen3, not hidden_act={cfg.hidden_act!r}; "
                "use HFRunner (fast=False) for this checkpoint"
            )
        self.num_kv = cfg.num_key_value_heads
        self.group = cfg.num_attention_heads // cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = float(cfg.rms_norm_eps)
        self.use_graphs = use_graphs and self.device.type == "cuda"
        self.compile_mode = compile_mode
        self.fns = layers.compiled(compile_mode) if compile else layers.EAGER
        self.compile_error: str | None = None
        if attention not in ("auto", "triton", "sdpa"):
            raise ValueError(f"attention={attention!r}: expected 'auto', 'triton' or 'sdpa'")
        if attention == "auto":
            attention = "triton" if self.device.type == "cuda" and _triton_ok() else "sdpa"
        self.attention = attention
        self.attention_error: str | None = None
        self.fuse_cache_write: bool | None = None  # Triton: the kernel writes K/V (None: when keys split)
        self.warmup_seconds: dict[
            tuple[int, int], float
        ] = {}  # (batch, L) -> first forward incl. compile/capture
        self.pack = (not any(p.requires_grad for p in model.parameters())) if pack is None else pack
        self._layers = [layer_weights(layer, self.pack) for layer in model.model.layers]
        self.keep_cache_bytes = keep_cache_bytes
        # what one more prefill pass costs, in tokens of work (its weight reads and launches), so that
        # `prefill_groups` can weigh passes against padded tokens (docs/benchmarks.md)
        self.prefill_pass_tokens = PREFILL_PASS_TOKENS
        self._pool: dict[tuple[int, int], StaticCache] = {}
        self._weight_ptr: int = self._q_ptr()

    @property
    def compiled(self) -> bool:
        return self.fns is not layers.EAGER

    # --- Runner protocol ------------------------------------------------------------------
    def new_cache(self, batch: int, max_length: int) -> StaticCache:
        """A cache for `batch` rows of up to `max_length` tokens; reused (with its graphs) across calls."""
        m = -(-max_length // 256) * 256  # few distinct sizes -> graphs get reused; aligned for SDPA
        cache = self._pool.get((batch, m))
        if cache is None:
            self._pool.clear()  # one live cache at a time: free the old buffers and graphs
            shape = (batch, self.num_kv, m, self.head_dim)
            n = self.model.config.num_hidden_layers
            cache = StaticCache(
                keys=[torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(n)],
                values=[torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(n)],
            )
            if 2 * n * cache.keys[0].numel() * cache.keys[0].element_size() <= self.keep_cache_bytes:
                self._pool[(batch, m)] = cache
        cache.length = 0
        cache.slots = torch.arange(batch, device=self.device)
        return cache

    def cache_length(self, cache: StaticCache) -> int:
        return cache.length

    def crop(self, cache: StaticCache, length: int) -> None:
        cache.length = min(cache.length, length)  # later writes overwrite the dropped slots

    def select_rows(self, cache: StaticCache, rows: torch.Tensor) -> None:
        assert cache.slots is not None
        cache.slots = cache.slots[rows]

    @torch.no_grad()
    def forward(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        pos: torch.Tensor,
        cache: StaticCache,
        logits: bool = True,
        last: int = 0,
    ) -> torch.Tensor:
        """ids (b, L), mask (b, 1, L, K) additive over the first K slots, pos (b, L) -> logits (b, L, V),
        or (b, last, V) with last > 0 (the vocabulary projection runs over those tokens only).

        The logits may be a captured graph's output buffer: read them before the next forward."""
        b, n = ids.shape
        big_b, m = cache.keys[0].shape[0], cache.keys[0].shape[2]
        if cache.length + n > m or mask.shape[-1] > m:
            raise ValueError(f"static cache of {m} slots is too small for {cache.length + n} tokens")
        slots = cache.slots
        assert slots is not None
        if self._weights_moved():  # e.g. model.to(...): captured graphs would read freed memory
            for c in (*self._pool.values(), cache):
                c.graphs.clear()
        start = time.perf_counter()
        if cache.length == 0 and b == big_b:  # (rows that left before any commit: the cached path below)
            out = self._guarded(lambda: self._prefill(ids, mask, pos, cache, logits))
            out = out[:, n - last :] if logits and last else out
        else:
            last = last if 0 < last < n else 0
            out = self._guarded(lambda: self._block(ids, mask, pos, cache, logits, b == big_b, last))
            out = out[slots] if logits and b < big_b else out  # rows only leave: b == B means in place
        cache.length += n
        if (big_b, n) not in self.warmup_seconds and n <= GRAPH_MAX_TOKENS:
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            self.warmup_seconds[(big_b, n)] = time.perf_counter() - start
        return out

    def _q_ptr(self) -> int:
        ptr: int = self.model.model.layers[0].self_attn.q_proj.weight.data_ptr()
        return ptr

    def _weights_moved(self) -> bool:
        """Whether the weights got new storage (e.g. `model.to(...)`); packed weights are packed again."""
        ptr = self._q_ptr()
        moved, self._weight_ptr = ptr != self._weight_ptr, ptr
        if moved and self.pack:
            self._layers = [layer_weights(layer, True) for layer in self.model.model.layers]
        return moved

    def _guarded(self, run: Callable[[], torch.Tensor]) -> torch.Tensor:
        """Run; if the Triton attention or torch.compile fails, say so once and continue without it
        (the attention first: it is the likelier to fail on an unusual GPU or Triton version)."""
        while True:
            try:
                return run()
            except Exception as exc:  # a compiler bug must cost speed, not the generation
                error = f"{type(exc).__name__}: {exc}"
                if self.attention == "triton":
                    self.attention, self.attention_error, what = "sdpa", error, "the Triton attention"
                elif self.compiled:
                    self.fns, self.compile_error, what = layers.EAGER, error, "torch.compile"
                else:
                    raise
                print(
                    f"cudice.model: {what} failed ({error.splitlines()[0][:300]}); the fast path "
                    "continues without it (same tokens, slower)",
                    file=sys.stderr,
                    flush=True,
                )
                for cache in self._pool.values():
                    cache.graphs.clear()

    # --- forwards --------------------------------------------------------------------------
    def _block(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        pos: torch.Tensor,
        cache: StaticCache,
        logits: bool,
        full: bool,
        last: int = 0,
    ) -> torch.Tensor:
        """A forward against the cache: scatter the active rows into full-batch static inputs (idle
        rows repeat their last inputs), then replay (or capture) the graph of this shape."""
        big_b, n, m = cache.keys[0].shape[0], ids.shape[1], cache.keys[0].shape[2]
        key = (n, logits, last)
        state = cache.graphs.get(key) or _Inputs.allocate(big_b, n, m, self.dtype, self.device)
        assert cache.slots is not None
        state.load(ids, mask, pos, cache.length, cache.slots, full=full)
        if n > GRAPH_MAX_TOKENS:  # a long continuation: run once, keep no buffers
            return self._forward_cached(state, cache, logits, last)
        cache.graphs[key] = state
        if not self.use_graphs:
            return self._forward_cached(state, cache, logits, last)
        if "graph" not in state.extra:
            self._capture(state, cache, logits, last)
        state.extra["graph"].replay()
        out: torch.Tensor = state.extra["out"]
        return out

    def _forward_cached(self, s: _Inputs, cache: StaticCache, logits: bool, last: int = 0) -> torch.Tensor:
        big_b, n = s.ids.shape
        scale = self.head_dim**-0.5

        def write(i: int, k: torch.Tensor, v: torch.Tensor) -> None:  # k/v (B, L, Hkv, D) at s.write
            cache.keys[i].index_copy_(2, s.write, k.transpose(1, 2))
            cache.values[i].index_copy_(2, s.write, v.transpose(1, 2))

        if self.attention == "triton":
            lo, hi = attention.bounds(s.mask)  # in the graph: recomputed from each replay's mask
            splits = attention.num_splits(big_b, self.num_kv, s.mask.shape[-1], self.device)

            # Small batches (split keys, few tiles per program: launch-bound) let the kernel write this
            # forward's K/V into the cache itself, two kernels fewer per layer; unsplit large batches
            # are bandwidth-bound and the fused loads slow them, so they keep the two cache writes
            # (docs/benchmarks.md).
            fused = self.fuse_cache_write
            if fused is None:
                fused = splits > 1 and self.dtype.itemsize == 2

            def kernel(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
                if not fused:
                    write(i, k, v)
                new = (k, v, s.write) if fused else None
                o = attention.attend(
                    q, cache.keys[i], cache.values[i], s.mask, lo, hi, scale, splits, new=new
                )
                return o.reshape(big_b * n, -1)

            return self._run(s.ids, s.pos, kernel, logits, last)
        bias = s.mask.repeat(1, 1, self.group, 1)  # (B, 1, G*L, M), once for every layer

        def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            # q (B, L, H, D), k/v (B, L, Hkv, D) -> (B*L, H*D)
            write(i, k, v)
            return attention.sdpa(q, cache.keys[i], cache.values[i], bias, scale).reshape(big_b * n, -1)

        return self._run(s.ids, s.pos, attend, logits, last)

    def _prefill(
        self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache: StaticCache, logits: bool
    ) -> torch.Tensor:
        """First forward into an empty cache: rows grouped by left padding (`prefill_groups`), each group
        one pass from its least padded column on, under that group's part of the mask (a row's own
        padding stays masked); K/V written at the group's slots."""
        b, n = ids.shape
        pad = (n - 1) - pos[:, -1]  # (b,) left padding
        expected = (torch.arange(n, device=pos.device)[None, :] - pad[:, None]).clamp(min=0)
        pads = pad.tolist() if bool((pos == expected).all()) else [0] * b  # sync point; else run padded
        out = (
            torch.zeros(b, n, self.model.config.vocab_size, dtype=self.dtype, device=self.device)
            if logits
            else ids.new_empty(b, 0, 0, dtype=self.dtype)
        )
        for p, members in prefill_groups(pads, n, self.prefill_pass_tokens):
            rows = torch.tensor(members, device=self.device)
            g_ids, g_pos, g_mask = ids[rows, p:], pos[rows, p:], mask[rows][..., p:, p:]
            nb, nn = g_ids.shape

            def attend(
                i: int,
                q: torch.Tensor,
                k: torch.Tensor,
                v: torch.Tensor,
                rows: torch.Tensor = rows,
                p: int = p,
                g_mask: torch.Tensor = g_mask,
                nb: int = nb,
                nn: int = nn,
            ) -> torch.Tensor:
                k, v = k.transpose(1, 2), v.transpose(1, 2)  # (nb, Hkv, nn, D)
                if nb == b:  # one group (equal padding): a slice copy, not an indexed scatter
                    cache.keys[i][:, :, p:n].copy_(k)
                    cache.values[i][:, :, p:n].copy_(v)
                else:
                    cache.keys[i][rows, :, p:n] = k
                    cache.values[i][rows, :, p:n] = v
                o = F.scaled_dot_product_attention(
                    q.transpose(1, 2), k, v, attn_mask=g_mask, scale=self.head_dim**-0.5, enable_gqa=True
                )  # (nb, H, nn, D): each KV head serves its query group without a repeated copy
                return o.transpose(1, 2).reshape(nb * nn, -1)

            result = self._run(g_ids, g_pos, attend, logits)
            if logits:
                out[rows, p:] = result
        return out

    def _run(
        self,
        ids: torch.Tensor,
        pos: torch.Tensor,
        attend: Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
        logits: bool,
        last: int = 0,
    ) -> torch.Tensor:
        """The decoder over ids (B, L) at positions pos (B, L); `attend` writes K/V and attends."""
        attn_in, mlp_block, lm_head = self.fns
        model, (big_b, n) = self.model, ids.shape
        h: torch.Tensor = model.model.embed_tokens(ids)  # (B, L, hidden)
        cos, sin = model.model.rotary_emb(h, pos)  # (B, L, D)
        h = h.reshape(big_b * n, -1)  # (T, hidden) tokens as rows
        cos, sin = cos.reshape(big_b * n, -1), sin.reshape(big_b * n, -1)
        delta = torch.zeros_like(h)
        if self.compiled:
            layers.mark_tokens_dynamic(h, delta, cos, sin)
        for i, w in enumerate(self._layers):
            # q (T, H, D), k and v (T, Hkv, D)
            h, q, k, v = attn_in(h, delta, *w.attn, cos, sin, self.eps, self.head_dim, w.sizes)
            o = attend(
                i,
                q.reshape(big_b, n, -1, self.head_dim),
                k.reshape(big_b, n, -1, self.head_dim),
                v.reshape(big_b, n, -1, self.head_dim),
            )  # (T, H*D)
            if self.compiled:
                layers.mark_tokens_dynamic(o)
            h, delta = mlp_block(h, o, *w.mlp, self.eps, w.inter)
        if not logits:
            return h[:0, :0].view(big_b, 0, 0)
        if last:  # only the last tokens of each row reach the vocabulary projection
            h = h.view(big_b, n, -1)[:, n - last :].reshape(big_b * last, -1)
            delta = delta.view(big_b, n, -1)[:, n - last :].reshape(big_b * last, -1)
            n = last
            if self.compiled:
                layers.mark_tokens_dynamic(h, delta)
        head: torch.Tensor = lm_head(h, delta, model.model.norm.weight, model.lm_head.weight, self.eps)
        return head.view(big_b, n, -1)  # (B, L, V)

    def _capture(self, s: _Inputs, cache: StaticCache, logits: bool, last: int) -> None:
        # Warm-up on a side stream (compilation, autotuning, allocator, cuBLAS handles), then capture.
        # Both write K/V at the current slots, which the real step overwrites anyway.
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]  # Stream.__new__ is unannotated
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._forward_cached(s, cache, logits, last)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            s.extra["out"] = self._forward_cached(s, cache, logits, last)
        s.extra["graph"] = graph


def prefill_groups(pads: list[int], n: int, pass_tokens: int) -> list[tuple[int, list[int]]]:
    """Rows grouped for the prefill: [(first column, rows)], one forward pass each.

    A group starts at its least padded row's first real column, so its other rows compute some of
    their padding; every pass costs `pass_tokens` on top of its tokens. The grouping of the rows
    sorted by padding into consecutive runs that minimises padded tokens + passes is found exactly
    (dynamic programming over the distinct paddings): with pass_tokens 0, one group per padding (no
    padding computed); with a large one, a single padded pass."""
    distinct = sorted(set(pads))
    count = [pads.count(p) for p in distinct]
    best = [0.0] + [float("inf")] * len(distinct)  # best[j]: cost of the first j distinct paddings
    cut = [0] * (len(distinct) + 1)
    for j in range(1, len(distinct) + 1):
        rows = 0
        for i in range(j - 1, -1, -1):  # last group = distinct[i:j], starting at column distinct[i]
            rows += count[i]
            cost = best[i] + rows * (n - distinct[i]) + pass_tokens
            if cost < best[j]:
                best[j], cut[j] = cost, i
    groups: list[tuple[int, list[int]]] = []
    j = len(distinct)
    while j > 0:
        i = cut[j]
        members = [r for r, p in enumerate(pads) if distinct[i] <= p <= distinct[j - 1]]
        groups.append((distinct[i], members))
        j = i
    return groups[::-1]


def _triton_ok() -> bool:
    return attention.available()


def _packed(linears: list[Any]) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor | None, ...]]:
    """One weight (and bias) tensor holding the rows of every module in `linears`, the modules'
    parameters pointed at views of it; left as they are when their biases differ in presence."""
    ws = [m.weight for m in linears]
    bs = [m.bias for m in linears]
    if any(b is None for b in bs) and any(b is not None for b in bs):
        return tuple(ws), tuple(bs)

    def pack(ts: list[torch.Tensor]) -> torch.Tensor:
        packed = _already_packed(ts)
        if packed is not None:  # another runner over the same model packed them: share, never copy
            return packed
        whole = torch.cat([t.detach() for t in ts], dim=0)
        start = 0
        for t in ts:
            t.data = whole[start : start + t.shape[0]]  # the same Parameter, now a view of `whole`
            start += t.shape[0]
        return whole

    with torch.no_grad():
        w = pack(ws)
        b = pack([x for x in bs if x is not None]) if bs[0] is not None else None
    return (w,), (b,)


def _already_packed(ts: list[torch.Tensor]) -> torch.Tensor | None:
    """The one tensor `ts` are consecutive row blocks of (a view over their shared storage), or None."""
    first = ts[0]
    storage, offset = first.untyped_storage(), first.storage_offset()
    for t in ts:
        if (
            not t.is_contiguous()
            or t.untyped_storage().data_ptr() != storage.data_ptr()
            or t.storage_offset() != offset
            or t.shape[1:] != first.shape[1:]
        ):
            return None
        offset += t.numel()
    rows = sum(t.shape[0] for t in ts)
    cols = first.shape[1:].numel()
    return (
        first.detach().new_empty(0).set_(storage, first.storage_offset(), (rows, *first.shape[1:]), (cols, 1))
    )


def layer_weights(layer: Any, pack: bool) -> _LayerWeights:
    """One decoder layer's weights in the order `cudice.model.layers`' functions take them (packed
    q/k/v and gate/up when `pack`); also read by the paged runner (`cudice.model.paged_forward`)."""
    a, mlp = layer.self_attn, layer.mlp
    qkv = [a.q_proj, a.k_proj, a.v_proj]
    wqkv, bqkv = _packed(qkv) if pack else (tuple(m.weight for m in qkv), tuple(m.bias for m in qkv))
    wgu = _packed([mlp.gate_proj, mlp.up_proj])[0] if pack else (mlp.gate_proj.weight, mlp.up_proj.weight)
    return _LayerWeights(
        attn=(layer.input_layernorm.weight, wqkv, bqkv, a.q_norm.weight, a.k_norm.weight),
        mlp=(
            a.o_proj.weight,
            a.o_proj.bias,
            layer.post_attention_layernorm.weight,
            wgu,
            mlp.down_proj.weight,
        ),
        sizes=(a.q_proj.weight.shape[0], a.k_proj.weight.shape[0], a.v_proj.weight.shape[0]),
        inter=mlp.gate_proj.weight.shape[0],
    )


@dataclass
class _Inputs:
    """Static input buffers of one captured shape (full batch B)."""

    ids: torch.Tensor  # (B, L) long
    pos: torch.Tensor  # (B, L) long
    mask: torch.Tensor  # (B, 1, L, M) additive
    write: torch.Tensor  # (L,) long: cache slots this forward writes
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def allocate(cls, big_b: int, n: int, m: int, dtype: torch.dtype, device: torch.device) -> _Inputs:
        mask = torch.full((big_b, 1, n, m), torch.finfo(dtype).min, dtype=dtype, device=device)
        mask[..., 0] = 0  # idle rows attend to slot 0 until they are loaded: no all-blocked rows (NaN)
        return cls(
            ids=torch.zeros(big_b, n, dtype=torch.long, device=device),
            pos=torch.zeros(big_b, n, dtype=torch.long, device=device),
            mask=mask,
            write=torch.zeros(n, dtype=torch.long, device=device),
        )

    def load(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        pos: torch.Tensor,
        length: int,
        slots: torch.Tensor,
        full: bool,
    ) -> None:
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
