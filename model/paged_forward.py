"""Ragged Qwen3 forwards over a paged KV cache: many sequences, each at its own length, in one pass.

Role: the model side of the continuous batching engine (`cudice.model.batching`). One call runs
a list of `Segment`s, each a run of new tokens of one sequence (a prompt prefill, a block being
denoised, a block being committed) at positions [start, start + n) of that sequence. The
per-token layer math is `cudice.model.layers`'s eager functions over the HF modules' weights
(the fast path's math, unpacked: the model's parameters are left as they are), on all T = sum(n)
tokens as one (T, hidden) matrix; only attention is per sequence.

Contract of `forward(segments)`:
- each segment's K/V are written into its pages at slots [start, start + n) (pages allocated with
  `PagedKVCache.ensure`), then every token attends to its sequence's slots [0, start + n) under
  SDAR's block rule: key j is visible to the token at position i iff block(j) <= block(i) with
  blocks of the segment's `block_length` aligned to position 0. A block being denoised therefore
  sees the cache and itself both ways, and a prefill is block-causal, exactly as the sampler's
  masks (`runner.block_causal_mask`, `runner.block_query_mask`);
- it returns the logits (n, V) of every segment with `logits=True`, in order, None for the others;
- nothing is cropped: a denoise step's K/V stay in slots the next step or the commit overwrites,
  and the caller decides how far a sequence's committed length advances.

`forward` gathers each sequence's slots into a padded (b, H_kv, K, D) copy and runs one SDPA call
per layer (GQA without repeating K/V), eagerly: it serves every segment mix (prefills, mixed block
lengths) but costs ~50 kernels per layer and a copy of every row's keys.

Contract of `decode(cache, segments)`, the fast decode step (`decode_eligible` says when it
applies: every segment a whole block of one common block length n <= 16 at a block-aligned start,
at most `max_batch` segments, a `DecodeCache` wide enough): the same writes and the same logits as
`forward` on those segments, up to float rounding. Under SDAR's block rule every query of such a
segment sees exactly its sequence's positions [0, start + n), so the attention needs no mask:
- the rows are padded to a batch class (powers of two up to `max_batch`); each class owns static
  input buffers (positions, write slots, a page table of the cache's fixed width W, lengths),
  filled on the host and moved to the device in one copy per step; padded rows read and write only
  the cache's scratch page (length 1) and their outputs are dropped, so no sequence's pages are
  touched but the segments' own slots [start, start + n);
- K/V are written with `index_copy_` into the pools, attention reads the pages in place
  (`cudice.model.attention.attend_paged`, Triton, on CUDA; elsewhere `paged_reference`: a gather
  of the needed pages and SDPA), the layer math is `cudice.model.layers` (`compile=True`:
  torch.compile'd) over packed q/k/v and gate/up weights where the model is frozen (the first
  decode packs them as the static fast path does: the parameters become views of one tensor,
  their values unchanged);
- on CUDA with `use_graphs` and the Triton attention, each (class, n, logits?) is captured as one
  CUDA graph after two warm-up runs on its first use (or in `warm_up`, every class ahead of
  serving) and replayed afterwards (the returned logits are the graph's output buffer: read them
  before the next decode); the SDPA fallback runs without graphs (its gather is sized per step);
- a failing Triton kernel, torch.compile or graph capture is reported once on stderr and the decode
  goes on without it (same results, slower).

Not covered: sliding-window layers, non-SiLU MLPs, a paged prefill kernel (prefills stay on
`forward`), weights that move after the runner is built (`model.to(...)`: the captured graphs and
packed weights would be stale; build a new runner).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from cudice.model import attention, layers
from cudice.model.fastpath import layer_weights
from cudice.model.paged import PagedKVCache
from cudice.model.runner import additive


@dataclass(frozen=True, slots=True)
class Segment:
    """New tokens of one sequence: ids (n,) long at positions [start, start + n)."""

    seq: int
    ids: torch.Tensor
    start: int
    block_length: int
    logits: bool


class DecodeCache(PagedKVCache):
    """A `PagedKVCache` with one page more, `scratch_page` (id num_pages), kept out of the free list and
    of every count (`pages_in_use`, reservations): the fast decode's padded rows write and read there.
    `width`: the fixed page-table width W of the fast decode (pages of the longest sequence served);
    `decode_states`: the decode's static buffers and graphs, which belong to these pools."""

    def __init__(
        self,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        num_pages: int,
        page_size: int,
        dtype: torch.dtype,
        device: torch.device | str,
        width: int,
    ) -> None:
        super().__init__(num_layers, num_kv_heads, head_dim, num_pages + 1, page_size, dtype, device)
        self.num_pages = num_pages
        self.scratch_page = num_pages
        self._free.remove(num_pages)
        self.width = max(1, min(width, num_pages))
        self.decode_states: dict[tuple[int, int, bool], _DecodeState] = {}


