# cudice: reference=references/relu.py
# corpus: kind=static verdict=static_violation codes=static.build_injection
# exploit: fourth runtime red team - an `#include` of an absolute path makes the compiler (outside the runners' boundary, as the user who runs cudice) read any file, and its error quotes the lines back
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include "/etc/hostname"
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
torch::Tensor relu_cuda(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int64_t n = x.numel();
    relu_kernel<<<(int)((n + 255) / 256), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

ext = load_inline(
    name="relu_ext",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["relu_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_cuda(x)
