"""Reference: an inference BatchNorm2d (the constructor calls self.eval()) followed by a 2x2 max pool."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels: int = 64) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        self.pool = nn.MaxPool2d(2)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.bn(x))


def get_inputs():
    return [torch.randn(8, 64, 32, 32)]


def get_init_inputs():
    return []
