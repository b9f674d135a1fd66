# cudice: reference=references/softmax.py
# corpus: kind=static verdict=static_violation codes=static.torch_op_in_forward
# exploit: `F = torch.nn.functional` assigned (not imported) at module level, then `F.softmin(-x)` in forward
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

T = torch
F = T.nn.functional

cuda_source = r"""
#include <torch/extension.h>
__global__ void neg_kernel(const float* x, float* y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = -x[i];
}
torch::Tensor negate(torch::Tensor x) {
    auto y = torch::empty_like(x);
    neg_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""

ext = load_inline(name="adv_st_functional_alias", cpp_sources="torch::Tensor negate(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["negate"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.softmin(ext.negate(x), dim=1)
