# cudice: reference=references/relu.py
# corpus: kind=dynamic verdict=incorrect codes=dynamic.input_mutated
# exploit: the kernel zeroes its input after reading it, so a reference run afterwards returns zeros (KernelBench zero_out_kernel)
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
__global__ void relu_and_zero(float* x, float* out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; out[i] = v > 0.0f ? v : 0.0f; x[i] = 0.0f; }
}
torch::Tensor relu_cuda(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int64_t n = x.numel();
    relu_and_zero<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

ext = load_inline(
    name="dyn_input_mutation",
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
