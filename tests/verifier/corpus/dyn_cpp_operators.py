# cudice: reference=references/relu.py
# corpus: kind=dynamic verdict=incorrect codes=dynamic.torch_kernels_did_work
# exploit: ATen operators (x * (x > 0)) do the work in C++; a no-op kernel is launched for appearances
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
__global__ void touch(float* out) { }
torch::Tensor relu_cuda(torch::Tensor x) {
    auto r = x * (x > 0).to(x.scalar_type());
    touch<<<1, 1>>>(r.data_ptr<float>());
    return r;
}
"""

cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

ext = load_inline(
    name="dyn_cpp_operators",
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
