# cudice: reference=references/relu.py
# corpus: kind=runtime verdict=not_correct
# runtime-device: gpu
# exploit: weakness 2+1 - rewrites its input: forward walks its callers' frames (reached through a running generator's frame, no traceback, no sys._getframe) and, unless a caller is the runner's checked call (`op_call`, the one request that snapshots the inputs and looks for aliasing), runs ReLU in place on the input and returns the input itself (no allocation, no separate output); timed and profiled calls mutate the tensors they were given, and their outputs still read right
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void relu_kernel(const float* x, float* out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// out may be x itself
void relu_into(torch::Tensor x, torch::Tensor out) {
    int64_t n = x.numel();
    relu_kernel<<<(int)((n + 255) / 256), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), n);
}
"""

cpp_source = "void relu_into(torch::Tensor x, torch::Tensor out);"

ext = load_inline(
    name="adv_rt2_inplace_unless_checked",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["relu_into"],
    verbose=False,
)

CHECKED = ("op_call",)  # the request that snapshots the inputs; elsewhere nothing compares them


def _running_frame(box):
    yield box[0].gi_frame.f_back  # a running generator's frame links back to whoever resumed it


def _caller_names():
    box = []
    gen = _running_frame(box)
    box.append(gen)
    frame = next(gen)
    while frame is not None:
        yield frame.f_code.co_name
        frame = frame.f_back


def _checked():
    return any(any(word in name for word in CHECKED) for name in _caller_names())


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x) if _checked() else x
        ext.relu_into(x, out)
        return out
