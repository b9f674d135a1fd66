# cudice: reference=references/matmul.py
# corpus: kind=static verdict=static_violation codes=static.torch_op_in_forward
# exploit: `from torch import mm as q` then `q(A, B)` in forward: the alias hides torch.mm behind a one-letter name
import torch
import torch.nn as nn
from torch import mm as q
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
__global__ void copy_kernel(const float* x, float* y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
torch::Tensor copy(torch::Tensor x) {
    auto y = torch::empty_like(x);
    copy_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""

ext = load_inline(name="adv_st_from_import_alias", cpp_sources="torch::Tensor copy(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["copy"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return ext.copy(q(A, B))
