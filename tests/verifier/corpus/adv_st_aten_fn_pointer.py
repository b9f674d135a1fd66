# cudice: reference=references/matmul.py
# corpus: kind=static verdict=static_violation codes=static.cpp_torch_op
# exploit: the wrapper takes `&at::matmul` as a function pointer and calls it through a local variable, so no ATen call is spelled out
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
__global__ void touch_kernel(float* c) { }
using MatmulFn = at::Tensor (*)(const at::Tensor&, const at::Tensor&);

torch::Tensor matmul_cuda(torch::Tensor a, torch::Tensor b) {
    MatmulFn op = &at::matmul;
    auto c = op(a, b);
    touch_kernel<<<1, 1>>>(c.data_ptr<float>());
    return c;
}
"""

ext = load_inline(name="adv_st_aten_fn_pointer", cpp_sources="torch::Tensor matmul_cuda(torch::Tensor a, torch::Tensor b);",
                  cuda_sources=cuda_source, functions=["matmul_cuda"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return ext.matmul_cuda(A, B)
