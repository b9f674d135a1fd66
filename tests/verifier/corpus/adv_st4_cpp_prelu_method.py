# cudice: reference=references/relu.py
# corpus: kind=static verdict=static_violation codes=static.cpp_torch_op
# exploit: `x.prelu(w)` in C++: a tensor method missing from the compute list passed; any method of the tensor API on a tensor that the glue tables do not allow is ATen work (st4 red team)
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

torch::Tensor relu_fwd(torch::Tensor x) {
    torch::Tensor scratch = torch::empty_like(x);
    int64_t n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), scratch.data_ptr<float>(), n);
    return x.prelu(torch::zeros({1}, x.options()));
}
"""

cpp_source = 'torch::Tensor relu_fwd(torch::Tensor x);'

ext = load_inline(
    name='adv_st4_cpp_prelu_method',
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['relu_fwd'],
    verbose=False,
)



class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = ext


    def forward(self, x):
        return self.ext.relu_fwd(x.contiguous())
