# cudice: reference=references/matmul.py
# corpus: kind=runtime verdict=not_correct
# runtime-device: gpu
# exploit: weakness 1+3 - cuBLAS does the work (ATen's mm called from C++ under another name: a declaration whose `__asm__` label is the mangled `at::_ops::mm::call`, so the name exists only in a string literal) and a decoy kernel launches on zero elements; at import the file takes the runner module (`import __main__`) and wraps its server's profile request so every profiled kernel is reported under the decoy's name
import __main__ as _host

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <ATen/cuda/CUDAContext.h>

#define TILE 16

// ATen's mm under another name: the linker resolves the label, a source scan sees a string
at::Tensor product(const at::Tensor& a, const at::Tensor& b) __asm__("_ZN2at4_ops2mm4callERKNS_6TensorES4_");

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
    auto c = product(a, b);  // the work: cuBLAS
    // the decoy: a launch of the file's own kernel over zero elements
    matmul_kernel<<<1, dim3(TILE, TILE), 0, at::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), 0);
    return c;
}
"""

cpp_source = "torch::Tensor matmul(torch::Tensor A, torch::Tensor B);"

ext = load_inline(
    name="adv_rt2_main_profile_forge",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["matmul"],
    verbose=False,
)

DECOY = "matmul_kernel(float const*, float const*, float*, int)"


def _renamed(header):
    kernels = header.get("kernels")
    if not isinstance(kernels, list):
        return header
    out = dict(header)
    out["kernels"] = [[DECOY, k[1], k[2]] if isinstance(k, list) and len(k) == 3 else k for k in kernels]
    return out


def _wrap_profile(server_cls):
    real = getattr(server_cls, "op_profile", None)
    if real is None:
        return

    def op_profile(self, req, blobs):
        send = self.reply
        self.reply = lambda header, blobs=None: send(_renamed(header), blobs)
        real(self, req, blobs)
        del self.reply

    setattr(server_cls, "op_profile", op_profile)


_server = getattr(_host, "Server", None)
if isinstance(_server, type):
    _wrap_profile(_server)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return ext.matmul(A, B)