@dataclass(eq=False)
class _DecodeState:
    """Static buffers of one decode class (rows B, tokens n per row): one byte buffer on the host
    (pinned on CUDA) mirrored on the device, viewed as positions and write slots (B*n,) long, lengths
    (B,) int32 and the page table (B, W) int32; the token ids (B*n,) live on the device only."""

    batch: int
    n: int
    width: int
    host: torch.Tensor
    dev: torch.Tensor
    ids: torch.Tensor
    pos: torch.Tensor
    write: torch.Tensor
    lengths: torch.Tensor
    table: torch.Tensor
    np_pos: np.ndarray
    np_write: np.ndarray
    np_lengths: np.ndarray
    np_table: np.ndarray
    pages_needed: int = 1  # the longest row's pages in the last load (the eager attention's gather)
    copied: Any = None  # CUDA event: the last host -> device copy is done with the host buffer
    graph: Any = None
    out: torch.Tensor | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def allocate(cls, batch: int, n: int, width: int, device: torch.device) -> _DecodeState:
        t = batch * n
        sizes = [8 * t, 8 * t, 4 * batch, 4 * batch * width]  # pos, write, lengths, table (bytes)
        total = sum(sizes)
        pinned = device.type == "cuda"
        host = torch.zeros(total, dtype=torch.uint8, pin_memory=pinned)
        dev = torch.zeros(total, dtype=torch.uint8, device=device)
        cuts = np.cumsum([0, *sizes]).tolist()

        def views(buf: torch.Tensor) -> list[torch.Tensor]:
            dtypes = (torch.int64, torch.int64, torch.int32, torch.int32)
            return [buf[a:b].view(d) for a, b, d in zip(cuts[:-1], cuts[1:], dtypes, strict=True)]

        pos, write, lengths, table = views(dev)
        h_pos, h_write, h_lengths, h_table = views(host)
        return cls(
            batch,
            n,
            width,
            host,
            dev,
            ids=torch.zeros(t, dtype=torch.long, device=device),
            pos=pos,
            write=write,
            lengths=lengths,
            table=table.view(batch, width),
            np_pos=h_pos.numpy(),
            np_write=h_write.numpy(),
            np_lengths=h_lengths.numpy(),
            np_table=h_table.view(batch, width).numpy(),
        )

    def load(self, cache: DecodeCache, segments: list[Segment]) -> None:
        """Fill the host buffer for `segments` (rows past them: the scratch page, length 1), copy it to
        the device in one transfer, and the segments' ids into `ids`."""
        if self.copied is not None:
            self.copied.synchronize()  # the previous step's copy has read the host buffer
        b, n, ps = len(segments), self.n, cache.page_size
        table = self.np_table
        table.fill(cache.scratch_page)
        starts = np.zeros(self.batch, dtype=np.int64)
        for r, s in enumerate(segments):
            pages = cache.pages_of(s.seq)
            table[r, : len(pages)] = pages
            starts[r] = s.start
        pos = starts[:, None] + np.arange(n, dtype=np.int64)[None, :]  # padded rows: 0..n-1
        page = np.take_along_axis(table, pos // ps, axis=1).astype(np.int64)
        self.np_pos[:] = pos.reshape(-1)
        self.np_write[:] = (page * ps + pos % ps).reshape(-1)
        lengths = starts + n
        lengths[b:] = 1
        self.np_lengths[:] = lengths
        self.pages_needed = int(-(-int(lengths.max()) // ps))
        self.dev.copy_(self.host, non_blocking=True)
        if self.dev.device.type == "cuda":
            if self.copied is None:
                self.copied = torch.cuda.Event()  # type: ignore[no-untyped-call]
            self.copied.record()
        if segments:
            ids = torch.cat([s.ids for s in segments]).to(self.ids.device, non_blocking=True)
            self.ids[: b * n].copy_(ids)


class PagedRunner:
    """Ragged forwards of a Qwen3 model (HF modules) against a `PagedKVCache` it builds; `decode` is
    the fast decode step (module docstring)."""

    def __init__(
        self,
        model: Any,
        max_batch: int = 32,
        compile: bool = False,
        compile_mode: str | None = None,
        use_graphs: bool = True,
        attention: str = "auto",
        pack: bool | None = None,
    ) -> None:
        """max_batch: the most segments `decode` takes (the largest batch class); compile: the decode's
        layer math through torch.compile; use_graphs: capture the decode per batch class (CUDA only);
        attention: the decode's attention, "triton" (`attend_paged`), "sdpa" (`paged_reference`) or
        "auto" (Triton on CUDA where importable); pack: the decode reads packed q/k/v and gate/up
        weights (None: when no parameter requires grad, as the static fast path decides)."""
        if max_batch < 1:
            raise ValueError(f"max_batch={max_batch} must be >= 1")
        if attention not in ("auto", "triton", "sdpa"):
            raise ValueError(f"attention={attention!r}: expected 'auto', 'triton' or 'sdpa'")
        self.model = model
        param = next(model.parameters())
        self.dtype, self.device = param.dtype, param.device
        cfg = model.config
        if getattr(cfg, "use_sliding_window", False) and getattr(cfg, "sliding_window", None):
            raise ValueError("PagedRunner does not support sliding-window attention")
        if getattr(cfg, "hidden_act", "silu") != "silu":
            raise ValueError(f"PagedRunner implements Qwen3's SiLU MLP, not hidden_act={cfg.hidden_act!r}")
        self.num_layers = cfg.num_hidden_layers
        self.num_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = float(cfg.rms_norm_eps)
        self.max_positions = int(getattr(cfg, "max_position_embeddings", 0) or 0)
        self._layers = [layer_weights(layer, False) for layer in model.model.layers]
        self.max_batch = max_batch
        self.use_graphs = use_graphs and self.device.type == "cuda"
        self.fns = layers.compiled(compile_mode) if compile else layers.EAGER
        if attention == "auto":
            attention = "triton" if self.device.type == "cuda" and _triton_ok() else "sdpa"
        self.attention = attention
        self.errors: dict[str, str] = {}  # what failed in the decode and was switched off, and why
        self.decodes = 0  # fast decode steps run
        self.captures = 0  # CUDA graphs captured
        self._pack = (not any(p.requires_grad for p in model.parameters())) if pack is None else pack
        self._decode_layers: list[Any] | None = None  # packed lazily: the first decode packs the model
        self._graph_pool: Any = None

    @property
    def compiled(self) -> bool:
        return self.fns is not layers.EAGER

    def describe(self) -> str:
        """The decode path in words, e.g. 'paged decode: triton attention, compiled, CUDA graphs'."""
        parts = [f"{self.attention} attention", "compiled" if self.compiled else "eager layers"]
        parts.append("CUDA graphs" if self.use_graphs else "no graphs")
        off = "; ".join(f"{k} off: {v[:120]}" for k, v in self.errors.items())
        return "paged decode: " + ", ".join(parts) + (f" ({off})" if off else "")

    def new_cache(self, num_pages: int, page_size: int, max_tokens: int | None = None) -> DecodeCache:
        """A pool of `num_pages` pages (plus the decode's scratch page); the decode's page tables are
        as wide as the pages of `max_tokens` (default: the model's positions, at most the pool)."""
        most = max_tokens or self.max_positions or num_pages * page_size
        return DecodeCache(
            self.num_layers,
            self.num_kv,
            self.head_dim,
            num_pages,
            page_size,
            self.dtype,
            self.device,
            width=-(-most // page_size),
        )

    @torch.no_grad()
    def forward(self, cache: PagedKVCache, segments: list[Segment]) -> list[torch.Tensor | None]:
        """Run `segments` in one pass; see the module docstring."""
        if not segments:
            return []
        dev = self.device
        lens = [int(s.ids.shape[0]) for s in segments]
        ends = [s.start + n for s, n in zip(segments, lens, strict=True)]
        b, nmax = len(segments), max(lens)
        for s, end in zip(segments, ends, strict=True):
            cache.ensure(s.seq, end)
        ids = torch.cat([s.ids.to(dev) for s in segments])  # (T,)
        pos = torch.cat([torch.arange(s.start, e, device=dev) for s, e in zip(segments, ends, strict=True)])
        write = cache.spans([(s.seq, s.start, e) for s, e in zip(segments, ends, strict=True)])  # (T,)
        index, valid = cache.key_slots([s.seq for s in segments], ends)  # (b, K)

        # token t of the flat axis sits at (row, column) of the padded (b, nmax) layout
        row = torch.repeat_interleave(torch.arange(b, device=dev), torch.tensor(lens, device=dev))
        col = torch.cat([torch.arange(n, device=dev) for n in lens])
        flat = row * nmax + col  # (T,)
        qpos = torch.zeros(b, nmax, dtype=torch.long, device=dev)
        qpos.view(-1)[flat] = pos
        qvalid = torch.zeros(b * nmax, dtype=torch.bool, device=dev)
        qvalid[flat] = True
        qvalid = qvalid.view(b, nmax)
        bl = torch.tensor([s.block_length for s in segments], device=dev)[:, None, None]  # (b, 1, 1)
        kpos = torch.arange(index.shape[1], device=dev)
        allowed = valid[:, None, :] & (kpos[None, None, :] // bl <= qpos[:, :, None] // bl)  # (b, nmax, K)
        allowed[:, :, 0] |= ~qvalid  # padding queries see slot 0: no all-blocked row (NaN); never read
        mask = additive(allowed[:, None], self.dtype)  # (b, 1, nmax, K)
        scale = self.head_dim**-0.5

        attn_in, mlp_block, lm_head = layers.EAGER
        model = self.model
        h: torch.Tensor = model.model.embed_tokens(ids[None])  # (1, T, hidden)
        cos, sin = model.model.rotary_emb(h, pos[None])  # (1, T, D)
        h, cos, sin = h[0], cos[0], sin[0]
        delta = torch.zeros_like(h)
        for i, w in enumerate(self._layers):
            h, q, k, v = attn_in(h, delta, *w.attn, cos, sin, self.eps, self.head_dim, w.sizes)
            cache.write(i, write, k, v)
            keys, values = cache.gather(i, index)  # (b, Hkv, K, D)
            qp = q.new_zeros(b * nmax, q.shape[1], self.head_dim)
            qp[flat] = q
            o = F.scaled_dot_product_attention(
                qp.view(b, nmax, -1, self.head_dim).transpose(1, 2),
                keys,
                values,
                attn_mask=mask,
                scale=scale,
                enable_gqa=True,
            )  # (b, H, nmax, D)
            o = o.transpose(1, 2).reshape(b * nmax, -1)[flat]  # (T, H*D)
            h, delta = mlp_block(h, o, *w.mlp, self.eps, w.inter)

        want = [i for i, s in enumerate(segments) if s.logits]
        out: list[torch.Tensor | None] = [None] * b
        if not want:
            return out
        offsets = [0]
        for n in lens:
            offsets.append(offsets[-1] + n)
        rows = torch.cat([torch.arange(offsets[i], offsets[i + 1], device=dev) for i in want])
        head = lm_head(h[rows], delta[rows], model.model.norm.weight, model.lm_head.weight, self.eps)
        at = 0
        for i in want:
            out[i] = head[at : at + lens[i]]
            at += lens[i]
        return out

    # --- the fast decode ---------------------------------------------------------------------
    def batch_class(self, rows: int) -> int:
        """The decode's batch class for `rows` segments: the next power of two, at most `max_batch`."""
        return min(1 << max(0, (rows - 1).bit_length()), self.max_batch)

    def decode_eligible(self, cache: PagedKVCache, segments: list[Segment]) -> bool:
        """Whether `decode` serves `segments` (module docstring); else `forward` must."""
        if not segments or len(segments) > self.max_batch or not isinstance(cache, DecodeCache):
            return False
        n = segments[0].block_length
        if n > attention.MAX_TOKENS:
            return False
        most = cache.width * cache.page_size
        return all(
            s.block_length == n and s.ids.shape[0] == n and s.start % n == 0 and s.start + n <= most
            for s in segments
        )

    @torch.no_grad()
    def decode(self, cache: PagedKVCache, segments: list[Segment]) -> list[torch.Tensor | None]:
        """The fast decode step: `forward`'s writes and logits for eligible `segments`."""
        if not isinstance(cache, DecodeCache) or not self.decode_eligible(cache, segments):
            raise ValueError(
                f"decode: {len(segments)} segments are not one decode step (each a whole block of one "
                f"block length <= {attention.MAX_TOKENS} at a block-aligned start, at most "
                f"max_batch={self.max_batch} rows, in a DecodeCache from new_cache); run forward instead"
            )
        b, n = len(segments), segments[0].block_length
        for s in segments:
            cache.ensure(s.seq, s.start + n)
        want = any(s.logits for s in segments)
        key = (self.batch_class(b), n, want)
        state = cache.decode_states.get(key)
        if state is None:
            state = _DecodeState.allocate(key[0], n, cache.width, self.device)
            cache.decode_states[key] = state
        state.load(cache, segments)
        head = self._guarded(cache, lambda: self._step(state, cache, want))
        self.decodes += 1
        return [head[i * n : (i + 1) * n] if s.logits else None for i, s in enumerate(segments)]

    @torch.no_grad()
    def warm_up(self, cache: PagedKVCache, block_length: int) -> int:
        """Run (and on CUDA capture) the decode of every batch class for `block_length`, with and
        without logits, on padded rows only (the scratch page: no sequence is touched), so that
        compilation and graph capture happen here rather than in the first requests' steps.
        Returns the number of (class, logits) variants run; 0 where the decode cannot serve
        `block_length` or `cache`."""
        if not isinstance(cache, DecodeCache) or block_length > attention.MAX_TOKENS:
            return 0
        classes = sorted({self.batch_class(b) for b in range(1, self.max_batch + 1)})
        done = 0
        for big_b in classes:
            for logits in (True, False):
                key = (big_b, block_length, logits)
                state = cache.decode_states.get(key)
                if state is None:
                    state = _DecodeState.allocate(big_b, block_length, cache.width, self.device)
                    cache.decode_states[key] = state
                state.load(cache, [])
                self._guarded(cache, functools.partial(self._step, state, cache, logits))
                done += 1
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return done

    def _step(self, state: _DecodeState, cache: DecodeCache, logits: bool) -> torch.Tensor:
        if not (self.use_graphs and self.attention == "triton"):  # the eager gather has no static shape
            return self._decode_forward(state, cache, logits)
        if state.graph is None:
            self._capture(state, cache, logits)
        state.graph.replay()
        assert state.out is not None
        return state.out

    def _guarded(self, cache: DecodeCache, run: Callable[[], torch.Tensor]) -> torch.Tensor:
        """Run; if the Triton kernel, torch.compile or a graph capture fails, say so once and go on
        without it (in that order: the likeliest to fail on an unusual GPU or Triton version first)."""
        while True:
            try:
                return run()
            except Exception as exc:  # a compiler bug must cost speed, not the requests
                error = f"{type(exc).__name__}: {exc}"
                if self.attention == "triton":
                    self.attention, what = "sdpa", "the Triton paged attention"
                elif self.compiled:
                    self.fns, what = layers.EAGER, "torch.compile"
                elif self.use_graphs:
                    self.use_graphs, what = False, "CUDA graph capture"
                else:
                    raise
                self.errors[what] = error
                print(
                    f"cudice.model: {what} failed in the paged decode ({error.splitlines()[0][:300]}); the "
                    "decode continues without it (same tokens, slower)",
                    file=sys.stderr,
                    flush=True,
                )
                for st in cache.decode_states.values():
                    st.graph, st.out = None, None

    def _decode_forward(self, s: _DecodeState, cache: DecodeCache, logits: bool) -> torch.Tensor:
        """The decoder over the static inputs of `s`: (B*n, V) logits, or an empty tensor."""
        if self._decode_layers is None:
            self._decode_layers = [layer_weights(layer, self._pack) for layer in self.model.model.layers]
        attn_in, mlp_block, lm_head = self.fns
        model, big_b, n, d = self.model, s.batch, s.n, self.head_dim
        t = big_b * n
        scale = d**-0.5
        ps = cache.page_size
        if self.attention == "triton":
            splits = attention.num_splits(big_b, self.num_kv, s.width * ps, self.device)

            def attend(i: int, q: torch.Tensor) -> torch.Tensor:
                return attention.attend_paged(
                    q, cache.keys[i], cache.values[i], s.table, s.lengths, scale, ps, splits
                )
        else:
            table = s.table[:, : s.pages_needed]  # only the pages some row reads

            def attend(i: int, q: torch.Tensor) -> torch.Tensor:
                keys, values = cache.keys[i], cache.values[i]
                return attention.paged_reference(q, keys, values, table, s.lengths, scale, ps)

        h: torch.Tensor = model.model.embed_tokens(s.ids)  # (T, hidden)
        cos, sin = model.model.rotary_emb(h[None], s.pos[None])  # (1, T, D)
        cos, sin = cos[0], sin[0]
        delta = torch.zeros_like(h)
        if self.compiled:
            layers.mark_tokens_dynamic(h, delta, cos, sin)
        for i, w in enumerate(self._decode_layers):
            h, q, k, v = attn_in(h, delta, *w.attn, cos, sin, self.eps, d, w.sizes)
            cache.keys[i].index_copy_(0, s.write, k.to(cache.dtype))
            cache.values[i].index_copy_(0, s.write, v.to(cache.dtype))
            o = attend(i, q.reshape(big_b, n, -1, d)).reshape(t, -1)  # (T, H*D)
            if self.compiled:
                layers.mark_tokens_dynamic(o)
            h, delta = mlp_block(h, o, *w.mlp, self.eps, w.inter)
        if not logits:
            return h[:0, :0]
        out: torch.Tensor = lm_head(h, delta, model.model.norm.weight, model.lm_head.weight, self.eps)
        return out

    def _capture(self, s: _DecodeState, cache: DecodeCache, logits: bool) -> None:
        # Warm-up on a side stream (compilation, autotuning, allocator, cuBLAS handles), then capture.
        # Both compute this step's own inputs and write the same K/V the captured replay writes.
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]  # Stream.__new__ is unannotated
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._decode_forward(s, cache, logits)
        torch.cuda.current_stream().wait_stream(stream)
        if self._graph_pool is None:
            self._graph_pool = torch.cuda.graph_pool_handle()  # classes replay one at a time: one pool
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._graph_pool):
            s.out = self._decode_forward(s, cache, logits)
        s.graph = graph
        self.captures += 1


def _triton_ok() -> bool:
    return attention.available()
