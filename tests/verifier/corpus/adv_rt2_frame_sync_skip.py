# cudice: reference=references/matmul.py
# corpus: kind=runtime verdict=not_correct max_speedup=0.5
# runtime-device: gpu
# exploit: weakness 1+6 - an honest but slow tiled matmul whose timed calls end before its kernel does: in __init__ the file walks the frames of a traceback up to the runner's server object and replaces its sync with a no-op, and replaces torch._C._cuda_synchronize (the builtin beneath the guarded torch.cuda.synchronize) through a helper that patches the module it receives; the kernel (< 0.5 ms) finishes inside the next untimed preparation, and every output read (a device-to-host copy) still waits for it
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <ATen/cuda/CUDAContext.h>

#define TILE 16

__global__ void matmul_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int n) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < n; k0 += TILE) {
        As[threadIdx.y][threadIdx.x] = (row < n && k0 + threadIdx.x < n) ? A[(int64_t)row * n + k0 + threadIdx.x] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (k0 + threadIdx.y < n && col < n) ? B[(int64_t)(k0 + threadIdx.y) * n + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < n && col < n) C[(int64_t)row * n + col] = acc;
}

torch::Tensor matmul(torch::Tensor A, torch::Tensor B) {
    auto a = A.contiguous();
    auto b = B.contiguous();
    int n = (int)a.size(0);
    auto c = torch::empty_like(a);
    dim3 blocks((n + TILE - 1) / TILE, (n + TILE - 1) / TILE);
    matmul_kernel<<<blocks, dim3(TILE, TILE), 0, at::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), n);
    return c;
}
"""

cpp_source = "torch::Tensor matmul(torch::Tensor A, torch::Tensor B);"

ext = load_inline(
    name="adv_rt2_frame_sync_skip",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["matmul"],
    verbose=False,
)


def _profiling():
    return bool(torch.autograd.profiler._is_profiler_enabled)


def _lazy_sync(mod):
    real = mod._cuda_synchronize

    def sync():
        if _profiling():  # the profiler must see the kernel finish
            return real()
        return None

    setattr(mod, "_cuda_synchronize", sync)


def _caller_frames():
    try:
        raise LookupError
    except LookupError as err:
        frame = err.__traceback__.tb_frame
    while frame is not None:
        yield frame
        frame = frame.f_back


def _skip_server_sync():
    for frame in _caller_frames():
        server = frame.f_locals.get("self")
        if server is not None and hasattr(server, "_sync") and hasattr(server, "reply"):
            server._sync = lambda: None
            return


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        _skip_server_sync()
        _lazy_sync(torch._C)

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return ext.matmul(A, B)
