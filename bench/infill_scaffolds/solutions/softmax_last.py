import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

softmax_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cfloat>

#define BLOCK 256

__device__ float block_reduce_max(float v, float* shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + s]);
        __syncthreads();
    }
    float r = shared[0];
    __syncthreads();
    return r;
}

__device__ float block_reduce_sum(float v, float* shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    float r = shared[0];
    __syncthreads();
    return r;
}

// One block per row of the flattened (rows, len) view.
__global__ void softmax_rows_kernel(const float* __restrict__ in, float* __restrict__ out, int len) {
    __shared__ float shared[BLOCK];
    const float* x = in + (size_t)blockIdx.x * len;
    float* y = out + (size_t)blockIdx.x * len;

    float m = -FLT_MAX;
    for (int j = threadIdx.x; j < len; j += BLOCK) m = fmaxf(m, x[j]);
    m = block_reduce_max(m, shared);

    float sum = 0.0f;
    for (int j = threadIdx.x; j < len; j += BLOCK) sum += expf(x[j] - m);
    sum = block_reduce_sum(sum, shared);

    for (int j = threadIdx.x; j < len; j += BLOCK) y[j] = expf(x[j] - m) / sum;
}

torch::Tensor softmax_lastdim(torch::Tensor scores) {
    TORCH_CHECK(scores.is_cuda(), "scores must be a CUDA tensor");
    TORCH_CHECK(scores.scalar_type() == torch::kFloat32, "scores must be float32");
    TORCH_CHECK(scores.dim() >= 1, "scores must have at least one dimension");
    auto x = scores.contiguous();
    auto out = torch::empty_like(x);
    const int64_t len = x.size(-1);
    if (x.numel() == 0) return out;
    const int64_t rows = x.numel() / len;
    softmax_rows_kernel<<<(unsigned int)rows, BLOCK>>>(x.data_ptr<float>(), out.data_ptr<float>(), (int)len);
    return out;
}
"""

cpp_source = "torch::Tensor softmax_lastdim(torch::Tensor scores);"

softmax_ext = load_inline(
    name="softmax_lastdim",
    cpp_sources=cpp_source,
    cuda_sources=softmax_source,
    functions=["softmax_lastdim"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        # the host function treats every leading dimension as a row and returns scores' shape
        return softmax_ext.softmax_lastdim(scores)
