"""Qwen3 decoder-layer math as pure per-token functions over the HF modules' weights.

The fast path (`cudice.model.fastpath.StaticRunner`) runs every token of a forward as one row of
a (T, hidden) matrix, T = batch x new tokens; only attention needs the (batch, length) layout and
stays outside these functions. Because the functions are pure (no module state, no cache
writes), `torch.compile` (Inductor) can fuse each of them into a few kernels and the runner can
still capture the whole forward, attention and cache writes included, as one CUDA graph:

- `attn_in`: residual add + input RMSNorm + q/k/v projections + per-head q/k RMSNorm + RoPE;
- `mlp_block`: o projection + residual add + post-attention RMSNorm + SwiGLU MLP;
  (the q/k/v and the gate/up projections are one GEMM each when the runner packed their weights
  into one tensor: fewer, wider GEMMs, which read the weights closer to the memory bandwidth at
  small batches; split afterwards, the results are the three (two) projections);
- `lm_head`: last residual add + final RMSNorm + the vocabulary projection.

The residual add of each block is deferred into the next function (`delta`), so it fuses with
the RMSNorm that reads it. Eager, the functions compute what transformers' Qwen3 modules compute
(`transformers/models/qwen3/modeling_qwen3.py`: RMSNorm in float32, weight times the result cast
back); compiled, Inductor keeps the float32 intermediates in registers, which changes the last
bits of bf16 activations (the tests compare tokens in float32, where that does not show).

`compiled(mode)` returns the three functions compiled once per process and mode; the token axis
is marked dynamic by the caller, so one compilation serves every batch and block size (plus one
specialisation for T = 1, which torch.compile always makes). Not covered: sliding-window
attention, MoE layers, activations other than SiLU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3RMSNorm over the last axis: float32 statistics, result cast back before the weight."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding (rotate-half form). x (T, heads, D), cos/sin (T, 1, D)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _project(
    x: torch.Tensor, ws: tuple[torch.Tensor, ...], bs: tuple[torch.Tensor | None, ...], sizes: tuple[int, ...]
) -> tuple[torch.Tensor, ...]:
    """x @ each projection: one GEMM over a packed weight (`ws` of one tensor, rows split by `sizes`)
    or one GEMM per weight (`ws` of len(sizes) tensors: the modules' own, unpacked)."""
    if len(ws) == 1:
        return tuple(torch.split(F.linear(x, ws[0], bs[0]), list(sizes), dim=-1))
    return tuple(F.linear(x, w, b) for w, b in zip(ws, bs, strict=True))


def attn_in(
    h: torch.Tensor,
    delta: torch.Tensor,
    ln_w: torch.Tensor,
    wqkv: tuple[torch.Tensor, ...],
    bqkv: tuple[torch.Tensor | None, ...],
    qn_w: torch.Tensor,
    kn_w: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    eps: float,
    head_dim: int,
    sizes: tuple[int, int, int],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """h, delta (T, hidden), cos/sin (T, D) -> residual h (T, hidden), q (T, H, D), k and v (T, Hkv, D).

    wqkv/bqkv: the q, k and v projections, packed into one weight (and bias) or as three; `sizes`
    are their output widths (H*D, Hkv*D, Hkv*D)."""
    h = h + delta
    x = rms_norm(h, ln_w, eps)
    t = x.shape[0]
    cos, sin = cos[:, None], sin[:, None]
    q, k, v = _project(x, wqkv, bqkv, sizes)
    q = rope(rms_norm(q.reshape(t, -1, head_dim), qn_w, eps), cos, sin)
    k = rope(rms_norm(k.reshape(t, -1, head_dim), kn_w, eps), cos, sin)
    return h, q, k, v.reshape(t, -1, head_dim)


def mlp_block(
    h: torch.Tensor,
    o: torch.Tensor,
    wo: torch.Tensor,
    bo: torch.Tensor | None,
    ln_w: torch.Tensor,
    wgu: tuple[torch.Tensor, ...],
    wd: torch.Tensor,
    eps: float,
    inter: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """h (T, hidden), attention output o (T, H*D) -> residual h (T, hidden), MLP output delta (T, hidden).

    wgu: the gate and up projections, packed into one weight or as two; `inter` is each one's width."""
    h = h + F.linear(o, wo, bo)
    x = rms_norm(h, ln_w, eps)
    gate, up = _project(x, wgu, (None,) * len(wgu), (inter, inter))
    return h, F.linear(F.silu(gate) * up, wd)


def lm_head(
    h: torch.Tensor, delta: torch.Tensor, norm_w: torch.Tensor, head_w: torch.Tensor, eps: float
) -> torch.Tensor:
    """h, delta (T, hidden) -> logits (T, V)."""
    return F.linear(rms_norm(h + delta, norm_w, eps), head_w)


Fns = tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]
EAGER: Fns = (attn_in, mlp_block, lm_head)
_COMPILED: dict[str | None, Fns] = {}


def compiled(mode: str | None) -> Fns:
    """`EAGER`'s functions under `torch.compile(mode=mode, fullgraph=True)`, built once per mode.

    torch.compile is lazy: the first call of each function with a new shape class compiles
    (seconds to a minute); the caller times that as compile time."""
    fns = _COMPILED.get(mode)
    if fns is None:
        # torch.compile's return type also covers its decorator form (called without a function)
        fns = cast(Fns, tuple(torch.compile(f, mode=mode, fullgraph=True) for f in EAGER))
        _COMPILED[mode] = fns
    return fns


def mark_tokens_dynamic(*tensors: torch.Tensor) -> None:
    """Tell torch.compile that axis 0 (tokens) varies, so a new batch or block size reuses the code."""
    for t in tensors:
        torch._dynamo.maybe_mark_dynamic(t, 0)
