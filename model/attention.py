"""Block attention against a static KV cache, as one Triton kernel per layer (split over the keys).

Role: the fast path's (`cudice.model.fastpath.StaticRunner`) attention for a block forward - L new
tokens per row (1 for an AR step, the block for a denoise step, two blocks for a fused commit)
against every row's cached keys - where SDPA with an additive mask falls back to its generic
memory-efficient kernel, which reads all M static slots of every row and parallelises over
(batch x heads) only: one row at batch 1 keeps only a few of a large GPU's SMs busy.

What the kernel does, flash-decoding style:
- one program per (row, KV head, split of the keys); GQA is folded: the G query heads that share a
  KV head and the row's L tokens form the program's G*L query rows, so K/V are read once per KV head;
- each row reads only the key slots [lo, hi) that its mask allows somewhere (`bounds`): left padding
  and unused slots of the static cache cost no bandwidth, so prompts of mixed lengths batch together
  without paying for the longest one in the decode;
- inside [lo, hi) the additive mask is applied as given (block-causal, bidirectional within a block,
  a fused commit's two blocks), so the result equals SDPA under the same mask up to float rounding;
- with several splits (small batches), a second kernel combines the partial softmaxes.

Contract: q (B, L, H, D) with H = G * H_kv; k, v (B, H_kv, M, D) with unit stride over D; mask
(B, 1, L, M) additive (0 allowed, the dtype's minimum blocked); returns (B, L, H, D) in q's dtype.
A query row whose mask blocks every slot returns zeros (SDPA returns the mean of V): the runner's
masks always allow at least one slot. On CPU the kernels run in Triton's interpreter (tests only:
far too slow to serve).

`attend_paged` is the same kernel over a paged KV cache (`cudice.model.paged.PagedKVCache`'s
layout: one pool of token slots per layer, page p holding slots [p * page_size, (p + 1) *
page_size)), for the continuous batching engine's decode step: each row attends to its positions
[0, lengths[r]) with every key and value loaded through the row's page table (a tile of keys may
span several pages: the loads are gathers), no mask (a decode block under SDAR's block rule sees
exactly its sequence's first start + n positions); split over the keys and combined as above.

Not covered: sliding windows, attention logit soft-capping, more than 16 tokens per row, masks
inside a paged row (a paged prefill stays on the ragged SDPA forward).
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

import torch

MAX_TOKENS = 16  # tokens per row the kernel is built for (the runner captures block forwards up to 16)
BLOCK_N = 128  # keys per tile
# (keys per tile, warps, stages), unsplit and split: the best of bench/attention_speed.py's sweep
# (docs/benchmarks.md has its bandwidth against SDPA's masked kernel)
CONFIG_WHOLE, CONFIG_SPLIT = (128, 4, 2), (128, 4, 2)
_BUILD_LOCK = threading.Lock()


def available() -> bool:
    """Whether Triton is importable (the kernels then compile on first use)."""
    try:
        import triton  # noqa: F401
    except Exception:
        return False
    return True


def bounds(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, the first and one past the last key slot any query of the row may see: (B,) int32 each.

    A row that allows nothing gets (0, M): every slot is read and masked."""
    allowed = (mask[:, 0] > torch.finfo(mask.dtype).min / 2).any(1)  # (B, M)
    m = allowed.shape[-1]
    lo = allowed.to(torch.int32).argmax(-1)
    hi = m - allowed.flip(-1).to(torch.int32).argmax(-1)
    none = ~allowed.any(-1)
    return torch.where(none, 0, lo).to(torch.int32), torch.where(none, m, hi).to(torch.int32)


@functools.cache
def _sm_count(device: torch.device) -> int:
    return int(torch.cuda.get_device_properties(device).multi_processor_count)


