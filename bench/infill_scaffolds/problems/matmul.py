"""Plain matrix multiplication C = A @ B with small, awkward sizes."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B, A: (M, K), B: (K, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 200
K = 310
N = 150


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []
