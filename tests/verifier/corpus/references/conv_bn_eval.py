"""Reference: Conv2d, BatchNorm2d in eval mode (the constructor calls self.eval()), ReLU."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)
        self.eval()  # an inference model: the BatchNorm uses its running statistics

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(4, 3, 32, 32)]


def get_init_inputs():
    return [3, 16, 3]
