# cudice: reference=references/matmul.py
# corpus: kind=runtime verdict=not_correct
# runtime-device: gpu
# exploit: weakness 5 - the file's own tiled matmul keeps its tiles in half precision (`__float2half` on load, `__hmul` products, a float accumulator) for a float32 reference: half the shared memory and bandwidth, an error (~1e-3 of the output's scale) that passes KernelBench's atol = rtol = 1e-2; the static layer only warns (`static.precision_downgrade`)
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <ATen/cuda/CUDAContext.h>

#define TILE 16

__global__ void matmul_half_tiles_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int n) {
    __shared__ __half As[TILE][TILE];
    __shared__ __half Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < n; k0 += TILE) {
        As[threadIdx.y][threadIdx.x] = __float2half((row < n && k0 + threadIdx.x < n) ? A[(int64_t)row * n + k0 + threadIdx.x] : 0.0f);
        Bs[threadIdx.y][threadIdx.x] = __float2half((k0 + threadIdx.y < n && col < n) ? B[(int64_t)(k0 + threadIdx.y) * n + col] : 0.0f);
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += __half2float(__hmul(As[threadIdx.y][k], Bs[k][threadIdx.x]));
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
    matmul_half_tiles_kernel<<<blocks, dim3(TILE, TILE), 0, at::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), n);
    return c;
}
"""

cpp_source = "torch::Tensor matmul(torch::Tensor A, torch::Tensor B);"

ext = load_inline(
    name="adv_rt2_half_products",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["matmul"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return ext.matmul(A, B)
