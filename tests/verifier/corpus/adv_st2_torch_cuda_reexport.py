# cudice: reference=references/relu.py
# corpus: kind=static verdict=static_violation codes=static.torch_op_in_forward
# exploit: `torch.cuda.torch` is `torch`: `torch.cuda.torch.relu(x)` did the work under the `torch.cuda.*` (device plumbing) exemption
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void fill_kernel(float* y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 0.0f;
}

void scratch(torch::Tensor y) {
    fill_kernel<<<(y.numel() + 255) / 256, 256>>>(y.data_ptr<float>(), y.numel());
}
"""

ext = load_inline(
    name="adv_st2_torch_cuda_reexport",
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
        return torch.cuda.torch.relu(x)
