# cudice: reference=references/relu.py
# corpus: kind=static verdict=static_violation codes=static.dynamic_source
# exploit: a literal source list that is appended to at import (`SOURCES.append(...)`): the literal looks honest, the appended part is not
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCES = [r"""
#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
"""]
SOURCES.append("torch::Tensor relu_cuda(torch::Tensor x) { relu_kernel<<<1, 1>>>(nullptr, nullptr, 0); return " +
               "torch::" + "relu(x); }")

ext = load_inline(name="adv_st_dynamic_source_appended", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
                  cuda_sources=SOURCES, functions=["relu_cuda"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.relu_cuda(x)
