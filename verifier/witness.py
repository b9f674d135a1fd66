"""Proof of work for timed calls: a keyed, non-linear digest of every output, checked by the judge.

The judge's clock stops when a timed batch's reply arrives, and that reply carries, for every
call of the batch, `witness(outputs, key)`: `sum_j w_j * x_j**2` over each output tensor, where
`w_j` in [0.5, 1.5) comes from a hash of the element index and a 64-bit key drawn by the judge for
that call. The digest needs every element of every output, so a reply cannot arrive before the
work is done: deferred work, a skipped synchronisation, outputs computed on a side stream without
a dependency, or lazily materialised outputs make the digest wrong (the call fails) or land inside
the clock (the call costs its time). The weights change with every call, so a linear shortcut
(projecting the inputs through a precomputed `L^T diag(w) L`, Freivalds-style) costs as much as
the work; the squares make the digest non-linear in the outputs.

The judge computes the same digest of the reference's output for the same inputs and accepts the
candidate's when `|d_cand - d_ref|` is within what the element tolerance (tolerance.py) allows:
`sum_j w_j (2 |r_j| e_j + e_j**2)` with `e_j = a + b |r_j|` (bounded above with `w_j < 1.5`).

On CUDA the digest is one fused kernel (NVRTC, through `torch.cuda._compile_kernel`; one pass
over the output, float64 accumulation); elsewhere, or where that kernel cannot be built, the same
function in PyTorch operations. Both give the same value up to rounding.

Not covered: a candidate that fuses the digest into its own kernel and never writes its output
(it saves at most the output's write, and the randomly fetched outputs must still exist); the
digest says nothing about correctness beyond the tolerance bound (outputs chosen at random are
compared in full).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

_MASK32 = 0xFFFFFFFF
_CHUNK = 1 << 30
_KERNEL_SOURCE = r"""
extern "C" __global__ void cudice_witness(const float* x, int n, int chunk, unsigned int k0,
                                          unsigned int k1, double* out) {
    double acc = 0.0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        long long j = (long long)chunk * (1LL << 30) + i;
        unsigned int h = ((unsigned int)j ^ k0) ^ ((unsigned int)(j >> 32) * 0x27D4EB2Fu);
        h = (h ^ k1) * 0x9E3779B1u;
        h ^= h >> 15;
        h *= 0x85EBCA77u;
        h ^= h >> 13;
        float w = 0.5f + (float)(h >> 8) * (1.0f / 16777216.0f);
        float v = x[i];
        acc += (double)(w * v * v);
    }
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
    __shared__ double partial[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = lane < (int)(blockDim.x >> 5) ? partial[lane] : 0.0;
        for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
        if (lane == 0) atomicAdd(out, acc);
    }
}
"""
_kernel: Any = None
_kernel_failed = False


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    index: int  # the first output tensor that failed (-1 when ok)
    excess: float  # |d_cand - d_ref| / bound of that tensor (0 when ok)


def split_key(key: int) -> tuple[int, int]:
    """Two 32-bit halves of a 64-bit key (the kernel's and the reference function's arguments)."""
    return key & _MASK32, (key >> 32) & _MASK32


def _signed(u: int) -> int:
    """A 32-bit unsigned value as the signed C int the launcher passes (same bits)."""
    return u - (1 << 32) if u >= 1 << 31 else u


def _weights(n: int, key: int, device: Any) -> Any:
    """The per-element weights in PyTorch operations (bit-identical to the kernel's)."""
    import torch

    k0, k1 = split_key(key)
    j = torch.arange(n, dtype=torch.int64, device=device)
    h = ((j & _MASK32) ^ k0) ^ (((j >> 32) * 0x27D4EB2F) & _MASK32)
    h = ((h ^ k1) * 0x9E3779B1) & _MASK32
    h = h ^ (h >> 15)
    h = (h * 0x85EBCA77) & _MASK32
    h = h ^ (h >> 13)
    return 0.5 + (h >> 8).to(torch.float32) * (1.0 / 16777216.0)


def _flat_float(t: Any) -> Any:
    import torch

    x = t.detach()
    if x.is_complex():
        x = torch.view_as_real(x)
    if x.dtype != torch.float32:
        x = x.to(torch.float32)
    return x.contiguous().view(-1)


def _cuda_kernel() -> Any:
    global _kernel, _kernel_failed
    if _kernel is None and not _kernel_failed:
        try:
            from torch.cuda import _compile_kernel

            _kernel = _compile_kernel(_KERNEL_SOURCE, "cudice_witness")
        except Exception:  # no NVRTC here: the PyTorch form gives the same digest, slower
            _kernel_failed = True
    return _kernel


def digest_tensor(t: Any, key: int, out: Any, slot: int) -> None:
    """Add the digest of tensor `t` under `key` into `out[slot]` (float64, on `t`'s device); no sync."""
    import torch

    x = _flat_float(t)
    n = x.numel()
    if n == 0:
        return
    kernel = _cuda_kernel() if x.is_cuda else None
    if kernel is not None:
        k0, k1 = split_key(key)
        threads = 256
        for chunk in range(math.ceil(n / _CHUNK)):  # the kernel indexes with 32-bit ints
            part = x[chunk * _CHUNK : (chunk + 1) * _CHUNK]
            blocks = max(1, min(math.ceil(part.numel() / threads), 132 * 16))
            kernel(
                grid=(blocks, 1, 1),
                block=(threads, 1, 1),
                args=[part, part.numel(), chunk, _signed(k0), _signed(k1), out[slot:]],
            )
        return
    w = _weights(n, key, x.device)
    out[slot] += (w.to(torch.float64) * x.to(torch.float64).square()).sum()


def digest(outputs: list[Any], key: int, device: Any) -> Any:
    """One float64 digest per tensor of a forward's flattened outputs, as a tensor on `device`.

    Each tensor gets its own key (`key` + its index), so outputs cannot be swapped. No host sync:
    the caller reads the values back once per batch.
    """
    import torch

    out = torch.zeros(max(1, len(outputs)), dtype=torch.float64, device=device)
    for i, t in enumerate(outputs):
        if isinstance(t, torch.Tensor):
            digest_tensor(t, (key + i * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF, out, i)
    return out


def bound(ref: Any, a: float, b: float) -> float:
    """The largest |digest difference| an output within the element tolerance `a + b|r|` can make."""
    import torch

    r = _flat_float(ref).to(torch.float64)
    n = int(r.numel())
    s1 = float(r.abs().sum())
    s2 = float(r.square().sum())
    # sum_j 1.5 * (2|r| e + e^2), e = a + b|r|, expanded into sums of |r| and r^2
    total = 2 * a * s1 + 2 * b * s2 + n * a * a + 2 * a * b * s1 + b * b * s2
    # rounding of the float64 sums of float32 squares on either side
    return float(1.5 * total + 1e-6 * s2 + 1e-30)


def check(cand: list[float], expected: list[float], bounds: list[float]) -> Check:
    """Whether every digest of a call lies within its bound of the reference's digest."""
    if len(cand) < len(expected):
        return Check(False, len(cand), math.inf)
    for i, (c, e, bd) in enumerate(zip(cand, expected, bounds, strict=False)):
        diff = abs(c - e)
        if not math.isfinite(c) or diff > bd:
            return Check(False, i, diff / bd if math.isfinite(diff) else math.inf)
    return Check(True, -1, 0.0)
