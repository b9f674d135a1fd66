# cudice: reference=references/relu.py
# corpus: kind=hostile verdict=runtime_error|static_violation
# exploit: writes into ~ and next to its working directory, then fails (the attack runs before load_inline; the source is built at run time, so nothing is compiled first)
import os
import pathlib
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

pathlib.Path(os.path.expanduser('~/cudice_hostile_marker')).write_text('pwned')
pathlib.Path('../cudice_hostile_marker').write_text('pwned')
raise RuntimeError('wrote outside')

ext = load_inline(name="hostile_write_outside", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
                  cuda_sources="".join(["__global__ void k() {}\n", "torch::Tensor relu_cuda(torch::Tensor x) { k<<<1, 1>>>(); return x; }"]),
                  functions=["relu_cuda"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.relu_cuda(x)
