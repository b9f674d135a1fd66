# cudice: reference=references/relu.py
# corpus: kind=hostile verdict=timeout
# exploit: a kernel that never terminates
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

// One extension for the GPU-hostile corpus (one build); each candidate calls its own wrapper.
__global__ void far_write(const float* x, float* out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i * 1000003LL + (1LL << 40)] = x[i];
}
__global__ void spin_forever(float* out, volatile int* flag) {
    while (*flag == 0) { }
    out[0] = 1.0f;
}
__global__ void relu_kernel(const float* x, float* out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// segfault in the host wrapper
torch::Tensor null_deref(torch::Tensor x) {
    volatile int* p = nullptr;
    *p = 1;
    auto out = torch::empty_like(x);
    relu_kernel<<<1, 1>>>(x.data_ptr<float>(), out.data_ptr<float>(), 0);
    return out;
}
// illegal address: poisons the CUDA context
torch::Tensor illegal_write(torch::Tensor x) {
    auto out = torch::empty_like(x);
    far_write<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.numel());
    return out;
}
// a kernel that never terminates
torch::Tensor hang(torch::Tensor x) {
    auto out = torch::empty_like(x);
    auto flag = torch::zeros({1}, x.options().dtype(torch::kInt32));
    spin_forever<<<1, 32>>>(out.data_ptr<float>(), flag.data_ptr<int>());
    return out;
}
// 4 TiB of device memory
torch::Tensor gpu_oom(torch::Tensor x) {
    auto huge = torch::empty({1LL << 40}, x.options());
    auto out = torch::empty_like(x);
    relu_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.numel());
    return out;
}
"""

cpp_source = "torch::Tensor null_deref(torch::Tensor x);\ntorch::Tensor illegal_write(torch::Tensor x);\ntorch::Tensor hang(torch::Tensor x);\ntorch::Tensor gpu_oom(torch::Tensor x);"

ext = load_inline(
    name="cudice_hostile_corpus",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['null_deref', 'illegal_write', 'hang', 'gpu_oom'],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.hang(x)
