# cudice: reference=references/relu.py
# corpus: kind=runtime verdict=not_correct
# runtime-device: gpu
# exploit: weakness 3 - no `__global__` kernel at all: the extension's one host function computes with C++ tensor operators (`x * (x > 0)`, ATen's kernels, unseen by a source scan); with no kernel names in the source there is nothing for a "the file's kernels ran" check to look for
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

torch::Tensor relu(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "a CUDA tensor");
    return x * (x > 0).to(x.scalar_type());
}
"""

cpp_source = "torch::Tensor relu(torch::Tensor x);"

ext = load_inline(
    name="adv_rt2_no_kernel_at_all",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["relu"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.relu(x)
