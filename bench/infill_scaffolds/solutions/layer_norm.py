import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

layernorm_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

static constexpr int THREADS = 256;

__device__ float block_sum(float v, float* buf) {
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    float total = buf[0];
    __syncthreads();
    return total;
}

// One block per row; two passes (mean, then the biased variance around it) for accuracy.
__global__ void layernorm_kernel(const float* __restrict__ x, float* __restrict__ y, int hidden, float eps) {
    __shared__ float buf[THREADS];
    const float* xr = x + (size_t)blockIdx.x * hidden;
    float* yr = y + (size_t)blockIdx.x * hidden;

    float s = 0.0f;
    for (int j = threadIdx.x; j < hidden; j += THREADS) s += xr[j];
    const float mean = block_sum(s, buf) / hidden;

    float sq = 0.0f;
    for (int j = threadIdx.x; j < hidden; j += THREADS) {
        float d = xr[j] - mean;
        sq += d * d;
    }
    const float var = block_sum(sq, buf) / hidden;
    const float inv_std = 1.0f / sqrtf(var + eps);

    for (int j = threadIdx.x; j < hidden; j += THREADS) yr[j] = (xr[j] - mean) * inv_std;
}

torch::Tensor layernorm_forward(torch::Tensor x, double eps) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    if (xc.numel() == 0) return y;
    const int hidden = (int)xc.size(-1);
    const int64_t rows = xc.numel() / hidden;
    layernorm_kernel<<<(unsigned int)rows, THREADS>>>(xc.data_ptr<float>(), y.data_ptr<float>(), hidden,
                                                      (float)eps);
    return y;
}
"""

layernorm_cpp_source = "torch::Tensor layernorm_forward(torch::Tensor x, double eps);"

layernorm = load_inline(
    name="layernorm_no_affine",
    cpp_sources=layernorm_cpp_source,
    cuda_sources=layernorm_source,
    functions=["layernorm_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    """LayerNorm over the last dimension, no weight or bias."""

    def __init__(self):
        super().__init__()
        self.eps = 1e-5

    def forward(self, hidden) -> torch.Tensor:
        return layernorm.layernorm_forward(hidden, self.eps)
