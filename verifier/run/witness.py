"""Proof of work for timed calls: a keyed, non-linear digest of every output, checked by the judge.

The judge's clock stops when a timed call's answer arrives, and that answer carries
`digest(outputs, key)`: `sum_j w_j * x_j` over each output tensor, where the
signed weight `w_j`, of magnitude in [0.5, 1.5), comes from a hash of the element index and a
64-bit key the judge draws for that call. The digest needs every element of every output, so a
reply cannot be right before the work is done: deferred work, a skipped synchronisation, outputs
computed on a side stream without a dependency, stale buffers or lazily materialised outputs
make the digest wrong (the call fails) or land inside the clock (the call costs its time). The
weights change with every call, so projecting the inputs instead (`(L^T w) . x` for a linear
problem `L x`) costs as much as the work itself.

The judge computes the same digest of the reference's output for the same inputs and accepts the
candidate's within `bound()`: the spread that errors inside the element tolerance (run/tolerance.py)
can give a digest with random signs.

On CUDA the digest is one fused kernel (NVRTC, launched by run/nvrtc_launch.py; one pass over the
output, exact float64 products and sums); elsewhere, or where that kernel cannot be built, the
same function in PyTorch operations. Both give the same value up to rounding. NaN and Inf count
as 0 on both sides (a reference with an Inf would otherwise have a NaN digest and bound, and no
call could pass): where the reference has them, the full comparisons check them.

Not covered: a candidate that fuses the digest into its own kernel and never writes its output
and computes the outputs only when they are fetched (for an elementwise linear problem that saves
at most the output's write); the digest says nothing about correctness beyond the tolerance
bound (outputs chosen at random are compared in full).
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import Any

_MASK32 = 0xFFFFFFFF
_CHUNK = 1 << 30
NUM_DIGESTS = 4  # per output tensor: four sign patterns over shared magnitudes, one pass
_KERNEL_SOURCE = r"""
extern "C" __global__ void cudice_witness(const float* x, int n, int chunk, unsigned int k0,
                                          unsigned int k1, double* out) {
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        long long j = (long long)chunk * (1LL << 30) + i;
        unsigned int h = ((unsigned int)j ^ k0) ^ ((unsigned int)(j >> 32) * 0x27D4EB2Fu);
        h = (h ^ k1) * 0x9E3779B1u;
        h ^= h >> 15;
        h *= 0x85EBCA77u;
        h ^= h >> 13;
        float v = x[i];
        // NaN and Inf count as 0 on both sides (the judge compares them apart, in full)
        double xv = (__float_as_uint(v) & 0x7f800000u) == 0x7f800000u ? 0.0 : (double)v;
        double wx = (0.5 + (double)(h >> 9) * (1.0 / 8388608.0)) * xv;
        for (int k = 0; k < 4; ++k) acc[k] += ((h >> k) & 1u) ? -wx : wx;
    }
    __shared__ double partial[4][32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int k = 0; k < 4; ++k) {
        double a = acc[k];
        for (int off = 16; off > 0; off >>= 1) a += __shfl_down_sync(0xffffffffu, a, off);
        if (lane == 0) partial[k][warp] = a;
    }
    __syncthreads();
    if (warp == 0) {
        for (int k = 0; k < 4; ++k) {
            double a = lane < (int)(blockDim.x >> 5) ? partial[k][lane] : 0.0;
            for (int off = 16; off > 0; off >>= 1) a += __shfl_down_sync(0xffffffffu, a, off);
            if (lane == 0) atomicAdd(out + k, a);
        }
    }
}
"""


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    index: int  # the first output tensor that failed (-1 when ok)
    excess: float  # |d_cand - d_ref| / bound of that tensor (0 when ok)


def split_key(key: int) -> tuple[int, int]:
    """Two 32-bit halves of a 64-bit key (the kernel's and the reference function's arguments)."""
    return key & _MASK32, (key >> 32) & _MASK32


def _weights(n: int, key: int, device: Any) -> Any:
    """The (NUM_DIGESTS, n) signed weights in PyTorch operations (the kernel's, bit for bit)."""
    import torch

    k0, k1 = split_key(key)
    j = torch.arange(n, dtype=torch.int64, device=device)
    h = ((j & _MASK32) ^ k0) ^ (((j >> 32) * 0x27D4EB2F) & _MASK32)
    h = ((h ^ k1) * 0x9E3779B1) & _MASK32
    h = h ^ (h >> 15)
    h = (h * 0x85EBCA77) & _MASK32
    h = h ^ (h >> 13)
    w = 0.5 + (h >> 9).to(torch.float64) * (1.0 / 8388608.0)
    signs = torch.stack([((h >> k) & 1).bool() for k in range(NUM_DIGESTS)])
    return torch.where(signs, -w, w)


def _flat_float(t: Any) -> Any:
    import torch

    x = t.detach()
    if x.is_complex():
        x = torch.view_as_real(x.resolve_conj().resolve_neg())  # a lazy conjugate has no bytes of its own
    if x.dtype != torch.float32:
        x = x.to(torch.float32)
    return x.contiguous().view(-1)


def _cuda_kernel() -> Any:
    """The NVRTC kernel, or None without NVRTC (the PyTorch form gives the same digest, slower)."""
    from cudice.verifier.run.nvrtc_launch import compiled

    return compiled(_KERNEL_SOURCE, "cudice_witness")


def digest_tensor(t: Any, key: int, out: Any, slot: int) -> None:
    """Add the NUM_DIGESTS digests of tensor `t` under `key` into `out[4 slot : 4 slot + 4]`; no sync."""
    import torch

    # a contiguous float32 tensor is read in place (no view to make: each op costs host time
    # inside the timed call); anything else through a flat float32 copy
    plain = t.dtype == torch.float32 and t.is_contiguous() and t.is_cuda
    x = t if plain else _flat_float(t)
    n = x.numel()
    if n == 0:
        return
    kernel = _cuda_kernel() if x.is_cuda else None
    if kernel is not None:
        k0, k1 = split_key(key)
        threads = 256
        dest = ctypes.c_void_p(out.data_ptr() + out.element_size() * NUM_DIGESTS * slot)
        for chunk in range(math.ceil(n / _CHUNK)):  # the kernel indexes with 32-bit ints
            part = x if n <= _CHUNK else x.reshape(-1)[chunk * _CHUNK : (chunk + 1) * _CHUNK]
            blocks = max(1, min(math.ceil(part.numel() / threads), 132 * 16))
            kernel(
                blocks,
                threads,
                ctypes.c_void_p(part.data_ptr()),
                ctypes.c_int(part.numel()),
                ctypes.c_int(chunk),
                ctypes.c_uint(k0),
                ctypes.c_uint(k1),
                dest,
            )
        return
    x = x.reshape(-1) if plain else x
    w = _weights(n, key, x.device)
    x64 = torch.nan_to_num(x.to(torch.float64), nan=0.0, posinf=0.0, neginf=0.0)  # as the kernel does
    out[NUM_DIGESTS * slot : NUM_DIGESTS * (slot + 1)] += (w * x64).sum(dim=1)


def digest(outputs: list[Any], key: int, device: Any, out: Any = None) -> Any:
    """NUM_DIGESTS float64 digests per tensor of a forward's flattened outputs, on `device`.

    Each tensor gets its own key (`key` + its index), so outputs cannot be swapped. No host sync:
    the caller reads the values back once per batch. `out`: zeroed float64 room for them made
    beforehand (at least NUM_DIGESTS per tensor), else a new one.
    """
    import torch

    need = NUM_DIGESTS * max(1, len(outputs))
    if out is None or out.numel() < need:
        out = torch.zeros(need, dtype=torch.float64, device=device)
    else:
        out = out[:need]
    for i, t in enumerate(outputs):
        if isinstance(t, torch.Tensor):
            digest_tensor(t, (key + i * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF, out, i)
    return out


def bound(ref: Any, a: float, b: float) -> float:
    """How far an honest digest may lie from the reference's: `a`, `b` as in run/tolerance.py's norm check.

    An output that passes the comparison has `||c - r|| <= nu = (b ||r|| + a sqrt(n)) / 4` (its
    relative-norm check). For any error vector chosen without knowing the weights, `sum_j w_j e_j`
    has mean 0 and, by Hoeffding's inequality, exceeds `6 * 1.5 * ||e||` with probability below
    3e-8. An output that is wrong by about its own size moves each digest by about `||r||`, so
    four digests leave a wrong output a chance of about `(9 nu / ||r||)^4` of passing."""
    import torch

    r = torch.nan_to_num(_flat_float(ref).to(torch.float64), nan=0.0, posinf=0.0, neginf=0.0)
    n = int(r.numel())
    nu = 0.25 * (b * float(r.norm()) + a * math.sqrt(n))
    # the float64 sums of exact float64 products, added in another order on either side
    return float(9.0 * nu + 1e-12 * float(r.abs().sum()) + 1e-30)


def check(cand: list[float], expected: list[float], bounds: list[float]) -> Check:
    """Whether every digest of a call lies within its tensor's bound of the reference's digest.

    `cand` and `expected` hold NUM_DIGESTS values per output tensor, `bounds` one per tensor."""
    if len(cand) < len(expected):
        return Check(False, len(cand) // NUM_DIGESTS, math.inf)
    for i, (c, e) in enumerate(zip(cand, expected, strict=False)):
        bd = bounds[i // NUM_DIGESTS] if i // NUM_DIGESTS < len(bounds) else 0.0
        diff = abs(c - e)
        if not math.isfinite(c) or not diff <= bd:  # a NaN bound or digest fails
            return Check(False, i // NUM_DIGESTS, diff / bd if math.isfinite(diff) and bd > 0 else math.inf)
    return Check(True, -1, 0.0)
