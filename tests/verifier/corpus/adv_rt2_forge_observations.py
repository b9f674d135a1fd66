# cudice: reference=references/relu.py
# corpus: kind=runtime verdict=not_correct
# runtime-device: gpu
# exploit: weakness 1+2 - ReLU in place on the input, the input returned as the output, on every call; in __init__ the file walks its callers' frames (through a running generator's frame) to the runner's server object and wraps its `reply` so every answer drops its `diagnostics`: the in-runner observations (input mutated, output aliasing the input, threads, guards, hooks, dispatcher) never reach the judge
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void relu_inplace_kernel(float* x, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && x[i] < 0.0f) x[i] = 0.0f;
}

torch::Tensor relu_(torch::Tensor x) {
    int64_t n = x.numel();
    relu_inplace_kernel<<<(int)((n + 255) / 256), 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), n);
    return x;
}
"""

cpp_source = "torch::Tensor relu_(torch::Tensor x);"

ext = load_inline(
    name="adv_rt2_forge_observations",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["relu_"],
    verbose=False,
)


def _running_frame(box):
    yield box[0].gi_frame.f_back  # a running generator's frame links back to whoever resumed it


def _callers():
    box = []
    gen = _running_frame(box)
    box.append(gen)
    frame = next(gen)
    while frame is not None:
        yield frame
        frame = frame.f_back


def _quiet(send):
    def reply(header, blobs=None):
        if isinstance(header, dict) and header.get("ok"):
            header = {k: v for k, v in header.items() if k != "diagnostics"}
        return send(header, blobs)

    return reply


def _silence_server():
    for frame in _callers():
        server = frame.f_locals.get("self")
        if server is not None and callable(getattr(server, "reply", None)) and hasattr(server, "model"):
            server.reply = _quiet(server.reply)
            return


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        _silence_server()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.relu_(x)
