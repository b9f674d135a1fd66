"""Reference: argmax over dim 0 (KernelBench level 1 #51 style, dim=0)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=0)


def get_inputs():
    return [torch.randn(16, 256, 256)]


def get_init_inputs():
    return []
