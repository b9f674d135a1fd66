import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

rmsnorm_kernel_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

// One block per row: mean of squares, then scale every element by 1 / sqrt(ms + eps).
template <int BLOCK>
__global__ void rms_norm_kernel(const float* __restrict__ input, float* __restrict__ output,
                                int features, float eps) {
    __shared__ float warp_sums[BLOCK / 32];
    const float* in_row = input + (size_t)blockIdx.x * features;
    float* out_row = output + (size_t)blockIdx.x * features;

    float sq = 0.0f;
    for (int i = threadIdx.x; i < features; i += BLOCK) {
        float v = in_row[i];
        sq += v * v;
    }
    for (int offset = 16; offset > 0; offset >>= 1) sq += __shfl_down_sync(0xffffffff, sq, offset);
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    if (lane == 0) warp_sums[warp] = sq;
    __syncthreads();
    if (warp == 0) {
        sq = lane < BLOCK / 32 ? warp_sums[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1) sq += __shfl_down_sync(0xffffffff, sq, offset);
        if (lane == 0) warp_sums[0] = sq;
    }
    __syncthreads();
    const float inv_rms = 1.0f / sqrtf(warp_sums[0] / features + eps);

    for (int i = threadIdx.x; i < features; i += BLOCK) out_row[i] = in_row[i] * inv_rms;
}

torch::Tensor rms_norm(torch::Tensor input, float eps) {
    TORCH_CHECK(input.is_cuda(), "input must be a CUDA tensor");
    TORCH_CHECK(input.scalar_type() == torch::kFloat32, "input must be float32");
    auto x = input.contiguous();
    auto out = torch::empty_like(x);
    if (x.numel() == 0) return out;
    const int features = (int)x.size(-1);
    const int64_t rows = x.numel() / features;
    rms_norm_kernel<256><<<(unsigned int)rows, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(),
                                                      features, eps);
    return out;
}
"""

rmsnorm_cpp_source = "torch::Tensor rms_norm(torch::Tensor input, float eps);"

rmsnorm_lib = load_inline(
    name="rmsnorm_lib",
    cpp_sources=rmsnorm_cpp_source,
    cuda_sources=rmsnorm_kernel_source,
    functions=["rms_norm"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.eps = 1e-6
        self.lib = rmsnorm_lib

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lib.rms_norm(x, self.eps)
