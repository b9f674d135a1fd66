# cudice: reference=references/relu.py
# corpus: kind=hostile verdict=crash
# exploit: os._exit(7) at import kills the worker process (the attack runs before load_inline, so no compiler is needed)
import os
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

os._exit(7)

ext = load_inline(name="hostile_exit_at_import", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
                  cuda_sources="__global__ void k() {}\ntorch::Tensor relu_cuda(torch::Tensor x) { k<<<1, 1>>>(); return x; }",
                  functions=["relu_cuda"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.relu_cuda(x)
