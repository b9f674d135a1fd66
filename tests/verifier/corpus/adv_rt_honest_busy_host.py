# cudice: reference=references/relu.py
# corpus: kind=runtime verdict=correct
# runtime-device: gpu
# exploit: none (class 8, honest) - a plain ReLU on the current stream, verified while the host is busy (the GPU test runs it among twelve at once next to nvcc builds); host wall-clock evidence flagged such kernels `dynamic.side_stream`
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void busy_host_relu_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

torch::Tensor busy_host_relu(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "x must be a contiguous CUDA tensor");
    auto out = torch::empty_like(x);
    int64_t n = x.numel();
    const int threads = 256;
    busy_host_relu_kernel<<<(n + threads - 1) / threads, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

cpp_source = "torch::Tensor busy_host_relu(torch::Tensor x);"

ext = load_inline(
    name="adv_rt_honest_busy_host",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["busy_host_relu"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.fn = ext.busy_host_relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x.contiguous())
