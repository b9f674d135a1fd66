"""Reference: nn.LayerNorm with its weight and bias."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    return [torch.randn(32, 1024)]


def get_init_inputs():
    return [1024]
