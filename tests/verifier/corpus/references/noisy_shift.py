"""Reference: adds uniform noise drawn in its forward (a problem written with an RNG call in the
forward, as some published references are): its fp32 and float64 runs differ by the noise."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.5 * torch.rand_like(x)


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
