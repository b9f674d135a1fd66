"""SiLU (swish) activation, applied elementwise: x * sigmoid(x)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """Elementwise x * sigmoid(x)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


batch_size = 16
dim = 16384


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
