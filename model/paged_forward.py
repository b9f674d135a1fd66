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

On CPU (and anywhere without a paged kernel) attention gathers each sequence's slots into a
padded (b, H_kv, K, D) copy and runs one SDPA call per layer (GQA without repeating K/V); the
page table and lengths a paged kernel would read come from `PagedKVCache.page_table`.
Not covered: a CUDA/Triton kernel reading pages in place, torch.compile and CUDA graphs (the
static fast path has them), sliding-window layers, non-SiLU MLPs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from cudice.model import layers
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


class PagedRunner:
    """Ragged forwards of a Qwen3 model (HF modules) against a `PagedKVCache` it builds."""

    def __init__(self, model: Any) -> None:
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

    def new_cache(self, num_pages: int, page_size: int) -> PagedKVCache:
        return PagedKVCache(
            self.num_layers, self.num_kv, self.head_dim, num_pages, page_size, self.dtype, self.device
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
