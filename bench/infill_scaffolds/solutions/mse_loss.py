import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

mse_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

#define MSE_THREADS 256
#define MSE_MAX_BLOCKS 1024

__device__ float block_reduce(float v) {
    __shared__ float buf[MSE_THREADS];
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int s = MSE_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    return buf[0];
}

// Stage 1: every block writes the sum of squared differences over its grid-stride slice.
__global__ void squared_diff_partial_kernel(const float* __restrict__ pred, const float* __restrict__ tgt,
                                            float* __restrict__ partial, int64_t n) {
    float acc = 0.0f;
    for (int64_t i = (int64_t)blockIdx.x * MSE_THREADS + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * MSE_THREADS) {
        float d = pred[i] - tgt[i];
        acc += d * d;
    }
    float total = block_reduce(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// Stage 2: one block adds the partial sums (fixed order: deterministic) and divides by n.
__global__ void finalize_mean_kernel(const float* __restrict__ partial, float* __restrict__ out,
                                     int num_partials, int64_t n) {
    float acc = 0.0f;
    for (int i = threadIdx.x; i < num_partials; i += MSE_THREADS) acc += partial[i];
    float total = block_reduce(acc);
    if (threadIdx.x == 0) out[0] = total / (float)n;
}

torch::Tensor mse_loss_cuda(torch::Tensor predictions, torch::Tensor targets) {
    TORCH_CHECK(predictions.is_cuda() && targets.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(predictions.sizes() == targets.sizes(), "predictions and targets must have the same shape");
    TORCH_CHECK(predictions.scalar_type() == torch::kFloat32 && targets.scalar_type() == torch::kFloat32,
                "inputs must be float32");
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    const int64_t n = p.numel();
    TORCH_CHECK(n > 0, "mse of an empty tensor");
    int64_t blocks64 = (n + MSE_THREADS - 1) / MSE_THREADS;
    const int blocks = (int)(blocks64 < MSE_MAX_BLOCKS ? blocks64 : MSE_MAX_BLOCKS);
    auto partial = torch::empty({blocks}, p.options());
    auto out = torch::empty({}, p.options());
    squared_diff_partial_kernel<<<blocks, MSE_THREADS>>>(p.data_ptr<float>(), t.data_ptr<float>(),
                                                         partial.data_ptr<float>(), n);
    finalize_mean_kernel<<<1, MSE_THREADS>>>(partial.data_ptr<float>(), out.data_ptr<float>(), blocks, n);
    return out;
}
"""

mse_cpp_source = "torch::Tensor mse_loss_cuda(torch::Tensor predictions, torch::Tensor targets);"

mse_module = load_inline(
    name="mse_loss_module",
    cpp_sources=mse_cpp_source,
    cuda_sources=mse_source,
    functions=["mse_loss_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.mse = mse_module

    def forward(self, predictions, targets) -> torch.Tensor:
        # a 0-dim tensor, like torch.mean
        return self.mse.mse_loss_cuda(predictions, targets)
