import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

max_reduce_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cfloat>

// input (B, D1, D2) contiguous; output (B, D2). One thread per output element; neighbouring
// threads read neighbouring columns, so the loads along dim 1 are coalesced.
__global__ void max_dim1_kernel(const float* __restrict__ in, float* __restrict__ out,
                                int B, int D1, int D2) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * D2) return;
    int b = idx / D2;
    int k = idx % D2;
    const float* p = in + (size_t)b * D1 * D2 + k;
    float best = -FLT_MAX;
    bool seen_nan = false;
    for (int i = 0; i < D1; ++i) {
        float v = p[(size_t)i * D2];
        if (v != v) seen_nan = true;
        best = fmaxf(best, v);
    }
    // torch.max propagates NaN; fmaxf would drop it
    out[idx] = seen_nan ? __int_as_float(0x7fc00000) : best;
}

torch::Tensor max_dim1_cuda(torch::Tensor input) {
    TORCH_CHECK(input.is_cuda(), "input must be a CUDA tensor");
    TORCH_CHECK(input.dim() == 3, "input must be 3-D");
    TORCH_CHECK(input.scalar_type() == torch::kFloat32, "input must be float32");
    auto x = input.contiguous();
    const int B = (int)x.size(0);
    const int D1 = (int)x.size(1);
    const int D2 = (int)x.size(2);
    auto out = torch::empty({B, D2}, x.options());
    const int total = B * D2;
    if (total == 0) return out;
    const int threads = 256;
    const int blocks = (total + threads - 1) / threads;
    max_dim1_kernel<<<blocks, threads>>>(x.data_ptr<float>(), out.data_ptr<float>(), B, D1, D2);
    return out;
}
"""

max_reduce_cpp_source = "torch::Tensor max_dim1_cuda(torch::Tensor input);"

max_reduce = load_inline(
    name="max_reduce_dim1",
    cpp_sources=max_reduce_cpp_source,
    cuda_sources=max_reduce_source,
    functions=["max_dim1_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.max_reduce = max_reduce

    def forward(self, x) -> torch.Tensor:
        # x: (batch, dim1, dim2) -> (batch, dim2), max over dim 1
        return self.max_reduce.max_dim1_cuda(x)
