import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Sum over the last dimension of a 2-D tensor: (rows, cols) -> (rows,)
row_sum_source = """"""

row_sum_cpp_source = """
torch::Tensor row_sum_cuda(torch::Tensor x);
"""

row_sum = load_inline(
    name="row_sum",
    cpp_sources=row_sum_cpp_source,
    cuda_sources=row_sum_source,
    functions=["row_sum_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    """Row sum with a custom CUDA kernel."""

    def __init__(self):
        super().__init__()
        self.row_sum = row_sum

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.row_sum.row_sum_cuda(x)
