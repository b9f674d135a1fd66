# cudice: reference=references/relu.py
# corpus: kind=hostile verdict=crash
# exploit: the C++ wrapper dereferences a null pointer (segfault in the extension)
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
__global__ void relu_kernel(const float* x, float* out, int64_t n) { }
torch::Tensor relu_cuda(torch::Tensor x) {
    volatile int* p = nullptr;
    *p = 1;
    auto out = torch::empty_like(x);
    relu_kernel<<<1, 1>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.numel());
    return out;
}
"""

cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

ext = load_inline(
    name="hostile_segfault",
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
