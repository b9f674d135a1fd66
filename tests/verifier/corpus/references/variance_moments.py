"""Reference: a row's variance as E[x^2] - E[x]^2, on rows of mean 5 and sd 0.2: the two terms are
625 times the result, so PyTorch's fp32 result is itself ~1e-4 off the exact one."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * x).mean(-1) - x.mean(-1) ** 2


def get_inputs():
    return [torch.randn(64, 4096) * 0.2 + 5]


def get_init_inputs():
    return []
