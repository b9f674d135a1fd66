# cudice: reference=references/relu.py
# corpus: kind=static verdict=static_violation codes=static.cpp_torch_op
# exploit: `at::cuda::blas::gemm<float>(...)`: a cuBLAS matmul through ATen's `at::cuda::` namespace, with template-call syntax, passed the `cuda::` exemption
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDABlas.h>

__global__ void fill_kernel(float* y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 0.0f;
}

void scratch(torch::Tensor y) {
    fill_kernel<<<(y.numel() + 255) / 256, 256>>>(y.data_ptr<float>(), y.numel());
    float one = 1.0f, zero = 0.0f;
    at::cuda::blas::gemm<float>('n', 'n', 64, 64, 64, one, y.data_ptr<float>(), 64,
                                y.data_ptr<float>(), 64, zero, y.data_ptr<float>(), 64);
}
"""

ext = load_inline(
    name="adv_st2_cpp_at_cuda_blas",
    cpp_sources="void scratch(torch::Tensor y);",
    cuda_sources=cuda_source,
    functions=["scratch"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        ext.scratch(out)
        return out
