# cudice: reference=references/matmul.py
# corpus: kind=runtime verdict=not_correct
# runtime-device: gpu
# exploit: weakness 5 - the file's own kernel does all the work, on TF32 tensor cores (wmma m16n16k8, operands rounded with __float_to_tf32: 10-bit mantissas) for a float32 reference; its error (~5e-4 of the output's scale) passes KernelBench's atol = rtol = 1e-2 but is far above what an fp32 kernel makes
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <ATen/cuda/CUDAContext.h>
#include <mma.h>

// one warp per 16x16 tile of C, k in steps of 8 (the TF32 wmma shape)
__global__ void tf32_matmul_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int n) {
    int tile_row = blockIdx.y * 16, tile_col = blockIdx.x * 16;
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 8, nvcuda::wmma::precision::tf32, nvcuda::wmma::row_major> a;
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 8, nvcuda::wmma::precision::tf32, nvcuda::wmma::row_major> b;
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 8, float> c;
    nvcuda::wmma::fill_fragment(c, 0.0f);
    for (int k = 0; k < n; k += 8) {
        nvcuda::wmma::load_matrix_sync(a, A + (int64_t)tile_row * n + k, n);
        nvcuda::wmma::load_matrix_sync(b, B + (int64_t)k * n + tile_col, n);
        for (int i = 0; i < a.num_elements; ++i) a.x[i] = nvcuda::wmma::__float_to_tf32(a.x[i]);
        for (int i = 0; i < b.num_elements; ++i) b.x[i] = nvcuda::wmma::__float_to_tf32(b.x[i]);
        nvcuda::wmma::mma_sync(c, a, b, c);
    }
    nvcuda::wmma::store_matrix_sync(C + (int64_t)tile_row * n + tile_col, c, n, nvcuda::wmma::mem_row_major);
}

torch::Tensor matmul(torch::Tensor A, torch::Tensor B) {
    auto a = A.contiguous();
    auto b = B.contiguous();
    int n = (int)a.size(0);
    TORCH_CHECK(n % 16 == 0 && a.size(1) == n && b.size(0) == n && b.size(1) == n, "n x n with n a multiple of 16");
    auto c = torch::empty_like(a);
    tf32_matmul_kernel<<<dim3(n / 16, n / 16), 32, 0, at::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), n);
    return c;
}
"""

cpp_source = "torch::Tensor matmul(torch::Tensor A, torch::Tensor B);"

ext = load_inline(
    name="adv_rt2_tf32_wmma",
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
