"""Reference: sum over dim 1 of a square matrix (square, so a wrong axis keeps the shape)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=1)


def get_inputs():
    return [torch.randn(1024, 1024)]


def get_init_inputs():
    return []
