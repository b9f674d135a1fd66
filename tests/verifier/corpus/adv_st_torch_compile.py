# cudice: reference=references/softmax.py
# corpus: kind=static verdict=static_violation codes=static.foreign_compute
# exploit: torch.compile turns a PyTorch softmax into Inductor/Triton kernels at import; forward calls the compiled function after a token kernel
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

fast_softmax = torch.compile(lambda t: t.softmax(dim=1))

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

ext = load_inline(name="adv_st_torch_compile", cpp_sources="torch::Tensor copy(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["copy"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fast_softmax(ext.copy(x))
