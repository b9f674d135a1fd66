"""Reference: square matmul returned in a 1-tuple (a forward may return any nesting)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor]:
        return (torch.matmul(A, B),)


N = 512


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
