# cudice: reference=references/softmax.py
# corpus: kind=static verdict=static_violation codes=static.cpp_torch_op
# exploit: `using namespace at;` then `softmax(x, 1)` and `exp(x)` unqualified in a helper: ATen computes, the custom kernel only copies
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
using namespace at;

__global__ void copy_kernel(const float* x, float* y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}

static Tensor rows(const Tensor& x) {
    return softmax(x, 1);
}

torch::Tensor softmax_cuda(torch::Tensor x) {
    auto s = rows(x);
    auto y = torch::empty_like(s);
    copy_kernel<<<(s.numel() + 255) / 256, 256>>>(s.data_ptr<float>(), y.data_ptr<float>(), s.numel());
    return y;
}
"""

ext = load_inline(name="adv_st_using_namespace_softmax", cpp_sources="torch::Tensor softmax_cuda(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["softmax_cuda"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.softmax_cuda(x)
