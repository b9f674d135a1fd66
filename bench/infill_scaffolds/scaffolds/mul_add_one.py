import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

mul_add_one_source = """
"""

mul_add_one_cpp = "torch::Tensor mul_add_one_cuda(torch::Tensor a, torch::Tensor b);"

fused = load_inline(
    name="fused_mul_add_one",
    cpp_sources=mul_add_one_cpp,
    cuda_sources=mul_add_one_source,
    functions=["mul_add_one_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b) -> torch.Tensor:
        return fused.mul_add_one_cuda(a, b)
