# cudice: reference=references/relu.py
# corpus: kind=hostile verdict=crash|runtime_error|static_violation
# exploit: sys.exit(0) at import (an exit status that looks like success) (the attack runs before load_inline; the source is built at run time, so nothing is compiled first)
import sys
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

sys.exit(0)

ext = load_inline(name="hostile_sys_exit_at_import", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
                  cuda_sources="".join(["__global__ void k() {}\n", "torch::Tensor relu_cuda(torch::Tensor x) { k<<<1, 1>>>(); return x; }"]),
                  functions=["relu_cuda"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.relu_cuda(x)
