# cudice: reference=references/conv2d.py
# corpus: kind=honest verdict=correct
# exploit: none - KernelBench-style conv: a lazy loader with `global _ext`, c10::optional bias, OptionalCUDAGuard, dim3 grids, AT_DISPATCH_FLOATING_TYPES, AT_CUDA_CHECK, a ceil_div helper, scalar min/max, parameters initialised like nn.Conv2d, `with torch.cuda.device`
import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

conv_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <vector>

inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

template <typename scalar_t>
__global__ void conv_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ w, const scalar_t* __restrict__ b,
                            scalar_t* __restrict__ y, int N, int C, int H, int W, int K, int R) {
    int ow = blockIdx.x * blockDim.x + threadIdx.x;
    int oh = blockIdx.y * blockDim.y + threadIdx.y;
    int nk = blockIdx.z;
    if (ow >= W - R + 1 || oh >= H - R + 1) return;
    int n = nk / K, k = nk % K;
    scalar_t acc = b ? b[k] : scalar_t(0);
    #pragma unroll 4
    for (int c = 0; c < C; ++c)
        for (int i = 0; i < R; ++i)
            for (int j = 0; j < R; ++j)
                acc += __ldg(&x[((n * C + c) * H + oh + i) * W + ow + j]) * w[((k * C + c) * R + i) * R + j];
    y[((n * K + k) * (H - R + 1) + oh) * (W - R + 1) + ow] = acc;
}

torch::Tensor conv_forward(torch::Tensor input, torch::Tensor weight, c10::optional<torch::Tensor> bias) {
    TORCH_CHECK(input.dim() == 4, "input must be NCHW");
    const c10::cuda::OptionalCUDAGuard guard(device_of(input));
    torch::Tensor x_contig = input.contiguous();
    const int N = x_contig.size(0), C = x_contig.size(1), H = x_contig.size(2), W = x_contig.size(3);
    const int K = weight.size(0), R = weight.size(2);
    std::vector<int64_t> out_sizes = {N, K, H - R + 1, W - R + 1};
    auto output = torch::empty(out_sizes, x_contig.options());
    if (output.numel() == 0) return output;
    const dim3 threads(16, 16);
    const dim3 blocks(ceil_div(W - R + 1, 16), ceil_div(H - R + 1, 16), N * K);
    auto stream = c10::cuda::getCurrentCUDAStream();
    int tpb = min(1024, max(32, (int)threads.x * (int)threads.y));
    (void)tpb;
    AT_DISPATCH_FLOATING_TYPES(x_contig.scalar_type(), "conv_forward", [&] {
        conv_kernel<scalar_t><<<blocks, threads, 0, stream>>>(
            x_contig.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(),
            bias.has_value() ? bias->data_ptr<scalar_t>() : nullptr,
            output.data_ptr<scalar_t>(), N, C, H, W, K, R);
    });
    AT_CUDA_CHECK(cudaGetLastError());
    return output;
}
"""
conv_cpp = "torch::Tensor conv_forward(torch::Tensor input, torch::Tensor weight, c10::optional<torch::Tensor> bias);"

_ext = None


def _get_ext():
    global _ext
    if _ext is None:
        _ext = load_inline(name="honest_conv_lazy_global", cpp_sources=conv_cpp, cuda_sources=conv_src, functions=["conv_forward"],
                           extra_cuda_cflags=["-O3", "--use_fast_math"], with_cuda=True, verbose=False)
    return _ext


class ModelNew(nn.Module):
    def __init__(self, c, k, r, bias: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(k, c, r, r))
        self.bias = nn.Parameter(torch.empty(k)) if bias else None
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = c * r * r
            bound = 1 / math.sqrt(fan_in)
            nn.init.uniform_(self.bias, -bound, bound)
        _get_ext()  # build at construction; forward reaches the same module through the lazy loader

    @staticmethod
    def _prep(x: torch.Tensor) -> torch.Tensor:
        return x if x.is_contiguous() else x.contiguous()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self._prep(x)
        with torch.cuda.device(x.device):
            out = _get_ext().conv_forward(x, self.weight, self.bias)
        torch.cuda.synchronize()
        return out
