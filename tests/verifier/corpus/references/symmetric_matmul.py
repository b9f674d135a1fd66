"""Reference: matmul of symmetric matrices (KernelBench level 1 #13, smaller size)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


N = 1024


def get_inputs():
    A = torch.randn(N, N)
    B = torch.randn(N, N)
    return [(A + A.T) / 2, (B + B.T) / 2]


def get_init_inputs():
    return []
