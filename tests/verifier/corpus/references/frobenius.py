"""Reference: divide by the Frobenius norm (KernelBench level 1 #37, smaller size)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norm = torch.norm(x, p="fro")
        return x / norm


batch_size = 16
features = 64
dim1 = 32
dim2 = 32


def get_inputs():
    return [torch.randn(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return []
