"""Sealed input sets: staged before the clock starts, usable only once their timed call begins.

The judge stages the fresh input sets of a timed repetition in the runner before starting its
clock (moving gigabytes is not what is timed). A candidate that computed its outputs while the
sets arrive would then be timed on lookups. So every tensor of a set travels XOR-ed, bit for bit,
with a key stream, and the key reaches the runner only in the call's own message: the runner
unseals each set just before its call, inside the clock (the cost is the same in both runners and
cancels in the difference of their times). XOR on the raw bits is exact: the unsealed tensor is
the one the judge drew, bit for bit.

The key stream is Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
SC 2011) under a 64-bit key per tensor, counted over the whole tensor: no part of it repeats, so
known values in an input (the zeros of a triangular matrix, small integer labels) reveal the
stream only where they are, never elsewhere. On CUDA it is one NVRTC kernel per tensor
(run/nvrtc_launch.py), a single pass that reads and writes the tensor; elsewhere, or where NVRTC
is missing, the same function in PyTorch operations, bit for bit the same.

Not covered: Philox is a statistical generator, not a cipher with a security proof (no practical
key recovery from its output is published); non-tensor inputs (integers, floats, shapes) travel
in the clear: they are the same for every call of a problem.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import Any

_MASK32 = 0xFFFFFFFF
_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_ROUNDS = 10
_THREADS = 256
_KERNEL_SOURCE = r"""
extern "C" __global__ void cudice_seal(unsigned int* w, long long nwords, unsigned int k0,
                                       unsigned int k1) {
    long long groups = (nwords + 3) / 4;
    for (long long g = blockIdx.x * (long long)blockDim.x + threadIdx.x; g < groups;
         g += (long long)gridDim.x * blockDim.x) {
        unsigned int c0 = (unsigned int)g, c1 = (unsigned int)(g >> 32), c2 = 0u, c3 = 0u;
        unsigned int a = k0, b = k1;
        for (int r = 0; r < 10; ++r) {
            unsigned int hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
            unsigned int hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
            unsigned int n0 = hi1 ^ c1 ^ a, n2 = hi0 ^ c3 ^ b;
            c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
            a += 0x9E3779B9u; b += 0xBB67AE85u;
        }
        long long j = 4 * g;
        w[j] ^= c0;
        if (j + 1 < nwords) w[j + 1] ^= c1;
        if (j + 2 < nwords) w[j + 2] ^= c2;
        if (j + 3 < nwords) w[j + 3] ^= c3;
    }
}
"""


def _cuda_kernel() -> Any:
    """The NVRTC kernel, or None without NVRTC (the PyTorch form gives the same bits, slower)."""
    from cudice.verifier.run.nvrtc_launch import compiled

    return compiled(_KERNEL_SOURCE, "cudice_seal")


def tensor_key(key: int, i: int) -> int:
    """The 64-bit key of the `i`-th tensor of a set sealed under `key`."""
    return (key + (i + 1) * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF


def stream_words(start: int, count: int, key: int, device: Any) -> Any:
    """Words `start .. start+count` of the key stream under `key`, as int64 in [0, 2**32): the
    kernel's function in PyTorch operations (int64 products wrap, so their low and high halves are
    the unsigned 32-bit multiply's)."""
    import torch

    if count <= 0:
        return torch.zeros(0, dtype=torch.int64, device=device)
    g = torch.arange(start // 4, (start + count - 1) // 4 + 1, dtype=torch.int64, device=device)
    c0, c1 = g & _MASK32, (g >> 32) & _MASK32
    c2, c3 = torch.zeros_like(g), torch.zeros_like(g)
    a, b = key & _MASK32, (key >> 32) & _MASK32
    for _ in range(_ROUNDS):
        p0, p1 = c0 * _M0, c2 * _M1
        hi0, lo0 = (p0 >> 32) & _MASK32, p0 & _MASK32
        hi1, lo1 = (p1 >> 32) & _MASK32, p1 & _MASK32
        c0, c1, c2, c3 = hi1 ^ c1 ^ a, lo1, hi0 ^ c3 ^ b, lo0
        a, b = (a + _W0) & _MASK32, (b + _W1) & _MASK32
    words = torch.stack([c0, c1, c2, c3], dim=1).view(-1)
    skip = start % 4
    return words[skip : skip + count]


def _as_int32(words: Any) -> Any:
    """Values in [0, 2**32) as int32 of the same bits."""
    import torch

    return torch.where(words >= 1 << 31, words - (1 << 32), words).to(torch.int32)


@dataclass(frozen=True, slots=True)
class Plan:
    """How to seal one tensor of a set, worked out once (at staging) so that a timed call only launches."""

    index: int  # the tensor's place in its set (its key is `tensor_key(key, index)`)
    words: Any  # the whole 32-bit words of its bytes (an int32 view), or None
    ptr: ctypes.c_void_p  # their address, for the kernel
    nwords: ctypes.c_longlong
    tail: Any  # the last `nbytes % 4` bytes (a uint8 view), or None
    blocks: int


def plan(tensors: list[Any]) -> list[Plan]:
    """The plans of every tensor of `tensors` that a seal changes (non-empty tensors)."""
    import torch

    plans = []
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor) or t.numel() == 0:
            continue
        if not t.is_contiguous():
            raise ValueError("a sealed input must be contiguous (the judge stages contiguous copies)")
        raw = t.reshape(-1).view(torch.uint8).view(-1)
        nwords = raw.numel() // 4
        words = raw[: 4 * nwords].view(torch.int32) if nwords else None
        tail = raw[4 * nwords :] if raw.numel() % 4 else None
        plans.append(
            Plan(
                i,
                words,
                ctypes.c_void_p(words.data_ptr() if words is not None else 0),
                ctypes.c_longlong(nwords),
                tail,
                max(1, min(math.ceil(nwords / 4 / _THREADS), 132 * 32)),
            )
        )
    return plans


def toggle_planned(plans: list[Plan], key: int) -> None:
    """Seal or unseal (the same operation) the tensors of `plans` in place under `key`."""
    import torch

    for pl in plans:
        k = tensor_key(key, pl.index)
        if pl.words is not None:
            kernel = _cuda_kernel() if pl.words.is_cuda and (pl.ptr.value or 0) % 4 == 0 else None
            if kernel is not None:
                kernel(
                    pl.blocks, _THREADS, pl.ptr, pl.nwords, ctypes.c_uint(k & _MASK32), ctypes.c_uint(k >> 32)
                )
            else:
                pl.words.bitwise_xor_(_as_int32(stream_words(0, pl.nwords.value, k, pl.words.device)))
        if pl.tail is not None:  # the last bytes: the low bytes of the next word of the stream
            word = int(stream_words(pl.nwords.value, 1, k, "cpu")[0])
            mask = [(word >> (8 * b)) & 0xFF for b in range(pl.tail.numel())]
            pl.tail.bitwise_xor_(torch.tensor(mask, dtype=torch.uint8, device=pl.tail.device))


def toggle(tensors: list[Any], key: int) -> None:
    """Seal or unseal (the same operation) every contiguous tensor of `tensors` in place."""
    toggle_planned(plan(tensors), key)
