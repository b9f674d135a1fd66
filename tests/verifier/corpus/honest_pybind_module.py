# cudice: reference=references/relu.py
# corpus: kind=honest verdict=correct
# exploit: none - no `functions=`: the module is bound with PYBIND11_MODULE and `m.def("forward", ..., py::arg("x"))`; forward calls `ext.forward`
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}
torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

cpp_source = r"""
#include <torch/extension.h>
torch::Tensor relu_forward(torch::Tensor x);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &relu_forward, "ReLU (CUDA)", py::arg("x"));
}
"""

ext = load_inline(name="honest_pybind_module", cpp_sources=cpp_source, cuda_sources=cuda_source, verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.forward(x.contiguous())
