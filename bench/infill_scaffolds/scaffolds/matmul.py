import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

matmul_source = """"""

cpp_source = "torch::Tensor matmul_cuda(torch::Tensor A, torch::Tensor B);"

matmul = load_inline(
    name="matmul",
    cpp_sources=cpp_source,
    cuda_sources=matmul_source,
    functions=["matmul_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    """C = A @ B with a hand-written CUDA kernel (A: M x K, B: K x N, fp32)."""

    def __init__(self):
        super().__init__()
        self.matmul = matmul

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return self.matmul.matmul_cuda(A.contiguous(), B.contiguous())
