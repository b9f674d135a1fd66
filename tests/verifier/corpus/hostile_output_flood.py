# cudice: reference=references/relu.py
# corpus: kind=hostile verdict=runtime_error|static_violation
# exploit: floods stdout and stderr with 64 MiB each at import, then fails (the attack runs before load_inline; the source is built at run time, so nothing is compiled first)
import sys
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_chunk = 'A' * (1 << 20)
for _ in range(64):
    sys.stdout.write(_chunk)
    sys.stderr.write(_chunk)
raise RuntimeError('flooded')

ext = load_inline(name="hostile_output_flood", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
                  cuda_sources="".join(["__global__ void k() {}\n", "torch::Tensor relu_cuda(torch::Tensor x) { k<<<1, 1>>>(); return x; }"]),
                  functions=["relu_cuda"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.relu_cuda(x)
