# cudice: reference=references/relu.py
# corpus: kind=dynamic verdict=incorrect codes=dynamic.constant_output
# exploit: a C++ static (hidden behind a macro) keeps the first output and returns it for every later input
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#define KEEP static
__global__ void relu_kernel(const float* x, float* out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
torch::Tensor relu_cuda(torch::Tensor x) {
    KEEP torch::Tensor cached;
    if (cached.defined()) return cached;
    cached = torch::empty_like(x);
    int64_t n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), cached.data_ptr<float>(), n);
    return cached;
}
"""

cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

ext = load_inline(
    name="dyn_macro_static_cache",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['relu_cuda'],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.relu_cuda(x)