def num_splits(batch: int, kv_heads: int, slots: int, device: torch.device) -> int:
    """Key splits per (row, KV head): enough programs for about two waves over the SMs, each split
    at least one tile. A pure function of static shapes, so a captured graph keeps its value."""
    sms = _sm_count(device) if device.type == "cuda" else 8
    want = -(-2 * sms // max(1, batch * kv_heads))
    return max(1, min(want, -(-slots // BLOCK_N), 64))


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    scale: float,
    splits: int | None = None,
    config: tuple[int, int, int] | None = None,
    new: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v per row, reading only slots [lo, hi) of each row. See the module.

    splits: key splits per (row, KV head) (default `num_splits`); config: (keys per tile, warps,
    pipeline stages) of the main kernel (default CONFIG_WHOLE or CONFIG_SPLIT).
    new: (k_new, v_new, at): the forward's own keys and values (B, L, H_kv, D), which belong at slots
    [at[0], at[0] + L) of every row (`at` a device tensor, so a captured graph reads each replay's):
    the kernel attends to them there and writes them into k and v itself (one program per row and
    KV head does), which spares the two cache-write kernels per layer: a win where the keys are
    split (few tiles per program), a loss for unsplit large batches (docs/benchmarks.md); with
    4-byte K/V at head dim 128 the default 128-key tiles exceed the shared memory (pass
    config=(64, 4, 1))."""
    b, n, h, d = q.shape
    hkv, m = k.shape[1], k.shape[2]
    if h % hkv or n > MAX_TOKENS or k.stride(-1) != 1 or v.stride(-1) != 1 or v.stride() != k.stride():
        raise ValueError(
            f"attend: q {tuple(q.shape)}, k {tuple(k.shape)} (strides {k.stride()}), v strides {v.stride()}: "
            f"needs heads divisible by KV heads, at most {MAX_TOKENS} tokens per row, K and V alike with "
            "unit stride over the head dimension"
        )
    group = h // hkv
    q = q if q.stride(-1) == 1 else q.contiguous()
    bias = mask[:, 0]  # (B, L, M)
    if bias.stride(-1) != 1:
        bias = bias.contiguous()
    splits = splits or num_splits(b, hkv, m, q.device)
    block_n, warps, stages = config or (CONFIG_WHOLE if splits == 1 else CONFIG_SPLIT)
    block_q = max(16, _pow2(group * n))
    block_d = max(16, _pow2(d))
    if q.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(
            "attend: the Triton kernels run on CUDA tensors, or on CPU under Triton's interpreter "
            "(TRITON_INTERPRET=1 set before triton is imported: tests only); use SDPA on CPU"
        )
    kernel, combine = _kernels()
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if new is not None:
        k_new, v_new, at = new
        if (
            k_new.shape != (b, n, hkv, d)
            or v_new.shape != k_new.shape
            or k_new.stride(-1) != 1
            or v_new.stride(-1) != 1
        ):
            raise ValueError(
                f"attend: new K/V {tuple(k_new.shape)} / {tuple(v_new.shape)}, expected {(b, n, hkv, d)}"
            )
    else:
        k_new, v_new, at = k, v, lo  # unused (FUSED_WRITE off)
    fp32 = q.dtype == torch.float32
    parts = _split_partials(out, b * hkv, splits, block_q, block_d)
    kernel[(b * hkv, splits)](
        q, k, v, bias, lo, hi, out, *parts, k_new, v_new, at,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        k_new.stride(0), k_new.stride(1), k_new.stride(2),
        v_new.stride(0), v_new.stride(1), v_new.stride(2),
        bias.stride(0), bias.stride(1),
        out.stride(0), out.stride(1), out.stride(2),
        float(scale),
        N_TOK=n, GROUP=group, NUM_KV=hkv, HEAD_DIM=d, BLOCK_D=block_d, BLOCK_Q=block_q,
        BLOCK_N=block_n, SPLITS=splits, IEEE=fp32, FUSED_WRITE=new is not None,
        BLOCK_T=max(2, _pow2(n)),
        num_warps=warps, num_stages=stages,
    )  # fmt: skip
    _combine_splits(combine, parts, out, n, group, hkv, d, block_d, block_q, splits)
    return out


def _split_partials(
    out: torch.Tensor, programs: int, splits: int, block_q: int, block_d: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The split kernels' fp32 partial results per (row, KV head) program and split: running max
    and sum (programs, splits, BLOCK_Q), and the unnormalised output (…, BLOCK_D). With one split
    the kernel writes `out` itself and the three are placeholders (`out`)."""
    if splits == 1:
        return out, out, out
    shape = (programs, splits, block_q)
    return (
        torch.empty(shape, device=out.device, dtype=torch.float32),
        torch.empty(shape, device=out.device, dtype=torch.float32),
        torch.empty((*shape, block_d), device=out.device, dtype=torch.float32),
    )


def _combine_splits(
    combine: Any,
    parts: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    out: torch.Tensor,
    n: int,
    group: int,
    hkv: int,
    d: int,
    block_d: int,
    block_q: int,
    splits: int,
) -> None:
    """Merge the splits' partials into `out` (B, L, H, D): one program per row and KV head; nothing
    to do with one split."""
    if splits == 1:
        return
    combine[(out.shape[0] * hkv,)](
        *parts, out,
        out.stride(0), out.stride(1), out.stride(2),
        N_TOK=n, GROUP=group, NUM_KV=hkv, HEAD_DIM=d, BLOCK_D=block_d, BLOCK_Q=block_q,
        SPLITS=splits,
        num_warps=4,
    )  # fmt: skip


def attend_paged(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    table: torch.Tensor,
    lengths: torch.Tensor,
    scale: float,
    page_size: int,
    splits: int | None = None,
    config: tuple[int, int, int] | None = None,
) -> torch.Tensor:
    """softmax(q k^T * scale) v per row over the row's positions [0, lengths[r]), read through pages.

    q (B, L, H, D) with H = G * H_kv; k_pool, v_pool (num_slots, H_kv, D) with unit stride over D;
    table (B, W) int32 or int64 page ids (entries past a row's length are never read); lengths (B,)
    int32 or int64, each >= 1 and <= W * page_size; returns (B, L, H, D) in q's dtype. Every query
    of a row sees the same keys (no mask). splits: key splits per (row, KV head), default
    `num_splits(B, H_kv, W * page_size)`: a function of the static shapes only, so a captured graph
    keeps it while the lengths change from replay to replay; config: (keys per tile, warps, stages)."""
    b, n, h, d = q.shape
    hkv = k_pool.shape[1]
    if (
        h % hkv
        or n > MAX_TOKENS
        or k_pool.dim() != 3
        or k_pool.stride(-1) != 1
        or v_pool.stride() != k_pool.stride()
        or v_pool.shape != k_pool.shape
        or table.dim() != 2
        or table.shape[0] != b
        or lengths.shape != (b,)
    ):
        raise ValueError(
            f"attend_paged: q {tuple(q.shape)}, pools {tuple(k_pool.shape)} / {tuple(v_pool.shape)} "
            f"(strides {k_pool.stride()} / {v_pool.stride()}), table {tuple(table.shape)}, "
            f"lengths {tuple(lengths.shape)}: "
            f"needs heads divisible by KV heads, at most {MAX_TOKENS} tokens per row, two alike pools "
            "(slots, KV heads, head dim) with unit stride over the head dimension, one page-table row and "
            "one length per row"
        )
    if q.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(
            "attend_paged: the Triton kernels run on CUDA tensors, or on CPU under Triton's interpreter "
            "(TRITON_INTERPRET=1 set before triton is imported: tests only); use `paged_reference` on CPU"
        )
    group = h // hkv
    width = table.shape[1]
    q = q if q.stride(-1) == 1 else q.contiguous()
    table = table if table.stride(-1) == 1 else table.contiguous()
    splits = splits or num_splits(b, hkv, width * page_size, q.device)
    block_n, warps, stages = config or ((128, 4, 2) if q.element_size() <= 2 else (64, 4, 2))
    block_q = max(16, _pow2(group * n))
    block_d = max(16, _pow2(d))
    kernel = _paged_kernel()
    combine = _kernels()[1]
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    parts = _split_partials(out, b * hkv, splits, block_q, block_d)
    kernel[(b * hkv, splits)](
        q, k_pool, v_pool, table, lengths, out, *parts,
        q.stride(0), q.stride(1), q.stride(2),
        k_pool.stride(0), k_pool.stride(1), table.stride(0),
        out.stride(0), out.stride(1), out.stride(2),
        float(scale),
        N_TOK=n, GROUP=group, NUM_KV=hkv, HEAD_DIM=d, BLOCK_D=block_d, BLOCK_Q=block_q,
        BLOCK_N=block_n, SPLITS=splits, PAGE_SIZE=page_size, IEEE=q.dtype == torch.float32,
        num_warps=warps, num_stages=stages,
    )  # fmt: skip
    _combine_splits(combine, parts, out, n, group, hkv, d, block_d, block_q, splits)
    return out


def paged_reference(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    table: torch.Tensor,
    lengths: torch.Tensor,
    scale: float,
    page_size: int,
) -> torch.Tensor:
    """`attend_paged`'s result by gathering every row's W * page_size slots into a padded copy and one
    SDPA call (positions past a row's length masked; GQA without repeating K/V): what the kernel is
    tested against, and the paged decode's attention where the kernel is not used. Reads the whole
    table width: pass `table[:, :pages]` to gather fewer slots."""
    width = table.shape[1]
    pos = torch.arange(width * page_size, device=table.device)
    pages = table.long()[:, pos // page_size].clamp(min=0)  # (B, K); -1 entries lie past the length
    slots = pages * page_size + pos % page_size
    valid = pos[None, :] < lengths.long()[:, None]  # (B, K)
    keys, values = k_pool[slots].transpose(1, 2), v_pool[slots].transpose(1, 2)  # (B, H_kv, K, D)
    o = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), keys, values, attn_mask=valid[:, None, None, :], scale=scale, enable_gqa=True
    )  # (B, H, L, D)
    return o.transpose(1, 2)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """The same attention through SDPA over every slot, GQA folded like the kernel's (each KV head's
    query heads and tokens on the query axis, so K/V are not repeated): q (B, L, H, D), k/v
    (B, H_kv, M, D), bias (B, 1, G*L, M) = the mask repeated G times -> (B, L, H, D). The runner's
    path where Triton is not used (it repeats the mask once for all layers)."""
    b, n, h, d = q.shape
    hkv = k.shape[1]
    group = h // hkv
    qf = q.reshape(b, n, hkv, group, d).permute(0, 2, 3, 1, 4).reshape(b, hkv, group * n, d)
    o = torch.nn.functional.scaled_dot_product_attention(qf, k, v, attn_mask=bias, scale=scale)
    return o.reshape(b, hkv, group, n, d).permute(0, 3, 1, 2, 4).reshape(b, n, h, d)


def reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
    new: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """`attend`'s result through `sdpa` (every slot read; `new` written into k and v first): what
    `attend` is tested against."""
    n, h = q.shape[1], q.shape[2]
    if new is not None:
        slots = int(new[2][0]) + torch.arange(n, device=k.device)
        k.index_copy_(2, slots, new[0].transpose(1, 2))
        v.index_copy_(2, slots, new[1].transpose(1, 2))
    return sdpa(q, k, v, mask.repeat(1, 1, h // k.shape[1], 1), scale)


def _pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def _kernels() -> tuple[Any, Any]:
    """The two kernels, built once (compiled per shape on first launch, or interpreted on CPU)."""
    with _BUILD_LOCK:
        return _build()


def _paged_kernel() -> Any:
    """The paged kernel, built once (compiled per shape on first launch, or interpreted on CPU)."""
    with _BUILD_LOCK:
        return _build_paged()


@functools.cache
def _build_paged() -> Any:
    import triton
    import triton.language as tl

    @triton.jit  # type: ignore[untyped-decorator]
    def paged_attention(  # type: ignore[no-untyped-def]
        Q, K, V, Table, Lengths, Out, Mpart, Lpart, Apart,
        sq_b, sq_t, sq_h, sk_s, sk_h, st_b, so_b, so_t, so_h,
        scale,
        N_TOK: tl.constexpr, GROUP: tl.constexpr, NUM_KV: tl.constexpr, HEAD_DIM: tl.constexpr,
        BLOCK_D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr, SPLITS: tl.constexpr,
        PAGE_SIZE: tl.constexpr, IEEE: tl.constexpr,
    ):  # fmt: skip
        bh = tl.program_id(0)
        split = tl.program_id(1)
        row = bh // NUM_KV
        head = bh % NUM_KV
        r = tl.arange(0, BLOCK_Q)  # query row = g * N_TOK + t
        g = r // N_TOK
        t = r % N_TOK
        r_ok = r < GROUP * N_TOK
        d = tl.arange(0, BLOCK_D)
        d_ok = d < HEAD_DIM
        q_ptr = Q + row * sq_b + t[:, None] * sq_t + (head * GROUP + g)[:, None] * sq_h + d[None, :]
        q = tl.load(q_ptr, mask=r_ok[:, None] & d_ok[None, :], other=0.0)
        length = tl.load(Lengths + row).to(tl.int32)
        span = tl.cdiv(tl.cdiv(length, SPLITS), BLOCK_N) * BLOCK_N
        start = split * span
        end = tl.minimum(start + span, length)
        m_i = tl.full([BLOCK_Q], -1.0e30, tl.float32)  # finite: a blocked score (-3e38) never wins
        l_i = tl.zeros([BLOCK_Q], tl.float32)
        acc = tl.zeros([BLOCK_Q, BLOCK_D], tl.float32)
        t_base = Table + row * st_b
        for n0 in range(start, end, BLOCK_N):
            n = n0 + tl.arange(0, BLOCK_N)
            n_ok = n < end
            page = tl.load(t_base + n // PAGE_SIZE, mask=n_ok, other=0).to(tl.int64)
            slot = page * PAGE_SIZE + n % PAGE_SIZE  # (BLOCK_N,) int64: a tile may span several pages
            kv_off = slot[:, None] * sk_s + head * sk_h + d[None, :]
            kv_mask = n_ok[:, None] & d_ok[None, :]
            k = tl.load(K + kv_off, mask=kv_mask, other=0.0)
            if IEEE:
                s = tl.dot(q, tl.trans(k), input_precision="ieee")
            else:
                s = tl.dot(q, tl.trans(k))
            s = tl.where(r_ok[:, None] & n_ok[None, :], s * scale, -3.0e38)
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(V + kv_off, mask=kv_mask, other=0.0)
            if IEEE:
                pv = tl.dot(p.to(v.dtype), v, input_precision="ieee")
            else:
                pv = tl.dot(p.to(v.dtype), v)
            acc = acc * alpha[:, None] + pv
            m_i = m_new
        if SPLITS == 1:
            o = acc / tl.maximum(l_i, 1.0e-30)[:, None]
            o_ptr = Out + row * so_b + t[:, None] * so_t + (head * GROUP + g)[:, None] * so_h + d[None, :]
            tl.store(o_ptr, o.to(Out.dtype.element_ty), mask=r_ok[:, None] & d_ok[None, :])
        else:
            at = (bh * SPLITS + split) * BLOCK_Q + r
            tl.store(Mpart + at, m_i)
            tl.store(Lpart + at, l_i)
            tl.store(Apart + at[:, None] * BLOCK_D + d[None, :], acc)

    return paged_attention


@functools.cache
def _build() -> tuple[Any, Any]:
    import triton
    import triton.language as tl

    # Triton kernels take untyped pointers and constexprs: mypy cannot check them
    @triton.jit  # type: ignore[untyped-decorator]
    def block_attention(  # type: ignore[no-untyped-def]
        Q, K, V, Bias, Lo, Hi, Out, Mpart, Lpart, Apart, KN, VN, At,
        sq_b, sq_t, sq_h, sk_b, sk_h, sk_m, skn_b, skn_t, skn_h, svn_b, svn_t, svn_h,
        sb_b, sb_t, so_b, so_t, so_h,
        scale,
        N_TOK: tl.constexpr, GROUP: tl.constexpr, NUM_KV: tl.constexpr, HEAD_DIM: tl.constexpr,
        BLOCK_D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr, SPLITS: tl.constexpr,
        IEEE: tl.constexpr, FUSED_WRITE: tl.constexpr, BLOCK_T: tl.constexpr,
    ):  # fmt: skip
        bh = tl.program_id(0)
        split = tl.program_id(1)
        row = bh // NUM_KV
        head = bh % NUM_KV
        r = tl.arange(0, BLOCK_Q)  # query row = g * N_TOK + t
        g = r // N_TOK
        t = r % N_TOK
        r_ok = r < GROUP * N_TOK
        d = tl.arange(0, BLOCK_D)
        d_ok = d < HEAD_DIM
        q_ptr = Q + row * sq_b + t[:, None] * sq_t + (head * GROUP + g)[:, None] * sq_h + d[None, :]
        q = tl.load(q_ptr, mask=r_ok[:, None] & d_ok[None, :], other=0.0)
        lo = tl.load(Lo + row)
        hi = tl.load(Hi + row)
        span = tl.cdiv(tl.cdiv(hi - lo, SPLITS), BLOCK_N) * BLOCK_N
        start = lo + split * span
        end = tl.minimum(start + span, hi)
        m_i = tl.full([BLOCK_Q], -1.0e30, tl.float32)  # finite: a blocked score (-3e38) never wins
        l_i = tl.zeros([BLOCK_Q], tl.float32)
        acc = tl.zeros([BLOCK_Q, BLOCK_D], tl.float32)
        k_base = K + row * sk_b + head * sk_h
        v_base = V + row * sk_b + head * sk_h
        b_base = Bias + row * sb_b + t[:, None] * sb_t
        kn_base = KN + row * skn_b + head * skn_h
        vn_base = VN + row * svn_b + head * svn_h
        w0 = tl.load(At) if FUSED_WRITE else 0  # first slot of this forward's own tokens
        for n0 in range(start, end, BLOCK_N):
            n = n0 + tl.arange(0, BLOCK_N)
            n_ok = n < end
            fresh = n_ok & (n >= w0) & (n < w0 + N_TOK)  # this forward's tokens: read from KN / VN
            if FUSED_WRITE:
                kv_mask = (n_ok & ~fresh)[:, None] & d_ok[None, :]
                new_mask = fresh[:, None] & d_ok[None, :]
            else:
                kv_mask = n_ok[:, None] & d_ok[None, :]
                new_mask = kv_mask  # unused
            k = tl.load(k_base + n[:, None] * sk_m + d[None, :], mask=kv_mask, other=0.0)
            if FUSED_WRITE:
                k += tl.load(kn_base + (n - w0)[:, None] * skn_t + d[None, :], mask=new_mask, other=0.0)
            if IEEE:
                s = tl.dot(q, tl.trans(k), input_precision="ieee")
            else:
                s = tl.dot(q, tl.trans(k))
            bias = tl.load(b_base + n[None, :], mask=r_ok[:, None] & n_ok[None, :], other=-3.0e38)
            s = s * scale + bias.to(tl.float32)
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_base + n[:, None] * sk_m + d[None, :], mask=kv_mask, other=0.0)
            if FUSED_WRITE:
                v += tl.load(vn_base + (n - w0)[:, None] * svn_t + d[None, :], mask=new_mask, other=0.0)
            if IEEE:
                pv = tl.dot(p.to(v.dtype), v, input_precision="ieee")
            else:
                pv = tl.dot(p.to(v.dtype), v)
            acc = acc * alpha[:, None] + pv
            m_i = m_new
        if FUSED_WRITE:
            if split == 0:  # the cache write: no other program reads these slots from the cache
                tt = tl.arange(0, BLOCK_T)
                t_ok = (tt < N_TOK)[:, None] & d_ok[None, :]
                kn = tl.load(kn_base + tt[:, None] * skn_t + d[None, :], mask=t_ok)
                vn = tl.load(vn_base + tt[:, None] * svn_t + d[None, :], mask=t_ok)
                tl.store(k_base + (w0 + tt)[:, None] * sk_m + d[None, :], kn, mask=t_ok)
                tl.store(v_base + (w0 + tt)[:, None] * sk_m + d[None, :], vn, mask=t_ok)
        if SPLITS == 1:
            o = acc / tl.maximum(l_i, 1.0e-30)[:, None]
            o_ptr = Out + row * so_b + t[:, None] * so_t + (head * GROUP + g)[:, None] * so_h + d[None, :]
            tl.store(o_ptr, o.to(Out.dtype.element_ty), mask=r_ok[:, None] & d_ok[None, :])
        else:
            at = (bh * SPLITS + split) * BLOCK_Q + r
            tl.store(Mpart + at, m_i)
            tl.store(Lpart + at, l_i)
            tl.store(Apart + at[:, None] * BLOCK_D + d[None, :], acc)

    @triton.jit  # type: ignore[untyped-decorator]
    def combine(  # type: ignore[no-untyped-def]
        Mpart, Lpart, Apart, Out, so_b, so_t, so_h,
        N_TOK: tl.constexpr, GROUP: tl.constexpr, NUM_KV: tl.constexpr, HEAD_DIM: tl.constexpr,
        BLOCK_D: tl.constexpr, BLOCK_Q: tl.constexpr, SPLITS: tl.constexpr,
    ):  # fmt: skip
        bh = tl.program_id(0)
        row = bh // NUM_KV
        head = bh % NUM_KV
        r = tl.arange(0, BLOCK_Q)
        d = tl.arange(0, BLOCK_D)
        top = tl.full([BLOCK_Q], -1.0e30, tl.float32)
        for s in range(SPLITS):
            top = tl.maximum(top, tl.load(Mpart + (bh * SPLITS + s) * BLOCK_Q + r))
        num = tl.zeros([BLOCK_Q, BLOCK_D], tl.float32)
        den = tl.zeros([BLOCK_Q], tl.float32)
        for s in range(SPLITS):
            at = (bh * SPLITS + s) * BLOCK_Q + r
            w = tl.exp(tl.load(Mpart + at) - top)
            den += w * tl.load(Lpart + at)
            num += w[:, None] * tl.load(Apart + at[:, None] * BLOCK_D + d[None, :])
        o = num / tl.maximum(den, 1.0e-30)[:, None]
        g = r // N_TOK
        t = r % N_TOK
        ok = (r < GROUP * N_TOK)[:, None] & (d < HEAD_DIM)[None, :]
        o_ptr = Out + row * so_b + t[:, None] * so_t + (head * GROUP + g)[:, None] * so_h + d[None, :]
        tl.store(o_ptr, o.to(Out.dtype.element_ty), mask=ok)

    return block_attention, combine
