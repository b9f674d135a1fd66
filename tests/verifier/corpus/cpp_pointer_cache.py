# cudice: reference=references/relu.py
# corpus: kind=static verdict=static_violation codes=static.cpp_pointer_cache
# exploit: C++ caches outputs keyed by the input pointer, invisible to Python (gpu-mode PR #104)
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

#include <unordered_map>
static std::unordered_map<const void*, torch::Tensor> cache;

torch::Tensor relu_cuda(torch::Tensor x) {
    auto it = cache.find(x.data_ptr());
    if (it != cache.end()) return it->second;
    auto out = torch::empty_like(x);
    int64_t n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    cache[x.data_ptr()] = out;
    return out;
}
"""

cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

relu_ext = load_inline(
    name="cpp_pointer_cache",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['relu_cuda'],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = relu_ext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.relu_cuda(x)
