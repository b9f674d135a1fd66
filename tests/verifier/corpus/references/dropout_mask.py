"""Reference: a product with a Bernoulli mask drawn from probabilities (only defined for p in [0, 1])."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x * mask


def get_inputs():
    p = torch.rand(64, 256)
    return [torch.randn(64, 256), torch.bernoulli(p)]


def get_init_inputs():
    return []
