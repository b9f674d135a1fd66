"""The judge's own small CUDA kernels (the witness digest, the seal), built by NVRTC and launched
with one driver call each.

Role: `Kernel(source, name)` compiles `source` through `torch.cuda._compile_kernel` (NVRTC, no
nvcc, no headers) and `kernel(grid, block, *args)` launches it on the current stream with
`args` as ctypes values (`ctypes.c_void_p` for pointers, `c_int`, `c_uint`, `c_longlong`).
Both runs inside the timed calls of both runners, so what a launch costs on the host is part of
every timed call: PyTorch's own launcher opens the driver library and converts its arguments on
every call, which costs tens of microseconds and adds spread; this one keeps the driver's entry
point and costs a few.

Contract: `Kernel(...)` raises when NVRTC or the driver is missing; `compiled(source, name)` is the
kernel built once per process, or None there (callers fall back to the same function in PyTorch
operations); a launch that the driver refuses raises `RuntimeError`. Not
covered: shared memory above 48 KiB, more than one GPU per process.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

_launch_fn: Any = None


def _driver_launch() -> Any:
    global _launch_fn
    if _launch_fn is None:
        fn = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
        fn.restype = ctypes.c_int
        _launch_fn = fn
    return _launch_fn


class Kernel:
    """One NVRTC-compiled kernel and its launch."""

    def __init__(self, source: str, name: str) -> None:
        from torch.cuda import _compile_kernel

        self._compiled = _compile_kernel(source, name)
        self._func = self._compiled.func  # a PyTorch without it raises here: callers fall back
        self._launch = _driver_launch()

    def __call__(self, grid: int, block: int, *args: Any) -> None:
        import torch

        params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        rc = self._launch(self._func, grid, 1, 1, block, 1, 1, 0, stream, params, None)
        if rc != 0:
            raise RuntimeError(f"CUDA error: cuLaunchKernel returned {rc}")


@functools.cache
def compiled(source: str, name: str) -> Kernel | None:
    """`Kernel(source, name)`, built on the first call of the process; None where it cannot be built."""
    try:
        return Kernel(source, name)
    except Exception:  # no NVRTC or no driver here
        return None
