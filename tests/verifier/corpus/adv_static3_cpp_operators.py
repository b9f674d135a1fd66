# cudice: reference=references/relu.py
# corpus: kind=static verdict=static_violation codes=static.cpp_torch_op
# exploit: the kernel runs (on a scratch buffer, for the profiler) while the returned tensor is computed by C++ tensor operators on names the wrapper derives (`auto xc = x.contiguous()`, `out *= (xc >= 0)` after a copy): ATen's kernels do the work with no ATen function named (adv_rt2_profiler_gate's mechanism, spelled through locals and compound assignment)
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

torch::Tensor relu(torch::Tensor x) {
    auto xc = x.contiguous();
    auto scratch = torch::empty_like(xc);
    int64_t n = xc.numel();
    relu_kernel<<<(int)((n + 255) / 256), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), scratch.data_ptr<float>(), n);
    auto out = xc.clone();
    out *= (xc >= 0);
    return out;
}
"""

cpp_source = "torch::Tensor relu(torch::Tensor x);"

ext = load_inline(
    name="adv_static3_cpp_operators",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["relu"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.relu(x)
